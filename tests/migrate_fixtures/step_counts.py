# Legacy fixture for tests/test_migrate_behaviour.py: dynamic loss scales
# whose step counts were written as floats, as configs often had them.
"""Loss-scale managers built from float step counts."""

import tensorflow as tf
from tensorflow.contrib.mixed_precision import ExponentialUpdateLossScaleManager

INCREMENT_EVERY = 2.0


def contrib_manager(init_loss_scale):
  return ExponentialUpdateLossScaleManager(init_loss_scale,
                                           incr_every_n_steps=2.0,
                                           decr_every_n_nan_or_inf=1e0)


def tf_loss_scale(initial_loss_scale):
  return tf.compat.v1.mixed_precision.DynamicLossScale(
      initial_loss_scale=initial_loss_scale, increment_period=2.)
