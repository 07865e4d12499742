"""`ExponentialUpdateLossScaleManager`: the one dynamic loss-scale state machine.

Every dynamic scale in this project (contrib's, and TF2's `DynamicLossScale`
in `managers.loss_scale`) is this class with different names and settings.
"""

import inspect
from typing import Any, Dict, List, Optional

import tensorflow as tf

from mp_optimizer import gating
from mp_optimizer.managers import _graph
from mp_optimizer.managers import _validation
from mp_optimizer.managers import base
from mp_optimizer.managers import floor

HYSTERESIS_MODES = ("contrib", "consecutive", "sticky")


class ExponentialUpdateLossScaleManager(base.LossScaleManager):
  """Grows the scale after a run of clean steps, shrinks it on overflow.

  A scale that is too small lets float16 gradients underflow; one that is too
  large makes them overflow to Inf. This manager searches between the two, once
  per step, exactly as `tf.contrib.mixed_precision` did (with
  `hysteresis="contrib"`, the default):

  ```
  on a finite step:
      if good_steps + 1 >= incr_every_n_steps:
          if isfinite(scale * incr_ratio):
              scale = min(scale * incr_ratio, max_loss_scale)
          good_steps = 0; bad_steps = 0
      else: good_steps += 1
  on a non-finite step (the optimizer skips its update):
      if bad_steps + 1 >= decr_every_n_nan_or_inf:
          scale = max(min_loss_scale, scale * decr_ratio)
          good_steps = 0; bad_steps = 0
      else: bad_steps += 1; good_steps = 0
  ```

  A finite step does not clear `bad_steps`: contrib counts overflows since the
  last scale change, not consecutive ones. Two other `hysteresis` modes change
  only that counter: `"consecutive"` clears `bad_steps` on every finite step
  (only back-to-back overflows shrink the scale); `"sticky"` keeps `bad_steps`
  at its limit after a shrink, so once the allowance of
  `decr_every_n_nan_or_inf - 1` tolerated overflows is used up, every further
  overflow shrinks the scale until the scale next grows.

  State: float32 `loss_scale`, int32 `good_steps`, int32 `bad_steps`: the
  names and dtypes contrib wrote to checkpoints. They are non-trainable
  resource variables in GLOBAL_VARIABLES. Built while a graph is the default,
  the manager makes them in its constructor under the current name scope, as
  contrib did (`optimizers/loss_scale` inside `variable_scope("optimizers")`);
  built with no graph, it makes them at the root name scope of each graph
  that asks for the scale, the first time it asks.

  Example:

  ```python
  manager = managers.ExponentialUpdateLossScaleManager(
      init_loss_scale=2**15, incr_every_n_steps=2000)
  opt = mp_optimizer.LossScaleOptimizer(
      tf.compat.v1.train.AdamOptimizer(1e-3), manager)
  ```

  Args:
    init_loss_scale: Starting scale, finite, >= `min_loss_scale` and <=
      `max_loss_scale`.
    incr_every_n_steps: Positive whole number (an int, or a float such as
      2000.0): finite steps in a row before growing.
    decr_every_n_nan_or_inf: Positive whole number: overflows before
      shrinking.
    incr_ratio: Growth factor, > 1.
    decr_ratio: Shrink factor, 0 < decr_ratio < 1.
    min_loss_scale: Keyword-only floor, > 0 (default 1, contrib's floor).
      Values below 1 are allowed when asked for explicitly.
    max_loss_scale: Keyword-only ceiling, None (only float32's range) or a
      finite number >= `init_loss_scale`.
    hysteresis: Keyword-only, one of "contrib", "consecutive", "sticky".
    fail_at_floor_after: Keyword-only, None (default) or a positive whole
      number N:
      after N non-finite steps in a row at `min_loss_scale`, the step fails
      with `tf.errors.InvalidArgumentError` saying what to look for, instead
      of skipping steps forever. Counted in a LOCAL variable
      `nonfinite_steps_at_min_scale` (not checkpointed).

  Raises:
    TypeError: If a number is not a Python/NumPy int or float (bools
      rejected), or `hysteresis` is not a str.
    ValueError: If a value is outside the range given above, or a step count
      has a fractional part.
  """

  _SCALE_NAME = "loss_scale"
  _GOOD_STEPS_NAME = "good_steps"
  _BAD_STEPS_NAME = "bad_steps"  # None: bad_steps is always 0, not stored.
  _COUNTER_DTYPE = tf.int32
  # TF2's face shrinks by dividing by its multiplier (`incr_ratio`), as TF
  # does, so multipliers that are not powers of two give TF's numbers bit for
  # bit; contrib multiplies by `decr_ratio`.
  _SHRINK_BY_DIVIDING = False
  # Constructor argument names as a face calls them, for error messages.
  _ARG_NAMES = {"init_loss_scale": "init_loss_scale",
                "incr_every_n_steps": "incr_every_n_steps",
                "incr_ratio": "incr_ratio"}

  def __init__(self,
               init_loss_scale: float,
               incr_every_n_steps: int,
               decr_every_n_nan_or_inf: int = 2,
               incr_ratio: float = 2,
               decr_ratio: float = 0.8,
               *,
               min_loss_scale: float = 1,
               max_loss_scale: Optional[float] = None,
               hysteresis: str = "contrib",
               fail_at_floor_after: Optional[int] = None):
    check, arg = _validation, self._ARG_NAMES
    self._min = check.check_greater("min_loss_scale", min_loss_scale, 0.0)
    self._max = (None if max_loss_scale is None else
                 check.check_at_least("max_loss_scale", max_loss_scale,
                                      self._min))
    self._init = check.check_at_least(arg["init_loss_scale"], init_loss_scale,
                                      self._min)
    if self._max is not None and self._init > self._max:
      raise ValueError(f"`{arg['init_loss_scale']}` must be <= max_loss_scale "
                       f"({self._max:g}), got {self._init:g}.")
    self._incr_every = check.check_step_count(arg["incr_every_n_steps"],
                                              incr_every_n_steps)
    self._decr_every = check.check_step_count("decr_every_n_nan_or_inf",
                                              decr_every_n_nan_or_inf)
    self._incr_ratio = check.check_greater(arg["incr_ratio"], incr_ratio, 1.0)
    self._decr_ratio = check.check_open_unit("decr_ratio", decr_ratio)
    self._hysteresis = check.check_choice("hysteresis", hysteresis,
                                          HYSTERESIS_MODES)
    self._fail_after = check.check_optional_step_count(
        "fail_at_floor_after", fail_at_floor_after)
    specs = [_graph.VariableSpec(self._SCALE_NAME, tf.float32, self._init),
             _graph.VariableSpec(self._GOOD_STEPS_NAME, self._COUNTER_DTYPE, 0)]
    if self._BAD_STEPS_NAME is not None:
      specs.append(_graph.VariableSpec(self._BAD_STEPS_NAME,
                                       self._COUNTER_DTYPE, 0))
    if self._fail_after is not None:  # Not checkpointed: old files restore.
      specs.append(_graph.VariableSpec(floor.STREAK, tf.int32, 0,
                                       checkpointed=False))
    self._state = _graph.PerGraphVariables(self, specs)
    self._state.create_if_graph()

  init_loss_scale = property(lambda self: self._init)
  incr_every_n_steps = property(lambda self: self._incr_every)
  decr_every_n_nan_or_inf = property(lambda self: self._decr_every)
  incr_ratio = property(lambda self: self._incr_ratio)
  decr_ratio = property(lambda self: self._decr_ratio)
  min_loss_scale = property(lambda self: self._min)
  max_loss_scale = property(lambda self: self._max)
  hysteresis = property(lambda self: self._hysteresis)

  @property
  def dynamic(self) -> bool:
    return True

  def get_loss_scale(self) -> tf.Tensor:
    """Reads the current scale (a float32 scalar) of the current graph."""
    state = self._state.get(f"{type(self).__name__}.get_loss_scale")
    return state[self._SCALE_NAME].read_value()

  def variables(self) -> List[tf.Variable]:
    return list(self._state.existing().values())

  def _adopt_state(self, variables) -> None:
    """Takes over existing state variables by name (see `managers.get`)."""
    self._state.adopt(variables)

  def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
    """Returns the op that moves the state machine one step.

    Several steps may update one state at once (two train ops of one manager
    in one `sess.run`, asynchronous workers sharing parameter servers), so no
    step writes what it did not change: a finite step that does not grow only
    adds 1 to `good_steps`, a counter is cleared by assigning 0, and the scale
    is written (from a fresh read) only by the step that grows or shrinks it.
    Run concurrently, any two steps end as if run one after the other, except
    two scale changes at the same instant, which may count as one (TF's
    built-in shares this).

    Args:
      finite_grads: Scalar bool tensor: were all of this step's gradients
        finite? Under `tf.distribute` it must be the same on every replica and
        this must be called in cross-replica context.

    Returns:
      One op that updates the scale and counters.
    """
    base.check_finite_flag(finite_grads)
    state = self._state.get(f"{type(self).__name__}.update_loss_scale")
    scale_var = state[self._SCALE_NAME]
    good_var = state[self._GOOD_STEPS_NAME]
    bad_var = state.get(self._BAD_STEPS_NAME)
    with tf.name_scope("loss_scale_update"):
      update = self._next_state(scale_var, good_var, bad_var, finite_grads)
      if self._fail_after is not None:
        update = tf.group(update, floor.guard(
            state[floor.STREAK], scale_var.read_value(), finite_grads,
            self._min, self._fail_after))
      return update

  def _next_state(self, scale_var, good_var, bad_var, finite):
    """Builds the transition of the class docstring as race-free updates.

    Each case is one side of a Switch (`gating.gate`), so a step runs only
    the writes of its own case:

    ```
    finite, no growth due:  good_steps += 1 ("consecutive": bad_steps = 0)
    finite, growth due:     scale = grown(scale) if that is allowed;
                            good_steps = 0; bad_steps = 0
    non-finite, no shrink:  bad_steps += 1; good_steps = 0
    non-finite, shrink:     scale = shrunk(scale); good_steps = 0;
                            bad_steps = 0 (kept as it is by "sticky")
    ```
    """
    zero, one = (tf.constant(n, self._COUNTER_DTYPE) for n in (0, 1))
    good = good_var.read_value()
    bad = zero if bad_var is None else bad_var.read_value()
    clear = lambda *variables: [v.assign(zero, read_value=False)
                                for v in variables if v is not None]

    def count(_):
      keep_bad = self._hysteresis != "consecutive"
      return tf.group(good_var.assign_add(one, read_value=False),
                      *clear(None if keep_bad else bad_var))

    def grow(_):
      scale = scale_var.read_value()
      grown = scale * self._incr_ratio
      allowed = tf.math.is_finite(grown)
      if self._max is not None:
        grown = tf.minimum(grown, self._max)
      write = lambda _: scale_var.assign(grown, read_value=False)
      return tf.group(gating.gate(allowed, write, tf.no_op),
                      *clear(good_var, bad_var))

    def shrink(_):
      scale = scale_var.read_value()
      shrunk = (scale / self._incr_ratio if self._SHRINK_BY_DIVIDING
                else scale * self._decr_ratio)
      keep_bad = self._hysteresis == "sticky"
      return tf.group(scale_var.assign(tf.maximum(shrunk, self._min),
                                       read_value=False),
                      *clear(None if keep_bad else bad_var))

    def overflow():
      if bad_var is None or self._decr_every == 1:
        changed = shrink(None)
      else:
        changed = gating.gate(
            bad + 1 >= self._decr_every, shrink,
            lambda: bad_var.assign_add(one, read_value=False))
      return tf.group(changed, *clear(good_var))

    counting = tf.logical_and(finite, good + 1 < self._incr_every)
    return gating.gate(counting, count,
                       lambda: gating.gate(finite, grow, overflow))

  def __repr__(self) -> str:
    return (f"{type(self).__name__}(init_loss_scale={self._init!r}, "
            f"incr_every_n_steps={self._incr_every!r}, "
            f"decr_every_n_nan_or_inf={self._decr_every!r}, "
            f"incr_ratio={self._incr_ratio!r}, "
            f"decr_ratio={self._decr_ratio!r}{self._extras_repr()})")

  def _extras(self) -> Dict[str, Any]:
    """The keyword-only settings that differ from the constructor's defaults.

    The defaults are read from the signature of the class's own `__init__`,
    so they are stated in one place.
    """
    given = {"min_loss_scale": self._min, "max_loss_scale": self._max,
             "hysteresis": self._hysteresis,
             "fail_at_floor_after": self._fail_after}
    params = inspect.signature(type(self).__init__).parameters
    return {name: value for name, value in given.items()
            if name in params and value != params[name].default}

  def _extras_repr(self) -> str:
    return "".join(f", {name}={value!r}"
                   for name, value in self._extras().items())
