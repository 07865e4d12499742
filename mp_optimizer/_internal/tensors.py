"""Type aliases and the small tensor idioms every layer uses, defined once."""

from typing import List, Optional, Sequence, Tuple, Union

import tensorflow as tf

# A gradient as `compute_gradients` returns it.
Gradient = Optional[Union[tf.Tensor, tf.IndexedSlices]]
GradsAndVars = Sequence[Tuple[Gradient, tf.Variable]]
GradientList = List[Gradient]


def values(grad: Union[tf.Tensor, tf.IndexedSlices]) -> tf.Tensor:
  """The tensor of entries: `.values` of an `IndexedSlices`, else `grad`."""
  return grad.values if isinstance(grad, tf.IndexedSlices) else grad


def with_values(grad: Union[tf.Tensor, tf.IndexedSlices],
                new_values: tf.Tensor) -> Union[tf.Tensor, tf.IndexedSlices]:
  """`grad` with its entries replaced; an `IndexedSlices` stays sparse."""
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(new_values, grad.indices, grad.dense_shape)
  return new_values


def in_cross_replica_context() -> bool:
  """True under a `tf.distribute` strategy, outside its replica functions."""
  return (tf.distribute.has_strategy() and
          tf.distribute.in_cross_replica_context())
