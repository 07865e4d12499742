"""`allreduce`, `allgather`, `broadcast`, and the gradients' reduction.

A `tf.IndexedSlices` is reduced as Horovod does: its values and indices are
gathered from every rank (values divided by the number of ranks for
`Average`), never compressed; with `sparse_as_dense` it is made dense first
and reduced with the others. Dense tensors are compressed, reduced with
one collective per dtype (`collectives.reduce_fused`), and decompressed.
"""

from typing import Any, List, Optional, Sequence, Union

import tensorflow as tf

from mp_optimizer._internal import tensors
from mp_optimizer._internal import validation
from mp_optimizer.horovod import basics
from mp_optimizer.horovod import collectives
from mp_optimizer.horovod import compression as compressions

Gradient = Optional[Union[tf.Tensor, tf.IndexedSlices]]


def _check_unsupported(api: str, **options: Any) -> None:
  """Refuses Horovod options this module does not implement, by name."""
  for name, value in options.items():
    if value not in (None, 1.0, ""):
      raise NotImplementedError(
          f"`{name}` of hvd.{api} is not supported by mp_optimizer.horovod "
          f"(got {value!r}); scale the tensor before or after the call.")


def _gather_slices(grad: tf.IndexedSlices,
                   op: compressions.ReduceOp) -> tf.IndexedSlices:
  values = collectives.gather(grad.values)
  if op == compressions.Average:
    values = values / tf.cast(basics.size(), values.dtype)
  return tf.IndexedSlices(values, collectives.gather(grad.indices),
                          grad.dense_shape)


def reduce_gradients(grads: Sequence[Gradient], op: compressions.ReduceOp,
                     compression: Any = compressions.NoneCompressor,
                     sparse_as_dense: bool = False,
                     carry_scale: Optional[tf.Tensor] = None
                     ) -> List[Gradient]:
  """Every rank's gradients combined; `None` stays `None` (module doc).

  Args:
    grads: Gradients, `tf.IndexedSlices` or `None`.
    op: `Average` or `Sum`.
    compression: `Compression.none` or `Compression.fp16`.
    sparse_as_dense: Make `tf.IndexedSlices` dense before reducing.
    carry_scale: A loss scale S, or None. Dense gradients are multiplied by
      S before compression and by 1/S after decompression, so float16
      carries them scaled (the scale they were unscaled from).
  """
  if sparse_as_dense:
    grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices)
             else g for g in grads]
  dense = [i for i, g in enumerate(grads) if isinstance(g, tf.Tensor)]
  sent, contexts = [], []
  for i in dense:
    grad = grads[i] if carry_scale is None else grads[i] * tf.cast(
        carry_scale, grads[i].dtype)
    compressed, context = compression.compress(grad)
    sent.append(compressed)
    contexts.append(context)
  result = list(grads)
  for i, reduced, context in zip(dense, collectives.reduce_fused(sent, op),
                                 contexts):
    grad = compression.decompress(reduced, context)
    result[i] = grad if carry_scale is None else grad * tf.math.reciprocal(
        tf.cast(carry_scale, grad.dtype))
  for i, grad in enumerate(grads):
    if isinstance(grad, tf.IndexedSlices):
      result[i] = _gather_slices(grad, op)
  return result


def allreduce(tensor: Union[tf.Tensor, tf.Variable, tf.IndexedSlices],
              average: Optional[bool] = None, device_dense: str = "",
              device_sparse: str = "", compression: Any = None,
              op: Any = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, name: Optional[str] = None
              ) -> Union[tf.Tensor, tf.IndexedSlices]:
  """The average (or sum) of `tensor` over every rank, as Horovod's.

  Args:
    tensor: A tensor, variable or `tf.IndexedSlices` of the same shape on
      every rank.
    average: Deprecated in Horovod: True is `op=Average`, False `op=Sum`.
    device_dense: Device of the reduction of a dense tensor.
    device_sparse: Device of the gathers of a `tf.IndexedSlices`.
    compression: `Compression.none` (default) or `Compression.fp16`.
    op: `Average` (default) or `Sum`.
    prescale_factor: Only 1.0 is supported.
    postscale_factor: Only 1.0 is supported.
    name: Optional name scope of the ops.

  Returns:
    A tensor of `tensor`'s shape and dtype, identical on every rank, or a
    `tf.IndexedSlices` of every rank's slices.

  Raises:
    NotImplementedError: For a scale factor other than 1.0.
    RuntimeError: Under eager execution.
    ValueError: For an unknown `op` or `compression`, or both `op` and
      `average`.
  """
  tensors.require_graph("hvd.allreduce")
  _check_unsupported("allreduce", prescale_factor=prescale_factor,
                     postscale_factor=postscale_factor)
  if average is not None:
    if op is not None:
      raise ValueError("hvd.allreduce takes `op` or `average`, not both.")
    op = compressions.Average if average else compressions.Sum
  op = compressions.check_op(op)
  compression = compressions.check_compression(
      compression or compressions.NoneCompressor)
  with tf.name_scope(name or "HorovodAllreduce"):
    if isinstance(tensor, tf.IndexedSlices):
      with tf.device(device_sparse):
        return _gather_slices(tensor, op)
    with tf.device(device_dense):
      return reduce_gradients([tf.convert_to_tensor(tensor)], op,
                              compression)[0]


def allgather(tensor: Union[tf.Tensor, tf.Variable],
              name: Optional[str] = None) -> tf.Tensor:
  """Every rank's `tensor` concatenated on axis 0, in rank order.

  The first dimension may differ between ranks; the others must agree.

  Raises:
    RuntimeError: Under eager execution.
    ValueError: If `tensor` is a scalar.
  """
  tensors.require_graph("hvd.allgather")
  tensor = tf.convert_to_tensor(tensor)
  if tensor.shape.rank == 0:
    raise ValueError("`tensor` of hvd.allgather must have at least one "
                     "dimension, got a scalar.")
  with tf.name_scope(name or "HorovodAllgather"):
    return collectives.gather(tensor)


def broadcast(tensor: Union[tf.Tensor, tf.Variable], root_rank: int,
              name: Optional[str] = None) -> tf.Tensor:
  """`root_rank`'s value of `tensor` on every rank.

  Raises:
    RuntimeError: Under eager execution.
    TypeError: If `root_rank` is not an int.
    ValueError: If `root_rank` is not a rank, 0 to size() - 1.
  """
  tensors.require_graph("hvd.broadcast")
  check_root_rank(root_rank)
  with tf.name_scope(name or "HorovodBroadcast"):
    return collectives.broadcast(tf.convert_to_tensor(tensor), root_rank)


def check_root_rank(root_rank: Any) -> int:
  """Returns `root_rank` if it names a rank (raises as `broadcast` says)."""
  validation.check_positive_int("root_rank", root_rank, minimum=0)
  if root_rank >= basics.size():
    raise ValueError(f"`root_rank` must be < hvd.size() = {basics.size()}, "
                     f"got {root_rank}.")
  return root_rank
