"""Gradient clipping on unscaled gradients: `clipnorm`, `clipvalue`, `global_clipnorm`.

The optimizer clips inside `apply_gradients`, after the finite check and
inside the branch that applies the step: the gradients are already unscaled,
so thresholds mean what they say, and a NaN/Inf step never reaches a norm.

Sparse gradients stay `tf.IndexedSlices`. Their duplicate indices are summed
first (`tf.unique` + `tf.math.unsorted_segment_sum`, the size of the slices,
not of the variable), because a norm or an elementwise clip of the raw slices
would differ from that of the gradient they add up to.
"""

from typing import Callable, List, Optional

import tensorflow as tf

from mp_optimizer.managers import _validation

Clip = Callable[[List], List]


def _merge_duplicates(grad):
  if not isinstance(grad, tf.IndexedSlices):
    return grad
  unique, positions = tf.unique(grad.indices)
  values = tf.math.unsorted_segment_sum(grad.values, positions,
                                        tf.size(unique))
  return tf.IndexedSlices(values, unique, grad.dense_shape)


def _clip_value(grad, limit: float):
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(tf.clip_by_value(grad.values, -limit, limit),
                            grad.indices, grad.dense_shape)
  return tf.clip_by_value(grad, -limit, limit)


def make_clip(clipnorm: Optional[float] = None,
              clipvalue: Optional[float] = None,
              global_clipnorm: Optional[float] = None) -> Optional[Clip]:
  """Returns a function that clips a list of gradients, or None for no clip.

  Args:
    clipnorm: Clip each gradient to this L2 norm (`tf.clip_by_norm`).
    clipvalue: Clip each entry to [-clipvalue, clipvalue].
    global_clipnorm: Scale all gradients so that their joint L2 norm is at
      most this (`tf.clip_by_global_norm`).

  Returns:
    None if no option is set, else a function from a list of gradients
    (None entries kept) to the clipped list.

  Raises:
    TypeError: If a set option is not a Python int/float.
    ValueError: If a set option is not finite and > 0, or more than one is
      set (as in Keras).
  """
  options = {"clipnorm": clipnorm, "clipvalue": clipvalue,
             "global_clipnorm": global_clipnorm}
  given = {name: value for name, value in options.items() if value is not None}
  for name, value in given.items():
    given[name] = _validation.check_greater(name, value, 0.0)
  if len(given) > 1:
    raise ValueError(
        "Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be "
        f"set, got {', '.join(f'{k}={v:g}' for k, v in given.items())}.")
  if not given:
    return None
  (name, limit), = given.items()

  def clip(grads: List) -> List:
    grads = [None if g is None else _merge_duplicates(g) for g in grads]
    if name == "global_clipnorm":
      return tf.clip_by_global_norm(grads, limit)[0]
    if name == "clipnorm":
      return [None if g is None else tf.clip_by_norm(g, limit) for g in grads]
    return [None if g is None else _clip_value(g, limit) for g in grads]

  return clip
