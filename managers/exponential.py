"""`ExponentialUpdateLossScaleManager`: the one dynamic loss-scale state machine.

Every dynamic scale in this project (contrib's, and TF2's `DynamicLossScale`
in `managers.loss_scale`) is this class with a different `Face` (names,
counter dtype, how it shrinks) and different settings.
"""

import dataclasses
import inspect
from typing import Any, Dict, List, Optional

import tensorflow as tf

from mp_optimizer._internal import per_graph
from mp_optimizer._internal import validation
from mp_optimizer.managers import base
from mp_optimizer.managers import floor
from mp_optimizer.managers import transition

HYSTERESIS_MODES = transition.HYSTERESIS_MODES


@dataclasses.dataclass(frozen=True)
class Face:
  """How one public face names and stores the one state machine.

  Attributes:
    scale_name: Name (and checkpoint key) of the float32 scale variable.
    good_steps_name: Name of the good-step counter.
    bad_steps_name: Name of the overflow counter; None when it is always 0
      (one overflow per shrink) and not stored.
    counter_dtype: The counters' dtype as that face's checkpoints hold it.
    shrink_by_dividing: Shrink as `scale / incr_ratio` (TF) instead of
      `scale * decr_ratio` (contrib).
    arg_names: Constructor argument names as the face calls them, for
      messages.
  """
  scale_name: str
  good_steps_name: str
  bad_steps_name: Optional[str]
  counter_dtype: tf.DType
  shrink_by_dividing: bool
  arg_names: Dict[str, str]


CONTRIB_FACE = Face("loss_scale", "good_steps", "bad_steps", tf.int32, False,
                    {"init_loss_scale": "init_loss_scale",
                     "incr_every_n_steps": "incr_every_n_steps",
                     "incr_ratio": "incr_ratio"})


class ExponentialUpdateLossScaleManager(base.LossScaleManager):
  """Grows the scale after a run of clean steps, shrinks it on overflow.

  A scale that is too small lets float16 gradients underflow; one that is too
  large makes them overflow to Inf. This manager searches between the two, once
  per step, exactly as `tf.contrib.mixed_precision` did (with
  `hysteresis="contrib"`, the default); see `managers.transition` for the
  algorithm as pseudocode and the two other `hysteresis` modes.

  Each update holds the state's mutex (`_internal.per_graph.Mutex`), so
  concurrent updates (two train ops, threads, asynchronous workers) end as
  if run one after the other.

  State: float32 `loss_scale`, int32 `good_steps`, int32 `bad_steps`: the
  names and dtypes contrib wrote to checkpoints. They are non-trainable
  resource variables in GLOBAL_VARIABLES. Built while a graph is the default,
  the manager makes them in its constructor under the current name scope, as
  contrib did (`optimizers/loss_scale` inside `variable_scope("optimizers")`);
  built with no graph, it makes them at the root name scope of each graph
  that asks for the scale, the first time it asks. Step counts are compared
  in int64; an int32 counter stops at 2**31 - 1, so with this face a period
  longer than that never completes (it means "never").

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
    incr_every_n_steps: Positive whole number up to 2**63 - 1 (an int, or a
      float such as 2000.0): finite steps in a row before growing.
    decr_every_n_nan_or_inf: Positive whole number up to 2**63 - 1:
      overflows before shrinking.
    incr_ratio: Growth factor, > 1.
    decr_ratio: Shrink factor, 0 < decr_ratio < 1.
    min_loss_scale: Keyword-only floor, from 2**-126 (float32's smallest
      normal number) to 2**126 (default 1, contrib's floor). Values below 1
      are allowed when asked for explicitly. Outside that range the scale
      would end at 0 (flushed) or above 2**126 and skip every step.
    max_loss_scale: Keyword-only ceiling, None (only float32's range) or a
      finite number >= `init_loss_scale`.
    hysteresis: Keyword-only, one of "contrib", "consecutive", "sticky".
    fail_at_floor_after: Keyword-only, None (default) or a positive whole
      number N up to 2**63 - 1: after N non-finite steps in a row at
      `min_loss_scale` (the scale those steps used), the step fails with
      `tf.errors.InvalidArgumentError` saying what to look for, instead of
      skipping steps forever. Counted in a variable
      `nonfinite_steps_at_min_scale` that is in no collection (not
      checkpointed, never reset by an initializer).

  Raises:
    TypeError: If a number is not a Python/NumPy int or float (bools
      rejected), or `hysteresis` is not a str.
    ValueError: If a value is outside the range given above, or a step count
      has a fractional part.
  """

  _FACE = CONTRIB_FACE

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
    check, arg, face = validation, self._FACE.arg_names, self._FACE
    low = check.check_scale_floor("min_loss_scale", min_loss_scale)
    high = (None if max_loss_scale is None else
            check.check_at_least("max_loss_scale", max_loss_scale, low))
    self._init = check.check_at_least(arg["init_loss_scale"], init_loss_scale,
                                      low)
    if high is not None and self._init > high:
      raise ValueError(f"`{arg['init_loss_scale']}` must be <= max_loss_scale "
                       f"({high:g}), got {self._init:g}.")
    self._policy = transition.Policy(
        incr_every=check.check_step_count(arg["incr_every_n_steps"],
                                          incr_every_n_steps),
        decr_every=check.check_step_count("decr_every_n_nan_or_inf",
                                          decr_every_n_nan_or_inf),
        incr_ratio=check.check_greater(arg["incr_ratio"], incr_ratio, 1.0),
        decr_ratio=check.check_open_unit("decr_ratio", decr_ratio),
        shrink_by_dividing=face.shrink_by_dividing,
        min_scale=low, max_scale=high,
        hysteresis=check.check_choice("hysteresis", hysteresis,
                                      HYSTERESIS_MODES))
    self._fail_after = check.check_optional_step_count(
        "fail_at_floor_after", fail_at_floor_after)
    specs = [per_graph.VariableSpec(face.scale_name, tf.float32, self._init),
             per_graph.VariableSpec(face.good_steps_name, face.counter_dtype, 0)]
    if face.bad_steps_name is not None:
      specs.append(per_graph.VariableSpec(face.bad_steps_name,
                                       face.counter_dtype, 0))
    if self._fail_after is not None:  # Not checkpointed: old files restore.
      specs.append(per_graph.VariableSpec(floor.STREAK, tf.int64, 0,
                                       checkpointed=False))
    self._state = per_graph.PerGraphVariables(self, specs)
    self._state.create_if_graph()

  init_loss_scale = property(lambda self: self._init)
  incr_every_n_steps = property(lambda self: self._policy.incr_every)
  decr_every_n_nan_or_inf = property(lambda self: self._policy.decr_every)
  incr_ratio = property(lambda self: self._policy.incr_ratio)
  decr_ratio = property(lambda self: self._policy.decr_ratio)
  min_loss_scale = property(lambda self: self._policy.min_scale)
  max_loss_scale = property(lambda self: self._policy.max_scale)
  hysteresis = property(lambda self: self._policy.hysteresis)
  fail_at_floor_after = property(lambda self: self._fail_after)

  @property
  def dynamic(self) -> bool:
    return True

  def get_loss_scale(self) -> tf.Variable:
    """Returns the current graph's float32 scale variable.

    As contrib did, the variable itself: one object per graph, which reads
    the current scale wherever it is used as a tensor and can be fetched
    after the graph is finalized (in a hook).
    """
    state = self._state.get(f"{type(self).__name__}.get_loss_scale")
    return state[self._FACE.scale_name]

  def variables(self) -> List[tf.Variable]:
    return list(self._state.existing().values())

  def _adopt_state(self, variables: Dict[str, tf.Variable]) -> None:
    """Takes over existing state variables by name (see `managers.get`)."""
    self._state.adopt(variables)

  def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
    """Returns the op that moves the state machine one step.

    While it holds the state's mutex, the op reads `good_steps`, and the
    rest of the state only on a step that changes more than that counter,
    and writes the next state (`managers.transition.write_next_state`): any
    number of updates running at once end as if run one after the other, in
    some order. The floor guard (`fail_at_floor_after`) runs in the same
    locked section and sees the scale before this step's own change, i.e.
    the scale this step used.

    Args:
      finite_grads: Scalar bool tensor: were all of this step's gradients
        finite? Under `tf.distribute` it must be the same on every replica and
        this must be called in cross-replica context.

    Returns:
      One op that updates the scale and counters.
    """
    base.check_finite_flag(finite_grads)
    api = f"{type(self).__name__}.update_loss_scale"
    state = self._state.get(api)
    face = self._FACE
    variables = transition.Variables(state[face.scale_name],
                                     state[face.good_steps_name],
                                     state.get(face.bad_steps_name))

    def locked() -> List[tf.Operation]:
      if self._fail_after is None:
        return [transition.write_next_state(self._policy, variables,
                                            finite_grads)]
      scale = variables.scale.read_value()  # The floor guard reads it.
      return [floor.guard(state[floor.STREAK], scale, finite_grads,
                          self._policy.min_scale, self._fail_after),
              transition.write_next_state(self._policy, variables,
                                          finite_grads, scale)]

    with tf.name_scope("loss_scale_update"):
      return self._state.mutex(api).run(locked, after=[finite_grads])

  def __repr__(self) -> str:
    policy = self._policy
    return (f"{type(self).__name__}(init_loss_scale={self._init!r}, "
            f"incr_every_n_steps={policy.incr_every!r}, "
            f"decr_every_n_nan_or_inf={policy.decr_every!r}, "
            f"incr_ratio={policy.incr_ratio!r}, "
            f"decr_ratio={policy.decr_ratio!r}{self._extras_repr()})")

  def _extras(self) -> Dict[str, Any]:
    """The keyword-only settings that differ from the defaults in the
    signature of the class's own `__init__` (stated only there)."""
    given = {"min_loss_scale": self._policy.min_scale,
             "max_loss_scale": self._policy.max_scale,
             "hysteresis": self._policy.hysteresis,
             "fail_at_floor_after": self._fail_after}
    params = inspect.signature(type(self).__init__).parameters
    return {name: value for name, value in given.items()
            if name in params and value != params[name].default}

  def _extras_repr(self) -> str:
    return "".join(f", {k}={v!r}" for k, v in self._extras().items())
