# Legacy fixture for tests/test_migrate_behaviour.py, in the shape of the
# official models' Keras training loops: a Keras optimizer (through TF 2.x's
# `tf.optimizers` alias) given to the graph rewrite with a fixed scale. The
# rewrite hands it to Keras's LossScaleOptimizer, as TensorFlow's did, so no
# fixed-scale notice: only the finding that TF 2.x refuses Keras 3 ones.
"""Keras optimizer set-up with a fixed loss scale of 128."""

import tensorflow as tf


def build_optimizer(learning_rate, fp16_implementation):
  optimizer = tf.optimizers.Adam(learning_rate)
  if fp16_implementation == "graph_rewrite":
    optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(
        optimizer, loss_scale=128)
  return optimizer
