"""Float16 loss scaling for `tf.compat.v1` graph code on TensorFlow 2.x.

`LossScaleOptimizer(opt, manager)` is the `tf.contrib.mixed_precision` API;
`MixedPrecisionLossScaleOptimizer(opt, loss_scale)` is TF's
`tf.compat.v1.mixed_precision` API. Both are one optimizer. The loss-scale
policies live in the sibling package `managers`.
"""

from mp_optimizer.optimizer import LossScaleOptimizer

__version__ = "0.1.0"

__all__ = [
    "LossScaleOptimizer",
]
