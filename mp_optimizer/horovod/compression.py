"""`Compression.none` / `Compression.fp16` and the reductions `Average` / `Sum`.

As Horovod: `fp16` casts floating-point tensors to float16 before the
reduction and back to their own dtype after it; other dtypes pass as they
are. `Average` divides the sum by the number of ranks, in the dtype that
was reduced.
"""

import enum
from typing import Any, Optional, Tuple

import tensorflow as tf


class ReduceOp(enum.Enum):
  """How `allreduce` combines the ranks' tensors."""
  AVERAGE = "Average"
  SUM = "Sum"


Average = ReduceOp.AVERAGE
Sum = ReduceOp.SUM


class NoneCompressor:
  """Sends tensors as they are."""

  @staticmethod
  def compress(tensor: tf.Tensor) -> Tuple[tf.Tensor, Optional[tf.DType]]:
    """Returns `tensor` and no context."""
    return tensor, None

  @staticmethod
  def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:  # pylint: disable=unused-argument
    """Returns `tensor`."""
    return tensor


class FP16Compressor:
  """Sends floating-point tensors as float16."""

  @staticmethod
  def compress(tensor: tf.Tensor) -> Tuple[tf.Tensor, tf.DType]:
    """Returns `tensor` cast to float16 if floating point, and its dtype."""
    if tensor.dtype.is_floating:
      return tf.cast(tensor, tf.float16), tensor.dtype
    return tensor, tensor.dtype

  @staticmethod
  def decompress(tensor: tf.Tensor, ctx: tf.DType) -> tf.Tensor:
    """Returns `tensor` cast back to `ctx`, the dtype before `compress`."""
    return tf.cast(tensor, ctx) if ctx.is_floating else tensor


class Compression:
  """The compressors `DistributedOptimizer` and `allreduce` accept."""
  none = NoneCompressor
  fp16 = FP16Compressor


def check_compression(compression: Any) -> Any:
  """Returns `compression` if it is `Compression.none` or `.fp16`.

  Raises:
    ValueError: For anything else (Horovod's other compressors included).
  """
  if compression not in (NoneCompressor, FP16Compressor):
    raise ValueError(
        "`compression` must be hvd.Compression.none or hvd.Compression.fp16, "
        f"got {compression!r}.")
  return compression


def check_op(op: Any) -> ReduceOp:
  """Returns `op` if it is `Average` or `Sum`.

  (`hvd.Adasum`, `hvd.Min`, ... are refused where they are looked up.)

  Raises:
    ValueError: For anything else.
  """
  if isinstance(op, ReduceOp):
    return op
  if op is None:
    return Average
  raise ValueError(f"`op` must be hvd.Average or hvd.Sum, got {op!r}.")
