"""Which optimizers TF's `enable_mixed_precision_graph_rewrite` wraps itself.

TF decides by a registry: every Keras that TensorFlow has loaded registers
its optimizer base class and the loss-scale wrapper TF should use for it
(`tf.compat.v1.train.Optimizer` itself, TF's frozen Keras copy's
`OptimizerV2` in `tensorflow.python.keras`, and on TF <= 2.15 Keras 2's
`OptimizerV2`). TensorFlow has no public way to read it, so it is read here,
and only here, from `tensorflow.python.training.experimental.mixed_precision`
(`_REGISTERED_WRAPPER_OPTIMIZER_CLS`, checked on TF 2.15 and 2.21). Deciding
by the same table means this library refuses exactly what TF refuses.
"""

from typing import Tuple

import tensorflow as tf
from tensorflow.python.training.experimental import mixed_precision  # pylint: disable=g-direct-tensorflow-import


def _registered() -> dict:
  return dict(mixed_precision._REGISTERED_WRAPPER_OPTIMIZER_CLS)  # pylint: disable=protected-access


def keras_optimizer_classes() -> Tuple[type, ...]:
  """The optimizer classes TF wraps in a Keras loss-scale optimizer."""
  return tuple(cls for cls in _registered()
               if not issubclass(cls, tf.compat.v1.train.Optimizer))


def wrapper_classes() -> Tuple[type, ...]:
  """The loss-scale wrappers TF refuses to wrap again."""
  return tuple(wrapper for _, wrapper in _registered().values()
               if isinstance(wrapper, type))
