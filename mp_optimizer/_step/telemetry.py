"""Precision telemetry: how much of float16's range each step used (opt-in).

With `LossScaleOptimizer(..., precision_telemetry=True)` every step also
measures the gradients it checks (unscaled, before any clip):

* `headroom_bits`: log2(65504 / (S * amax)), amax the largest |entry|: how
  many doublings the scaled gradients could still take before float16
  overflows. Negative when they did, -Inf with an Inf entry, NaN with a NaN
  entry; +Inf when every entry is zero.
* `zero_share`: per variable group, the share of gradient entries that are
  exactly zero in float16 at this S (|g * S| <= 2**-25, which float16
  rounds to 0): the underflow loss scaling is there to prevent. A group is
  the variables of one name scope (`dense_1/kernel` and `dense_1/bias` are
  group `dense_1`; a variable at the root is its own group). A sparse
  gradient counts its rows' values only.
* `global_norm`: the global norm of the unscaled gradients, NaN (never 0) on a
  step whose update was not applied: amax * sqrt(sum((g / amax)**2)), which
  holds any norm float32 can (1/amax would be subnormal above 2**126). With
  several replicas it is the norm of their sum, which the update uses (one
  extra all-reduce of the gradients and a pass over the sum). As
  `tf.linalg.global_norm`, a sparse gradient's norm is that of its values (a
  repeated row is not added to itself first). With gradient accumulation it
  is the micro-step's, not the window mean's.
* `skip_reason`: `REASONS[code]`: applied, overflow, overflow at the
  scale's floor (the manager's `min_loss_scale`), an accumulation
  micro-step (finite, added to the window, no update yet), or a non-finite
  step with no loss scale ("non-finite, unscaled", `managers.NoLossScale`).

16-bit gradients (of float16 variables without float32 master weights) are
measured as the unscale left them: entries it rounded to 0 count as zero.

Cost: two reductions over the gradients, on the stacks the unscale made
(`unscale.unscale`, found in the graph's `_internal.provenance` record) or
else per gradient: one `max` of |g|, then one `sum`
of [(g / amax)**2, |g| <= 2**-25 / S] per variable, with several replicas
summed across them; the elementwise work around them (|g|, the square, the
comparison) reads each gradient a few more times. Nothing is read to the
host: the values go to five variables in no collection (never saved, never
reset by an initializer), which `mp_optimizer.signals.precision()` and
`LossScaleHook` read after the step, and to the step's own tensors, which
`add_summaries()` writes.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from mp_optimizer._internal import provenance
from mp_optimizer._internal import tensors

FLOAT16_MAX = 65504.0
# Largest magnitude float16 rounds to 0: half its smallest subnormal, 2**-24
# (the tie at 2**-25 goes to the even neighbour, 0).
FLOAT16_ZERO_LIMIT = 2.0**-25
REASONS = ("applied", "overflow", "overflow at the floor",
           "accumulation micro-step", "non-finite, unscaled")
APPLIED, OVERFLOW, AT_FLOOR, MICRO_STEP, UNSCALED = range(len(REASONS))


def group_of(variable: tf.Variable) -> str:
  """The group a variable is counted in: its name without the last part."""
  name = variable.op.name if hasattr(variable, "op") else variable.name
  return name.rsplit("/", 1)[0] if "/" in name else name


def _float32(value: tf.Tensor) -> tf.Tensor:
  value = tf.convert_to_tensor(value)
  return value if value.dtype == tf.float32 else tf.cast(value, tf.float32)


def _blocks(values: Sequence[tf.Tensor]) -> List[Tuple[tf.Tensor, List[int]]]:
  """(tensor, indices into `values`): whole stacks as one block, else one each.

  A block of k gradients is a tensor of shape [k, ...]; a lone gradient is
  given a leading axis of 1.
  """
  blocks = provenance.whole_stacks(values)
  done = {index for _, indices in blocks for index in indices}
  blocks += [(tf.expand_dims(values[i], 0), [i])
             for i in range(len(values)) if i not in done]
  return blocks


def _local(grads: Sequence[tensors.Gradient], scale: tf.Tensor,
           zeros: bool = True) -> Tuple[tf.Tensor, tf.Tensor]:
  """One replica's (amax, per-variable [sum of (g/amax)**2, zeros, size]).

  Without `zeros`, the per-variable rows hold only the sum of squares.
  """
  values = [_float32(tensors.values(g)) for g in grads]
  blocks = [(_float32(block), indices) for block, indices in _blocks(values)]
  magnitudes = [tf.abs(block) for block, _ in blocks]
  amax = tf.reduce_max(tf.stack([tf.reduce_max(m) for m in magnitudes]))
  # Divided by amax, not multiplied by 1/amax: above 2**126 that reciprocal
  # is subnormal, flushed to 0 on CPU, and the norm would read 0.
  divisor = tf.where(amax > 0, amax, 1.0)
  limit = FLOAT16_ZERO_LIMIT / scale
  columns, order = [], []
  for (block, indices), magnitude in zip(blocks, magnitudes):
    parts = [tf.square(block / divisor)]
    if zeros:
      parts.append(tf.cast(magnitude <= limit, tf.float32))
    both = tf.stack(parts)
    sums = tf.reduce_sum(both, axis=list(range(2, both.shape.rank)))
    if zeros:
      sizes = tf.fill([1, len(indices)], tf.cast(
          tf.size(block) // len(indices), tf.float32))
      sums = tf.concat([sums, sizes], axis=0)
    columns.append(sums)
    order += indices
  # Back in the order of `grads`.
  per_variable = tf.gather(tf.concat(columns, axis=1),
                           np.argsort(order), axis=1)
  return amax, per_variable


def measure(strategy: tf.distribute.Strategy,
            grads_and_vars: tensors.GradsAndVars,
            scale: tf.Tensor) -> Dict[str, tf.Tensor]:
  """Headroom, norm (before the skip verdict) and zeros per group; see above.

  `grads_and_vars` are one replica's pairs, or per-replica values in
  cross-replica context.
  """
  pairs = [(g, v) for g, v in grads_and_vars if g is not None]
  groups = sorted({group_of(v) for _, v in pairs})
  segments = [groups.index(group_of(v)) for _, v in pairs]
  grads = tuple(g for g, _ in pairs)
  if not pairs:
    nan = tf.constant(float("nan"))
    return {"headroom_bits": nan, "global_norm": nan, "groups": [],
            "zero_share": tf.zeros([0])}
  replicas = (strategy.num_replicas_in_sync
              if tensors.in_cross_replica_context() else 1)
  if replicas == 1:
    if tensors.in_cross_replica_context():
      grads = tuple(strategy.experimental_local_results(g)[0] for g in grads)
    amax, per_variable = _local(grads, scale)
    norm = amax * tf.sqrt(tf.reduce_sum(per_variable[0]))
  else:
    local = strategy.extended.call_for_each_replica(
        lambda *g: _local(g, scale), args=grads)
    amax = tf.reduce_max(strategy.gather(
        strategy.extended.call_for_each_replica(
            lambda a: tf.reshape(a, [1]), args=(local[0],)), axis=0))
    per_variable = strategy.reduce(tf.distribute.ReduceOp.SUM, local[1],
                                   axis=None)
    summed = strategy.extended.batch_reduce_to(tf.distribute.ReduceOp.SUM,
                                               pairs)
    first = tuple(strategy.experimental_local_results(g)[0] for g in summed)
    sum_amax, sum_columns = _local(first, scale, zeros=False)
    norm = sum_amax * tf.sqrt(tf.reduce_sum(sum_columns[0]))
  zeros = tf.math.unsorted_segment_sum(per_variable[1], segments, len(groups))
  sizes = tf.math.unsorted_segment_sum(per_variable[2], segments, len(groups))
  headroom = (np.log2(FLOAT16_MAX) - tf.math.log(scale * amax) / np.log(2.0))
  return {"headroom_bits": tf.identity(headroom, name="headroom_bits"),
          "global_norm": norm, "groups": groups,
          "zero_share": tf.math.divide_no_nan(zeros, sizes, name="zero_share")}


def skip_reason(finite: tf.Tensor, scale: tf.Tensor, manager: Any,
                window_count: Optional[tf.Tensor]) -> tf.Tensor:
  """The step's `REASONS` code, int64 (`UNSCALED` for a skip without a
  scale, `managers.NoLossScale`)."""
  floor = getattr(manager, "min_loss_scale", None)
  skipped = (tf.constant(UNSCALED if not manager.scales_loss else OVERFLOW,
                         tf.int64) if floor is None else tf.where(
      scale <= floor, tf.constant(AT_FLOOR, tf.int64), OVERFLOW))
  done = tf.constant(APPLIED, tf.int64) if window_count is None else tf.where(
      tf.equal(window_count, 0), tf.constant(APPLIED, tf.int64), MICRO_STEP)
  return tf.where(finite, done, skipped, name="skip_reason")


def _variable(name: str, dtype: tf.DType, shape: Sequence[int]) -> tf.Variable:
  """A variable in no collection, written before it is read (see module)."""
  return tf.compat.v1.Variable(
      tf.zeros(shape, dtype), name=name, trainable=False, use_resource=True,
      collections=[], synchronization=tf.VariableSynchronization.ON_WRITE,
      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


def _read(variable: tf.Variable, before_first_write: float) -> tf.Tensor:
  """A read of `variable`, or `before_first_write` until a step wrote it."""
  return tf.cond(tf.compat.v1.is_variable_initialized(variable),
                 variable.read_value,
                 lambda: tf.fill(variable.shape, tf.constant(
                     before_first_write, variable.dtype.base_dtype)))


class Record:
  """One train op's telemetry: its step tensors, and variables holding them.

  Attributes:
    optimizer: The name the optimizer reports under (`signals`).
    groups: The variable groups, in the order of `zero_share`'s entries.
    step: The step's own tensors.
    fetchable: False when `step` is inside control flow (unfetchable).
    reads: Reads of the stored values, made in the outermost graph: NaN (and
      reason code -1) before the first step.
  """

  def __init__(self, optimizer: str, groups: List[str],
               step: Dict[str, tf.Tensor]):
    self.optimizer, self.groups, self.step = optimizer, groups, step
    self.fetchable = True
    with tf.init_scope(), tf.name_scope("precision_telemetry"):
      self._stored = {
          "headroom_bits": _variable("headroom_bits", tf.float32, []),
          "global_norm": _variable("global_norm", tf.float32, []),
          "zero_share": _variable("zero_share", tf.float32, [len(groups)]),
          "skip_reason": _variable("skip_reason", tf.int64, []),
          # Steps by reason since the session started (hook windows).
          "reason_counts": _variable("reason_counts", tf.int64,
                                     [len(REASONS)]),
      }
      self.reads = {key: _read(var, -1 if var.dtype.base_dtype == tf.int64
                               else float("nan"))
                    for key, var in self._stored.items()}
      self.reads["reason_counts"] = _read(self._stored["reason_counts"], 0)

  def write(self) -> tf.Operation:
    """The op that stores this step's values and counts its reason."""
    counts = self._stored["reason_counts"]
    one_hot = tf.one_hot(self.step["skip_reason"], len(REASONS),
                         dtype=tf.int64)
    # Resource assign_add is atomic; before the first write the variable is
    # assigned instead (no initializer ever runs it).
    add = tf.cond(tf.compat.v1.is_variable_initialized(counts),
                  lambda: counts.assign_add(one_hot).op,
                  lambda: counts.assign(one_hot).op)
    return tf.group(add, *[self._stored[key].assign(self.step[key]).op
                           for key in ("headroom_bits", "global_norm",
                                       "zero_share", "skip_reason")])

