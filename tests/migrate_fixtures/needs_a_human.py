# Legacy fixture for tests/test_migrate_behaviour.py: shapes the codemod must
# report, not convert silently.
"""Optimizer set-up of a translation model (as TF 1.15 and 2.0 code had it)."""

import tensorflow_core as tf
from tensorflow_core.contrib.mixed_precision import LossScaleOptimizer


def build_optimizer(loss, learning_rate, manager):
  opt = tf.train.AdamOptimizer(learning_rate)
  opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(opt)
  opt = LossScaleOptimizer(opt, manager)
  return opt.minimize(loss)


def reset_scale(manager, value):
  return tf.compat.v1.assign(manager.get_loss_scale(), value)


def make_manager():
  return tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(
      init_loss_scale=2**15, incr_every_n_steps=1000.5)
