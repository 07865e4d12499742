"""Gradient clipping on unscaled gradients: `clipnorm`, `clipvalue`, `global_clipnorm`.

Thresholds apply to unscaled gradients, so they mean what they say. Norms
are computed so that they cannot overflow for finite gradients: a plain
`sum(g**2)` overflows float32 once entries pass about 1.8e19, and
`tf.clip_by_global_norm` then scales every gradient by `limit / Inf` (zeros)
or `Inf / Inf` (NaN). Here each norm is taken of the gradients divided by
their largest magnitude `m`, and the clipped gradient is built from those
quotients:

```
m = max |g|                         (over one gradient, or all for global)
u = g / m                           (|u| <= 1: u**2 cannot overflow)
r = sqrt(sum(u**2))                 (the norm is m * r)
clipped = u * (limit / r)   if m * r > limit (Inf counts)   else g
```

For finite gradients every quantity is finite, so a norm clip never turns a
finite gradient into a NaN, an Inf or zeros. A non-finite entry propagates
(`Inf / Inf` is NaN), so the optimizer checks the norm-clipped gradients,
exactly what the update will use: a step whose clipped gradients are not
finite (also a sum over replicas that overflowed) is skipped and counted as
an overflow (see `mp_optimizer._step.step`). `clipvalue` maps Inf to the limit, so
with it the unclipped gradients are checked.

Sparse gradients stay `tf.IndexedSlices`. Their duplicate indices are summed
first (`tf.unique` + `tf.math.unsorted_segment_sum`, the size of the slices,
not of the variable), because a norm or an elementwise clip of the raw slices
would differ from that of the gradient they add up to.
"""

import dataclasses
from typing import Optional, Tuple

import tensorflow as tf

from mp_optimizer._internal import tensors
from mp_optimizer._internal import validation

def _merge_duplicates(grad: tensors.Gradient) -> tensors.Gradient:
  if not isinstance(grad, tf.IndexedSlices):
    return grad
  unique, positions = tf.unique(grad.indices)
  values = tf.math.unsorted_segment_sum(grad.values, positions,
                                        tf.size(unique))
  return tf.IndexedSlices(values, unique, grad.dense_shape)


def _wide(values: tf.Tensor) -> tf.Tensor:
  """float32 (float64 stays float64) for the norm arithmetic."""
  return values if values.dtype == tf.float64 else tf.cast(values, tf.float32)


def _norm_clip(grads: list, limit: float) -> list:
  """Clips `grads` (non-None) to a joint L2 norm of `limit`, robustly."""
  wide = [_wide(tensors.values(g)) for g in grads]
  dtype = tf.float64 if any(w.dtype == tf.float64 for w in wide) else tf.float32
  wide = [tf.cast(w, dtype) for w in wide]
  largest = tf.reduce_max(tf.stack([tf.reduce_max(tf.abs(w)) for w in wide]))
  divisor = tf.where(largest > 0, largest, tf.ones_like(largest))
  quotients = [w / divisor for w in wide]
  ratio = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(q)) for q in quotients]))
  clip = largest * ratio > limit  # Inf > limit; NaN is not: g stays NaN.
  factor = limit / ratio
  return [tensors.with_values(g, tf.cast(tf.where(clip, q * factor, w),
                                         tensors.values(g).dtype))
          for g, q, w in zip(grads, quotients, wide)]


def _value_clip(grad: tensors.Gradient, limit: float) -> tensors.Gradient:
  return tensors.with_values(
      grad, tf.clip_by_value(tensors.values(grad), -limit, limit))


@dataclasses.dataclass(frozen=True)
class Clip:
  """One clip option and its limit.

  Attributes:
    option: "clipnorm", "clipvalue" or "global_clipnorm".
    limit: The threshold, > 0.
  """
  option: str
  limit: float

  @property
  def check_clipped(self) -> bool:
    """True if the finite check must see the clipped gradients (norm clips)."""
    return self.option != "clipvalue"

  def __call__(self, grads: tensors.GradientList) -> tensors.GradientList:
    """Returns `grads` clipped (None entries kept, sparse kept sparse)."""
    merged = [None if g is None else _merge_duplicates(g) for g in grads]
    present = [g for g in merged if g is not None]
    if self.option == "global_clipnorm":
      clipped = iter(_norm_clip(present, self.limit) if present else [])
      return [None if g is None else next(clipped) for g in merged]
    if self.option == "clipnorm":
      return [None if g is None else _norm_clip([g], self.limit)[0]
              for g in merged]
    return [None if g is None else _value_clip(g, self.limit) for g in merged]


def make_clip(clipnorm: Optional[float] = None,
              clipvalue: Optional[float] = None,
              global_clipnorm: Optional[float] = None) -> Optional[Clip]:
  """Returns the clip the options ask for, or None for no clip.

  Args:
    clipnorm: Clip each gradient to this L2 norm.
    clipvalue: Clip each entry to [-clipvalue, clipvalue].
    global_clipnorm: Scale all gradients so that their joint L2 norm is at
      most this.

  Returns:
    None if no option is set, else a `Clip`: a function from a list of
    gradients (None entries kept) to the clipped list.

  Raises:
    TypeError: If a set option is not a Python int/float.
    ValueError: If a set option is not finite and > 0, or more than one is
      set (as in Keras).
  """
  options = {"clipnorm": clipnorm, "clipvalue": clipvalue,
             "global_clipnorm": global_clipnorm}
  given = {name: value for name, value in options.items() if value is not None}
  for name, value in given.items():
    given[name] = validation.check_greater(name, value, 0.0)
  if len(given) > 1:
    raise ValueError(
        "Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be "
        f"set, got {', '.join(f'{k}={v:g}' for k, v in given.items())}.")
  if not given:
    return None
  (name, limit), = given.items()
  return Clip(name, limit)


def _first_replica_only(grad: tensors.Gradient) -> tensors.Gradient:
  """Keeps `grad` on replica 0 and zeroes it elsewhere (grads are finite)."""
  replica = tf.distribute.get_replica_context().replica_id_in_sync_group
  keep = tf.cast(tf.equal(replica, 0), grad.dtype)
  return tensors.with_values(grad, tensors.values(grad) * keep)


def reduce_and_clip(strategy: tf.distribute.Strategy, clip: Clip,
                    pairs: tensors.GradsAndVars
                    ) -> Tuple[tensors.Gradient, ...]:
  """The gradients the update will use: clipped, and summed over replicas.

  With one replica, each gradient clipped. With several, the v1 inner
  optimizer sums the replicas' gradients itself, so the sum is reduced here,
  clipped identically on every replica, and kept on the first replica only
  (zeros elsewhere): the inner optimizer's own sum then reproduces the
  clipped sum exactly. That costs a second all-reduce per step, only when
  clipping across replicas; a sum that overflowed is not finite, and the
  finite check then skips the step like any overflow.
  """
  grads = tuple(g for g, _ in pairs)
  several = strategy.num_replicas_in_sync > 1
  if several:
    grads = tuple(strategy.extended.batch_reduce_to(
        tf.distribute.ReduceOp.SUM, pairs))

  def clip_local(*local: tensors.Gradient) -> Tuple[tensors.Gradient, ...]:
    local = clip(list(local))
    return tuple(_first_replica_only(g) for g in local) if several else tuple(
        local)

  return tuple(strategy.extended.call_for_each_replica(clip_local,
                                                       args=grads))
