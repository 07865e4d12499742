# Legacy fixture for tests/test_migrate_behaviour.py: a TF 1.15-era graph
# model with TensorFlow's own fixed loss scale. Keep it legacy: the tests
# convert it and compare it with TensorFlow running the original.
"""Linear regression in float16 with a fixed loss scale of 128."""

import tensorflow as tf

v1 = tf.compat.v1


def build(features, targets, learning_rate=0.1):
  """Returns (loss, train_op, weights) of a float16 linear model."""
  weights = v1.get_variable("weights", [features.shape[1], 1],
                            initializer=v1.zeros_initializer())
  prediction = tf.matmul(tf.cast(features, tf.float16),
                         tf.cast(weights, tf.float16))
  loss = tf.reduce_mean(tf.square(tf.cast(prediction, tf.float32) - targets))
  opt = v1.train.GradientDescentOptimizer(learning_rate)
  opt = v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
      opt, v1.mixed_precision.FixedLossScale(128))
  return loss, opt.minimize(loss), weights
