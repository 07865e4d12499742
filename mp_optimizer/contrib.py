"""`tf.contrib.mixed_precision`, name for name.

Legacy code changes one import and nothing else::

    # from tensorflow.contrib import mixed_precision
    from mp_optimizer import contrib as mixed_precision

    manager = mixed_precision.ExponentialUpdateLossScaleManager(2**15, 2000)
    opt = mixed_precision.LossScaleOptimizer(opt, manager)
"""

from mp_optimizer.managers import ExponentialUpdateLossScaleManager
from mp_optimizer.managers import FixedLossScaleManager
from mp_optimizer.managers import LossScaleManager
from mp_optimizer.optimizer import LossScaleOptimizer

__all__ = [
    "ExponentialUpdateLossScaleManager",
    "FixedLossScaleManager",
    "LossScaleManager",
    "LossScaleOptimizer",
]
