"""Reduce, gather and broadcast across the ranks on TensorFlow's collective ops.

Each call builds graph ops (`CollectiveReduceV2`, `CollectiveGatherV2`,
`CollectiveBcastSendV2` / `CollectiveBcastRecvV2`); TensorFlow's collective
runtime moves the data (gRPC between processes). Every rank is in one group;
an op's instance key comes from a per-process counter in build order, so the
ranks must build their collectives in the same order: the same script does.
Where Horovod matches tensors by name, this matches them by that order.

Tensors of one dtype are reduced together: flattened into one buffer, one
collective, split back (Horovod's tensor fusion, with no size cap).
"""

import itertools
from typing import Dict, List, Sequence

import tensorflow as tf

from mp_optimizer.horovod import basics
from mp_optimizer.horovod import compression

_GROUP_KEY = 1
_INSTANCE_KEYS = itertools.count(1)


def _keys() -> Dict[str, int]:
  return {"group_size": basics.size(), "group_key": _GROUP_KEY,
          "instance_key": next(_INSTANCE_KEYS)}


def reduce(tensor: tf.Tensor, op: compression.ReduceOp) -> tf.Tensor:
  """The sum (or average) of `tensor` over the ranks, identical on each."""
  final_op = "Div" if op == compression.Average else "Id"
  reduced = tf.raw_ops.CollectiveReduceV2(
      input=tensor, ordering_token=[], merge_op="Add", final_op=final_op,
      **_keys())
  reduced.set_shape(tensor.shape)
  return reduced


def reduce_fused(tensors: Sequence[tf.Tensor],
                 op: compression.ReduceOp) -> List[tf.Tensor]:
  """`reduce` of each tensor, with one collective per dtype."""
  by_dtype: Dict[tf.DType, List[int]] = {}
  for index, tensor in enumerate(tensors):
    by_dtype.setdefault(tensor.dtype, []).append(index)
  reduced = [None] * len(tensors)
  for indices in by_dtype.values():
    group = [tensors[i] for i in indices]
    if len(group) == 1:
      reduced[indices[0]] = reduce(group[0], op)
      continue
    buffer = reduce(tf.concat([tf.reshape(t, [-1]) for t in group], 0), op)
    pieces = tf.split(buffer, tf.stack([tf.size(t) for t in group]),
                      num=len(group))
    for index, piece, tensor in zip(indices, pieces, group):
      reduced[index] = tf.reshape(piece, tf.shape(tensor))
      reduced[index].set_shape(tensor.shape)
  return reduced


def gather(tensor: tf.Tensor) -> tf.Tensor:
  """The ranks' tensors concatenated on axis 0, in rank order.

  The first dimension may differ between ranks (as Horovod's allgather):
  the sizes are gathered first, each rank pads to the largest, and the
  padding is dropped from the result.
  """
  rows = tf.shape(tensor)[:1]
  sizes = tf.raw_ops.CollectiveGatherV2(input=rows, ordering_token=[],
                                        **_keys())
  longest = tf.reduce_max(sizes)
  padding = tf.concat([[[0, longest - rows[0]]],
                       tf.zeros([tensor.shape.rank - 1, 2], tf.int32)], 0)
  gathered = tf.raw_ops.CollectiveGatherV2(
      input=tf.pad(tensor, padding), ordering_token=[], **_keys())
  result = tf.boolean_mask(gathered, tf.reshape(
      tf.sequence_mask(sizes, longest), [-1]))
  result.set_shape(tf.TensorShape([None]).concatenate(tensor.shape[1:]))
  return result


def broadcast(tensor: tf.Tensor, root_rank: int) -> tf.Tensor:
  """`root_rank`'s `tensor` on every rank (each passes one of its shape)."""
  if basics.rank() == root_rank:
    sent = tf.raw_ops.CollectiveBcastSendV2(input=tensor, **_keys())
  else:
    sent = tf.raw_ops.CollectiveBcastRecvV2(
        shape=tf.shape(tensor), T=tensor.dtype, **_keys())
  sent.set_shape(tensor.shape)
  return sent
