"""`ExponentialUpdateLossScaleManager`: contrib's dynamic loss scale.

It validates its arguments into `dynamic_scale.ExponentialSettings` and
holds the one dynamic scale, a `dynamic_scale.StateMachine` (TF2's
`DynamicLossScale` in `managers.dynamic_loss_scale` holds another, with
TF's face and settings).
"""

from typing import List, Optional

import tensorflow as tf

from mp_optimizer.managers import base
from mp_optimizer.managers import dynamic_scale
from mp_optimizer.managers import transition

HYSTERESIS_MODES = transition.HYSTERESIS_MODES

# The keyword-only settings: a repr shows each only when not its default.
_KEYWORD_ONLY = ("min_loss_scale", "max_loss_scale", "hysteresis",
                 "fail_at_floor_after")
_SETTINGS = dynamic_scale.ExponentialSettings  # Its attributes: the defaults.


class ExponentialUpdateLossScaleManager(base.LossScaleManager):
  """Grows the scale after a run of clean steps, shrinks it on overflow.

  A scale that is too small lets float16 gradients underflow; one that is too
  large makes them overflow to Inf. This manager searches between the two, once
  per step, exactly as `tf.contrib.mixed_precision` did (with
  `hysteresis="contrib"`, the default); see `managers.transition` for the
  algorithm as pseudocode and the two other `hysteresis` modes.

  Concurrent updates (two train ops, threads, asynchronous workers) end as
  if run one after the other: the common step (finite, no growth due)
  counts with one atomic increment, and every other step holds the state's
  mutex (`_internal.per_graph.Mutex`); `managers.fast_path` says why.

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

  def __init__(
      self, init_loss_scale: float, incr_every_n_steps: int,
      decr_every_n_nan_or_inf: int = _SETTINGS.decr_every_n_nan_or_inf,
      incr_ratio: float = _SETTINGS.incr_ratio,
      decr_ratio: float = _SETTINGS.decr_ratio, *,
      min_loss_scale: float = _SETTINGS.min_loss_scale,
      max_loss_scale: Optional[float] = _SETTINGS.max_loss_scale,
      hysteresis: str = _SETTINGS.hysteresis,
      fail_at_floor_after: Optional[int] = _SETTINGS.fail_at_floor_after):
    self._settings = dynamic_scale.ExponentialSettings(
        init_loss_scale, incr_every_n_steps, decr_every_n_nan_or_inf,
        incr_ratio, decr_ratio, min_loss_scale=min_loss_scale,
        max_loss_scale=max_loss_scale, hysteresis=hysteresis,
        fail_at_floor_after=fail_at_floor_after).checked()
    self._machine = dynamic_scale.StateMachine(self, self._settings,
                                               dynamic_scale.CONTRIB_FACE)

  init_loss_scale = base.setting("init_loss_scale")
  incr_every_n_steps = base.setting("incr_every_n_steps")
  decr_every_n_nan_or_inf = base.setting("decr_every_n_nan_or_inf")
  incr_ratio = base.setting("incr_ratio")
  decr_ratio = base.setting("decr_ratio")
  min_loss_scale = base.setting("min_loss_scale")
  scale_floor = base.setting(
      "min_loss_scale", "The least scale: `min_loss_scale`, as a float.")
  max_loss_scale = base.setting("max_loss_scale")
  hysteresis = base.setting("hysteresis")
  fail_at_floor_after = base.setting("fail_at_floor_after")

  @property
  def dynamic(self) -> bool:
    return True

  def get_loss_scale(self) -> tf.Variable:
    """Returns the current graph's float32 scale variable.

    As contrib did, the variable itself: one object per graph, which reads
    the current scale wherever it is used as a tensor and can be fetched
    after the graph is finalized (in a hook).
    """
    return self._machine.scale()

  def variables(self) -> List[tf.Variable]:
    return self._machine.variables()

  def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
    """Returns the op that moves the state machine one step.

    A finite step with no growth due adds 1 to `good_steps` with one atomic
    fetch-and-increment and takes no mutex; any other step holds the
    state's mutex while it reads the state and writes the next one
    (`managers.fast_path`, `managers.transition`): any number of updates
    running at once end as if run one after the other, in some order. With
    the "consecutive" hysteresis or `fail_at_floor_after` every step holds
    the mutex. The floor guard (`fail_at_floor_after`) runs in the locked
    section and sees the scale before this step's own change, i.e. the
    scale this step used.

    Args:
      finite_grads: Scalar bool tensor: were all of this step's gradients
        finite? Under `tf.distribute` it must be the same on every replica and
        this must be called in cross-replica context.

    Returns:
      One op that updates the scale and counters.
    """
    return self._machine.update(finite_grads)

  def __repr__(self) -> str:
    settings = self._settings
    return base.call_repr(type(self).__name__, keywords={
        "init_loss_scale": settings.init_loss_scale,
        "incr_every_n_steps": settings.incr_every_n_steps,
        "decr_every_n_nan_or_inf": settings.decr_every_n_nan_or_inf,
        "incr_ratio": settings.incr_ratio, "decr_ratio": settings.decr_ratio,
        **base.non_default(settings, _KEYWORD_ONLY)})
