"""Scaling a loss up and gradients back down, without densifying anything.

Both record what they made with `ancestry`, so `apply_gradients` can tell
gradients that went through here from ones that did not. `read_loss_scale`
reads the scale once, for a step that must use one S for both.
"""

from typing import List, Sequence

import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer._internal import tensors
from mp_optimizer._internal.tensors import Gradient
from mp_optimizer._step import records

# float32's smallest normal number, 2**-126. A scale above 2**126 has a
# subnormal reciprocal, which TensorFlow flushes to zero on CPU: every unscaled
# gradient would be exactly 0 and the step would pass as finite.
SMALLEST_NORMAL_RECIPROCAL = 2.0**-126


def read_loss_scale(manager: managers.LossScaleManager) -> tf.Tensor:
  """Returns one read of `manager`'s scale as a float32 tensor.

  `get_loss_scale()` may return the scale variable itself (as contrib did),
  which reads anew wherever it is used; a step that must use one S for
  several things (scale the loss, unscale the gradients) reads it here once.
  """
  return tf.convert_to_tensor(manager.get_loss_scale(), name="loss_scale_read")


def check_loss(loss) -> tf.Tensor:
  """Returns `loss` if it is a floating-point tensor; adds nothing to a graph.

  Raises:
    TypeError: Otherwise, saying what was received.
  """
  if not isinstance(loss, tf.Tensor) or not loss.dtype.is_floating:
    dtype = getattr(getattr(loss, "dtype", None), "name", type(loss).__name__)
    raise TypeError(
        f"`loss` must be a floating-point tf.Tensor, got {dtype} ({loss!r}). "
        "Cast the loss to float32 before minimizing it.")
  return loss


def scale_loss(loss: tf.Tensor, loss_scale: tf.Tensor) -> tf.Tensor:
  """Returns `loss * S`, with S cast to the loss's dtype.

  The result is one `Mul` op whose second input is that multiplier.

  Args:
    loss: A floating-point tensor (float16 losses stay float16), as accepted
      by `check_loss`.
    loss_scale: The float32 scalar scale.
  """
  scaled = tf.multiply(loss, tf.cast(loss_scale, loss.dtype),
                       name="scaled_loss")
  records.record_scaled_loss(scaled)
  return scaled


def _unscale_dense(grad: tf.Tensor, inverse: tf.Tensor) -> tf.Tensor:
  if grad.dtype == tf.float32:
    return grad * inverse
  if grad.dtype == tf.float64:
    return grad * tf.cast(inverse, tf.float64)
  # 16-bit gradients: 1/S may not be representable there; multiply in float32.
  return tf.cast(tf.cast(grad, tf.float32) * inverse, grad.dtype)


def unscale(grads: Sequence[Gradient], loss_scale: tf.Tensor) -> List[Gradient]:
  """Returns `grads` multiplied by 1/S, in float32.

  `None` stays `None`. A `tf.IndexedSlices` stays sparse: only `.values` is
  multiplied, its indices and dense shape are passed through. If 1/S is not a
  normal float32 (S > 2**126, reachable with float32 gradients), 1/S is
  replaced by NaN: the step then counts as an overflow (skipped, and the scale
  shrinks) instead of applying all-zero gradients as if it were finite.

  Args:
    grads: Gradients of the scaled loss.
    loss_scale: The float32 scalar scale that loss was multiplied by.

  Returns:
    A new list, one entry per gradient.
  """
  inverse = tf.math.reciprocal(loss_scale)
  inverse = tf.where(inverse >= SMALLEST_NORMAL_RECIPROCAL, inverse,
                     float("nan"), name="inverse_loss_scale")
  result = [None if grad is None else tensors.with_values(
      grad, _unscale_dense(tf.convert_to_tensor(tensors.values(grad)), inverse))
            for grad in grads]
  records.record_unscaled(result)
  return result
