# Legacy fixture for tests/test_migrate_behaviour.py, in the shape of a
# tensor2tensor fork's loss_scale_manager.py: a subclass of contrib's manager
# that skips contrib's __init__ and sets contrib's private attributes itself,
# leaving contrib's inherited update_loss_scale to read them.
"""A dynamic loss-scale manager whose variables live under one scope."""

import tensorflow as tf


class ScopedLossScaleManager(
    tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager):
  """contrib's manager, with its variables made under `scope`."""

  def __init__(self, scope, init_loss_scale=2**15, incr_every_n_steps=2000,
               decr_every_n_nan_or_inf=2, incr_ratio=2, decr_ratio=0.5):
    # contrib's __init__ is not called: its variables would be unscoped.
    self._incr_every_n_steps = incr_every_n_steps
    self._decr_every_n_nan_or_inf = decr_every_n_nan_or_inf
    self._incr_ratio = incr_ratio
    self._decr_ratio = decr_ratio
    with tf.compat.v1.variable_scope(scope):
      self._loss_scale = tf.compat.v1.get_variable(
          "loss_scale", initializer=float(init_loss_scale), trainable=False)
      self._num_good_steps = tf.compat.v1.get_variable(
          "good_steps", initializer=0, trainable=False)
      self._num_bad_steps = tf.compat.v1.get_variable(
          "bad_steps", initializer=0, trainable=False)


class LoggedLossScaleManager(ScopedLossScaleManager):
  """Prints the scale whenever it is read."""

  def get_loss_scale(self):
    return tf.compat.v1.Print(self._loss_scale, [self._loss_scale])
