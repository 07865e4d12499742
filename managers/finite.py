"""The finite check: one boolean over every gradient of a step.

TensorFlow's built-in check builds two ops per gradient (`is_finite`, then
`reduce_all`) and writes a boolean tensor as large as the gradient. Here each
gradient is read once by a `reduce_sum`: any NaN makes the sum NaN, any Inf
makes it Inf or (with an Inf of the other sign) NaN, so one `is_finite` on the
total of the sums catches every non-finite entry. The only extra verdict is a
step whose finite gradients add up beyond the float32 range (about 3.4e38);
that step is treated as non-finite and skipped, which is also what its
gradient norm would make a clip do.

Sparse gradients (`tf.IndexedSlices`) are checked on `.values` only, never
densified. `None` gradients are ignored.
"""

from typing import Iterable, Optional, Union

import tensorflow as tf

Gradient = Optional[Union[tf.Tensor, tf.IndexedSlices]]

_SUM_DTYPES = (tf.float32, tf.float64)


def _values(grad: Union[tf.Tensor, tf.IndexedSlices]) -> tf.Tensor:
  return grad.values if isinstance(grad, tf.IndexedSlices) else grad


def _sum(values: tf.Tensor) -> tf.Tensor:
  if values.dtype not in _SUM_DTYPES:
    # float16/bfloat16 sums would overflow near 65504; sum in float32.
    values = tf.cast(values, tf.float32)
  total = tf.reduce_sum(values)
  return total if total.dtype == tf.float32 else tf.cast(total, tf.float32)


def all_finite(grads: Iterable[Gradient]) -> tf.Tensor:
  """Returns a scalar bool tensor: True iff every gradient entry is finite.

  Args:
    grads: Gradients as returned by `compute_gradients` (Tensors,
      `tf.IndexedSlices` or None), in one replica.

  Returns:
    A scalar `tf.bool` tensor. With no non-None gradient it is constant True.
  """
  sums = [_sum(_values(g)) for g in grads if g is not None]
  if not sums:
    return tf.constant(True, name="all_finite")
  total = sums[0] if len(sums) == 1 else tf.add_n(sums)
  return tf.math.is_finite(total, name="all_finite")


def all_finite_in_sync(grads) -> tf.Tensor:
  """Like `all_finite`, but one verdict shared by every replica.

  In cross-replica context under a `tf.distribute` strategy, `grads` hold
  per-replica values. Each replica checks its own gradients, the flags are
  summed across replicas (and workers), and the step counts as finite only if
  every replica was finite. Elsewhere this is `all_finite`.

  Args:
    grads: Gradients (possibly per-replica values), None allowed.

  Returns:
    A scalar `tf.bool` tensor, identical on every replica.
  """
  grads = list(grads)
  if not (tf.distribute.has_strategy() and
          tf.distribute.in_cross_replica_context()):
    return all_finite(grads)
  strategy = tf.distribute.get_strategy()
  if strategy.num_replicas_in_sync == 1:
    return all_finite(
        None if g is None else strategy.experimental_local_results(g)[0]
        for g in grads)
  flags = strategy.extended.call_for_each_replica(
      lambda *local: tf.cast(all_finite(local), tf.float32), args=tuple(grads))
  finite_count = strategy.reduce(tf.distribute.ReduceOp.SUM, flags, axis=None)
  return tf.equal(finite_count, float(strategy.num_replicas_in_sync),
                  name="all_replicas_finite")
