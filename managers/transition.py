"""The dynamic loss scale's state machine: one step's new state, and its writes.

`next_state(policy, state, finite)` builds the ops that compute one step's
new state from the old one, as a pure function of tensors;
`write_next_state` reads and writes the variables with it (the manager
calls it holding the state's mutex). With `hysteresis="contrib"` it is
`tf.contrib.mixed_precision`'s algorithm exactly:

```
on a finite step:
    if good_steps + 1 >= incr_every:
        if isfinite(scale * incr_ratio):
            scale = min(scale * incr_ratio, max_scale)
        good_steps = 0; bad_steps = 0
    else: good_steps += 1
on a non-finite step (the optimizer skips its update):
    if bad_steps + 1 >= decr_every:
        scale = max(min_scale, shrunk(scale))
        good_steps = 0; bad_steps = 0
    else: bad_steps += 1; good_steps = 0
```

where `shrunk(scale)` is `scale * decr_ratio` (contrib) or
`scale / incr_ratio` (TF2's `DynamicLossScale`, which makes multipliers that
are not powers of two give TF's numbers bit for bit).

A finite step does not clear `bad_steps`: contrib counts overflows since the
last scale change, not consecutive ones. Two other `hysteresis` modes change
only that counter: `"consecutive"` clears `bad_steps` on every finite step
(only back-to-back overflows shrink the scale); `"sticky"` keeps `bad_steps`
at its limit after a shrink, so once the allowance of `decr_every - 1`
tolerated overflows is used up, every further overflow shrinks the scale until
the scale next grows.

Most steps are finite with no growth due: they only add 1 to `good_steps`.
The manager counts such a step with one atomic increment and no mutex
(`managers.fast_path`, which builds the rest from `next_state`). Under the
settings that keep the mutex on every step, `write_next_state` tells such a
step apart with `counting_only` and runs just that increment then; the rest
of the state machine sits behind a Switch and runs only on the other steps.

Step counts are compared in int64, so a period of 2**31 or more means what
it says. A counter stops at its dtype's largest value instead of wrapping:
with int32 counters (contrib's checkpoints) a period above 2**31 - 1 is never
reached.
"""

import dataclasses
from typing import List, Optional

import tensorflow as tf

from mp_optimizer._internal import tensors

HYSTERESIS_MODES = ("contrib", "consecutive", "sticky")


@dataclasses.dataclass(frozen=True)
class Policy:
  """The settings of one dynamic scale (validated by the manager).

  Attributes:
    incr_every: Finite steps in a row before the scale grows.
    decr_every: Overflows before it shrinks.
    incr_ratio: Growth factor.
    decr_ratio: Shrink factor, used unless `shrink_by_dividing`.
    shrink_by_dividing: Shrink by dividing by `incr_ratio`.
    min_scale: Floor of the scale.
    max_scale: Ceiling of the scale, or None.
    hysteresis: One of `HYSTERESIS_MODES`.
  """
  incr_every: int
  decr_every: int
  incr_ratio: float
  decr_ratio: float
  shrink_by_dividing: bool
  min_scale: float
  max_scale: Optional[float]
  hysteresis: str


@dataclasses.dataclass(frozen=True)
class State:
  """One state: float32 scale and integer counters (`bad_steps` None: 0)."""
  scale: tf.Tensor
  good_steps: tf.Tensor
  bad_steps: Optional[tf.Tensor] = None


@dataclasses.dataclass(frozen=True)
class Variables:
  """The state's variables (`bad_steps` None when the face stores none)."""
  scale: tf.Variable
  good_steps: tf.Variable
  bad_steps: Optional[tf.Variable] = None


def counting_only(policy: Policy, good_steps: tf.Tensor,
                  finite: tf.Tensor) -> tf.Tensor:
  """True when the step's whole change is `good_steps += 1` (and, with
  `hysteresis="consecutive"`, `bad_steps = 0`).

  That is a finite step with no growth due (`good_steps + 1 < incr_every`)
  and a counter below its dtype's largest value, where `next_state` keeps
  the scale, increments `good_steps` and leaves `bad_steps` as its
  hysteresis says on a finite step.

  Args:
    policy: The scale's settings.
    good_steps: The counter before the step.
    finite: Scalar bool tensor: were the step's gradients all finite?
  """
  limit = min(policy.incr_every - 1, good_steps.dtype.max)
  return tf.logical_and(finite, good_steps < limit, name="counting_only")


def next_state(policy: Policy, state: State, finite: tf.Tensor) -> State:
  """Returns the state after one step (see the module docstring).

  Args:
    policy: The scale's settings.
    state: The state before the step.
    finite: Scalar bool tensor: were the step's gradients all finite?

  Returns:
    The new state, with `bad_steps` None if `state.bad_steps` was None.
  """
  scale, good = state.scale, state.good_steps
  bad = state.bad_steps if state.bad_steps is not None else tf.zeros_like(good)
  zero = tf.zeros_like(good)
  # `count >= every - 1`, not `count + 1 >= every`: an int64 count at its
  # largest value (a restored checkpoint) would wrap when 1 is added.
  grow_due = tf.cast(good, tf.int64) >= policy.incr_every - 1
  shrink_due = tf.cast(bad, tf.int64) >= policy.decr_every - 1
  grow = tf.logical_and(finite, grow_due)
  shrink = tf.logical_and(tf.logical_not(finite), shrink_due)

  grown = scale * policy.incr_ratio
  grown_allowed = tf.math.is_finite(grown)
  if policy.max_scale is not None:
    grown = tf.minimum(grown, policy.max_scale)
  shrunk = (scale / policy.incr_ratio if policy.shrink_by_dividing
            else scale * policy.decr_ratio)
  shrunk = tf.maximum(shrunk, policy.min_scale)
  new_scale = tf.where(tf.logical_and(grow, grown_allowed), grown,
                       tf.where(shrink, shrunk, scale))

  counting = tf.logical_and(finite, tf.logical_not(grow_due))
  new_good = tf.where(counting, tensors.saturating_increment(good), zero)
  keep_bad_on_finite = bad if policy.hysteresis != "consecutive" else zero
  keep_bad_on_shrink = bad if policy.hysteresis == "sticky" else zero
  new_bad = tf.where(
      finite, tf.where(grow_due, zero, keep_bad_on_finite),
      tf.where(shrink_due, keep_bad_on_shrink,
               tensors.saturating_increment(bad)))
  return State(new_scale, new_good,
               None if state.bad_steps is None else new_bad)


def write_next_state(policy: Policy, variables: Variables, finite: tf.Tensor,
                     scale: Optional[tf.Tensor] = None) -> tf.Operation:
  """Builds one step's reads and writes of `variables`; returns its op.

  On a `counting_only` step just `good_steps += 1` runs (and, with
  `hysteresis="consecutive"`, `bad_steps = 0`); on the others, `next_state`
  from a read of every variable. Build it holding the state's mutex.

  Args:
    policy: The scale's settings.
    variables: The state's variables.
    finite: Scalar bool tensor: were the step's gradients all finite?
    scale: The scale already read in the same locked section, if any.
  """
  good = variables.good_steps.read_value()

  def count() -> List[tf.Operation]:
    writes = [variables.good_steps.assign_add(1, read_value=False)]
    if variables.bad_steps is not None and policy.hysteresis == "consecutive":
      writes.append(variables.bad_steps.assign(0, read_value=False))
    return writes

  def change() -> List[tf.Operation]:
    return write_next(policy, variables, finite, good, scale)

  return tensors.branch(counting_only(policy, good, finite), count, change,
                        name="changes")


def write_next(policy: Policy, variables: Variables, finite: tf.Tensor,
               good_steps: tf.Tensor,
               scale: Optional[tf.Tensor] = None) -> List[tf.Operation]:
  """The assigns of `next_state`, from reads of the scale and `bad_steps`.

  Args:
    policy: The scale's settings.
    variables: The state's variables.
    finite: Scalar bool tensor: were the step's gradients all finite?
    good_steps: The count the step sees.
    scale: The scale already read in the same locked section, if any.
  """
  bad = variables.bad_steps
  new = next_state(policy, State(
      variables.scale.read_value() if scale is None else scale, good_steps,
      None if bad is None else bad.read_value()), finite)
  writes = [variables.scale.assign(new.scale, read_value=False),
            variables.good_steps.assign(new.good_steps, read_value=False)]
  if bad is not None:
    writes.append(bad.assign(new.bad_steps, read_value=False))
  return writes
