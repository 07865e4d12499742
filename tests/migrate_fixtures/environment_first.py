#!/usr/bin/env python
# Legacy fixture for tests/test_migrate_behaviour.py: a launcher that must set
# TensorFlow's environment before TensorFlow is imported.
"""Trains a float16 linear model for a few steps; prints `final loss`."""

import os
import sys

if "tensorflow" in sys.modules:
  raise RuntimeError("TensorFlow was imported before its environment was set")
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["TF_DETERMINISTIC_OPS"] = "1"
import numpy as np
import tensorflow as tf

v1 = tf.compat.v1


def main():
  v1.disable_eager_execution()
  rng = np.random.RandomState(0)
  features = rng.normal(size=(32, 4)).astype(np.float32)
  targets = features @ rng.normal(size=(4, 1)).astype(np.float32)
  weights = v1.get_variable("w", [4, 1], initializer=v1.zeros_initializer())
  prediction = tf.matmul(tf.cast(features, tf.float16),
                         tf.cast(weights, tf.float16))
  loss = tf.reduce_mean(tf.square(tf.cast(prediction, tf.float32) - targets))
  manager = tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(
      init_loss_scale=2**15, incr_every_n_steps=1000)
  opt = tf.contrib.mixed_precision.LossScaleOptimizer(
      v1.train.GradientDescentOptimizer(0.1), manager)
  train_op = opt.minimize(loss)
  with v1.Session() as sess:
    sess.run(v1.global_variables_initializer())
    first = sess.run(loss)
    for _ in range(50):
      sess.run(train_op)
    print(f"first loss {first:.4f} final loss {sess.run(loss):.4f}")


if __name__ == "__main__":
  main()
