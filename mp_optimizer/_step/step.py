"""One training step: the pairs checked, then check, gate, apply, update.

`LossScaleOptimizer.apply_gradients` reaches this through `merge_call`, so it
runs once per step however many replicas there are:

```
scale   = the read of S the gradients were unscaled with  # the S this step used
checked = clip(grads) with a norm clip, else grads     # what the update uses
finite  = all_finite_in_sync(checked)       # one verdict for every replica
applied = gate(finite, use(checked), skipped_steps += 1)   # one Switch
          # (fed by SyncReplicasOptimizer: a skip also does global_step += 1)
update  = manager.update_loss_scale(finite)  # beside the apply, after `scale`
return tf.group(applied, update, ...)       # also the only TRAIN_OP entry

use(grads):   apply(grads), or with gradient accumulation, add them to the
              window and apply(window mean) once the window is full
apply(grads): clip (clipvalue, or the window mean), then
              inner.apply_gradients on each replica
```

`gate.gate` is a `tf.cond` with one Switch on the flag (no gradient or
variable is switched); a full accumulation window is found by a second one.
A manager that never skips (`skips_nonfinite_steps` False) gets no finite
check and no gate.

A norm clip happens before the finite check, which then sees exactly what
the update will use (across replicas: their sum, see
`clipping.reduce_and_clip`); `clipvalue` maps Inf to its limit, so it clips
after the check, as does a manager that never skips; with gradient
accumulation the window mean is clipped when it is applied.
`check_grads_and_vars` checks the pairs first, in replica context, before
anything is built.
"""

import dataclasses
import numbers
from typing import Callable, Iterable, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer.managers import amax
from mp_optimizer._internal import tensors
from mp_optimizer._internal import validation
from mp_optimizer._internal.tensors import GradsAndVars
from mp_optimizer._step import accumulation
from mp_optimizer._step import clipping
from mp_optimizer._step import gate
from mp_optimizer._step import report
from mp_optimizer._step import skips
from mp_optimizer._step import summaries
from mp_optimizer._step import telemetry
from mp_optimizer._step.scaling import read_loss_scale
from mp_optimizer._step.scaling import step_loss_scale


_GRADIENT_TYPES = (tf.Tensor, tf.IndexedSlices, tf.Variable, np.ndarray,
                   np.number)


def check_grads_and_vars(grads_and_vars: Iterable) -> GradsAndVars:
  """Returns `grads_and_vars` as a tuple of pairs, gradients as tensors.

  Accepts what TF's `apply_gradients` accepts: a gradient may be a tensor
  (a ref tensor too), an `IndexedSlices`, a variable (such as what
  `accumulator.assign_add(g)` returns), a NumPy array or number (converted
  with `tf.convert_to_tensor`, as TF does), or None. Nothing is built unless
  every pair passes.

  Raises:
    TypeError: If an entry is not a (gradient, variable) pair, or a gradient
      is none of the above.
    ValueError: If there are no pairs, or every gradient is None (with
      TensorFlow's messages for both).
  """
  pairs = tuple(grads_and_vars)
  if not pairs:
    raise ValueError("No variables provided. (`grads_and_vars` is empty: "
                     "pass the pairs `compute_gradients` returned.)")
  for pair in pairs:  # Check everything before building anything.
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
      raise TypeError("`grads_and_vars` must hold (gradient, variable) pairs, "
                      f"got the entry {pair!r}.")
    grad, var = pair
    if not (grad is None or isinstance(grad, _GRADIENT_TYPES) or
            isinstance(grad, numbers.Number) and not isinstance(grad, bool)):
      raise TypeError(
          "Gradient must be convertible to a Tensor or IndexedSlices, or "
          f"None: the gradient for {getattr(var, 'name', var)} is "
          f"{validation.describe(grad)}; expected a tf.Tensor, "
          "tf.IndexedSlices, tf.Variable, NumPy array or None.")
  converted = [(g if g is None or isinstance(g, (tf.Tensor, tf.IndexedSlices))
                else tf.convert_to_tensor(g), v) for g, v in pairs]
  if all(grad is None for grad, _ in converted):
    raise ValueError(
        "No gradients provided for any variable: "
        f"{[str(var) for _, var in converted]}. (Every gradient in "
        "`grads_and_vars` is None: the loss does not depend on these "
        "variables, or an op between them has no gradient.)")
  return tuple(converted)


@dataclasses.dataclass(frozen=True)
class Parts:
  """What a step is built from; one per optimizer.

  Attributes:
    inner: The wrapped optimizer, which applies the update.
    manager: The loss-scale manager.
    skip_counter: The optimizer's count of skipped steps.
    clip: The clip option, or None.
    accumulator: Gradient accumulation, or None.
    overflow_report: Settings of the report of skipped steps, or None.
    precision_telemetry: Measure and store each step's precision telemetry
      (`mp_optimizer._step.telemetry`).
  """
  inner: tf.compat.v1.train.Optimizer
  manager: managers.LossScaleManager
  skip_counter: skips.SkipCounter
  clip: Optional[clipping.Clip] = None
  accumulator: Optional[accumulation.GradientAccumulator] = None
  overflow_report: Optional[report.OverflowReport] = None
  precision_telemetry: bool = False


def _apply(strategy: tf.distribute.Strategy, parts: Parts,
           grads_and_vars: GradsAndVars, global_step: Optional[tf.Variable],
           name: str, pivot: tf.Tensor, clip: bool = True) -> tf.Operation:
  """Applies (per-replica) pairs through the inner optimizer; with `clip`
  (and a clip option set) clips them first (`clipping.reduce_and_clip`)."""
  pairs = [(g, v) for g, v in grads_and_vars if g is not None]
  variables = [v for _, v in pairs]
  grads = tuple(g for g, _ in pairs)
  # One string object for every replica: the inner optimizer's merge_call
  # regroups arguments by identity, and equal copies would become PerReplica.
  inner_name = name + "-wrapped"

  def apply_local(*local: tensors.Gradient) -> tf.Operation:
    return parts.inner.apply_gradients(list(zip(local, variables)),
                                       global_step, inner_name)

  if clip and parts.clip is not None:
    grads = clipping.reduce_and_clip(strategy, parts.clip, pairs)
  return strategy.group(gate.on_each_replica(strategy, pivot, apply_local,
                                             grads))


# Ops that hand out SyncReplicasOptimizer's aggregated gradients.
_SYNC_REPLICAS_TAKES = ("AccumulatorTakeGradient",
                        "SparseAccumulatorTakeGradient",
                        "ResourceAccumulatorTakeGradient")


def _skip(count: Callable[[], tf.Operation], grads_and_vars: GradsAndVars,
          global_step: Optional[tf.Variable]) -> tf.Operation:
  """The untaken side: `count()` the skip; under SyncReplicas, end the round.

  SyncReplicasOptimizer's accumulators move to the next round whenever the
  chief takes their gradients, and the tokens that release the workers carry
  `global_step`: unless a skipped round advances it too, every later gradient
  is dropped as stale and the workers wait forever.
  """
  if global_step is None or not any(  # PerReplica values have no op.
      getattr(getattr(tensors.values(g), "op", None), "type", None)
      in _SYNC_REPLICAS_TAKES for g, _ in grads_and_vars if g is not None):
    return count()
  return tf.group(count(), tf.compat.v1.assign_add(global_step, 1))


def _use(strategy: tf.distribute.Strategy, parts: Parts,
         grads_and_vars: GradsAndVars, global_step: Optional[tf.Variable],
         name: str) -> Tuple[GradsAndVars, Callable[[tf.Tensor], tf.Operation]]:
  """What the finite check sees (see the module docstring), and the builder
  of the applied side."""
  def apply(pairs: GradsAndVars, pivot: tf.Tensor,
            clip: bool = True) -> tf.Operation:
    return _apply(strategy, parts, pairs, global_step, name, pivot, clip)

  if parts.accumulator is not None:
    return grads_and_vars, parts.accumulator.micro_step(
        strategy, grads_and_vars, apply)
  if (parts.clip is not None and parts.clip.check_clipped and
      parts.manager.skips_nonfinite_steps):
    pairs = [(g, v) for g, v in grads_and_vars if g is not None]
    checked = tuple(zip(clipping.reduce_and_clip(strategy, parts.clip, pairs),
                        [v for _, v in pairs]))
    return checked, lambda pivot: apply(checked, pivot, clip=False)
  return grads_and_vars, lambda pivot: apply(grads_and_vars, pivot)


def _telemetry(strategy: tf.distribute.Strategy, parts: Parts,
               grads_and_vars: GradsAndVars, scale: tf.Tensor,
               finite: tf.Tensor, applied: tf.Operation) -> telemetry.Record:
  """Measures the step (see `telemetry`); returns its record."""
  stats = telemetry.measure(strategy, grads_and_vars, scale)
  window = None
  if parts.accumulator is not None:  # 0 once the window was applied.
    window = parts.accumulator.count_after(applied)
  step = {"headroom_bits": stats["headroom_bits"],
          "zero_share": stats["zero_share"],
          "global_norm": tf.where(finite, stats["global_norm"], float("nan"),
                                  name="global_norm"),
          "skip_reason": telemetry.skip_reason(finite, scale, parts.manager,
                                               window)}
  record = telemetry.Record(parts.skip_counter.name(), stats["groups"], step)
  # Inside control flow the step's tensors cannot be fetched: readers then
  # use the stored values.
  record.fetchable = not skips.inside_control_flow(step["skip_reason"])
  return record


def gated_step(strategy: tf.distribute.Strategy, parts: Parts,
               grads_and_vars: Sequence, global_step: Optional[tf.Variable],
               name: str) -> tf.Operation:
  """Builds the step described in the module docstring; returns its op."""
  train_ops = tf.compat.v1.get_collection_ref(tf.compat.v1.GraphKeys.TRAIN_OP)
  train_ops_before = list(train_ops)
  checked, use = _use(strategy, parts, grads_and_vars, global_step, name)
  # The S the gradients were unscaled with: a second read could see a scale
  # another train op of the manager changed since.
  scale = step_loss_scale(parts.manager, (g for g, _ in grads_and_vars))
  if parts.manager.skips_nonfinite_steps:
    finite = managers.all_finite_in_sync(g for g, _ in checked)
    when_skipped = parts.skip_counter.add_one
    if parts.overflow_report is not None:
      when_skipped = report.when_skipped(
          parts.overflow_report,
          "micro-step dropped" if parts.accumulator else "step skipped",
          when_skipped, grads_and_vars, scale)
    applied = gate.gate(finite, use,
                        lambda: _skip(when_skipped, grads_and_vars,
                                      global_step))
    skipped = parts.skip_counter.total()
  else:
    finite = tf.constant(True)
    applied = use(finite)
    skipped = tf.constant(0, tf.int64)
  # Unclipped: a norm clip shrinks the update, not what the backward held.
  extra = ({"gradient_amax": amax.gradient_amax(
      g for g, _ in grads_and_vars)} if parts.manager.needs_gradient_amax
           else {})
  # Beside the apply, not after it: nothing in the apply reads the scale, and
  # the update's mutex then waits while the inner optimizer works.
  with tf.control_dependencies([scale]):
    update = parts.manager.update_loss_scale(finite, **extra)
  signal_updates = skips.record(finite, skipped, scale, parts.skip_counter,
                                lambda: read_loss_scale(parts.manager))
  record = None
  if parts.precision_telemetry:
    record = _telemetry(strategy, parts, grads_and_vars, scale, finite,
                        applied)
    signal_updates.append(record.write())
  summaries.build(record)  # What the readers return, ready when asked.
  train_op = tf.group(applied, update, *signal_updates, name=name)
  # The inner apply is gated; only the whole gated step is a train op.
  train_ops[:] = train_ops_before + [train_op]
  return train_op
