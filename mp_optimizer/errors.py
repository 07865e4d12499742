"""The exception classes this library defines.

Every other error is a built-in `TypeError`, `ValueError` or `RuntimeError`,
or TensorFlow's own `tf.errors` class, with a message that names the fix.
"""

__all__ = ["ArgumentTypeError"]


class ArgumentTypeError(TypeError, ValueError):
  """An argument of the wrong type, where TensorFlow raised ValueError.

  `TypeError` is this library's class for a wrong type;
  TensorFlow's `MixedPrecisionLossScaleOptimizer` and
  `enable_mixed_precision_graph_rewrite` raise `ValueError` for the same
  mistakes. Being both, it is caught by code written against either.
  """
