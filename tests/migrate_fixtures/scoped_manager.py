# Legacy fixture for tests/test_migrate_behaviour.py: a contrib manager made
# inside the model's variable scope, so its variables were saved under it.
"""A small classifier whose loss-scale state lives in the `fp16` scope."""

import tensorflow as tf

v1 = tf.compat.v1


def build(features, labels):
  """Returns (loss, train_op)."""
  with v1.variable_scope("fp16"):
    manager = tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(
        init_loss_scale=2**10, incr_every_n_steps=100)
  kernel = v1.get_variable("kernel", [features.shape[1], 3],
                           initializer=v1.zeros_initializer())
  logits = tf.matmul(tf.cast(features, tf.float16), tf.cast(kernel, tf.float16))
  loss = v1.losses.sparse_softmax_cross_entropy(labels,
                                                tf.cast(logits, tf.float32))
  opt = tf.contrib.mixed_precision.LossScaleOptimizer(
      v1.train.GradientDescentOptimizer(0.5), manager)
  return loss, opt.minimize(loss, v1.train.get_or_create_global_step())
