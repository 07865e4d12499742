#!/usr/bin/env python
# Legacy fixture for tests/test_nvidia_environment.py and the codemod, in the
# shape of an NVIDIA container's ResNet runner: mixed precision came only
# from TF_ENABLE_AUTO_MIXED_PRECISION_* variables set under an --amp flag.
"""Trains a small float32 classifier; prints each step's loss."""

import argparse
import os

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1


class Runner(object):
  """Sets the container's environment, then builds and trains the model."""

  def __init__(self, use_tf_amp, use_static_loss_scaling=False):
    os.environ["TF_DETERMINISTIC_OPS"] = "1"
    # ============================================
    # TF-AMP Setup - Do not remove
    # ============================================
    if use_tf_amp:
      os.environ["TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE"] = "1"
    else:
      os.environ["TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE"] = "0"
    self.use_tf_amp = use_tf_amp
    self.use_static_loss_scaling = use_static_loss_scaling

  def train(self, steps=20, learning_rate=0.05):
    if self.use_tf_amp:
      if self.use_static_loss_scaling:
        os.environ["TF_ENABLE_AUTO_MIXED_PRECISION_LOSS_SCALING"] = "0"
      else:
        os.environ["TF_ENABLE_AUTO_MIXED_PRECISION_LOSS_SCALING"] = "1"
    v1.disable_eager_execution()
    rng = np.random.RandomState(0)
    images = rng.normal(size=(64, 16)).astype(np.float32)
    labels = (images @ rng.normal(size=(16, 4))).argmax(axis=1)
    with tf.Graph().as_default():
      v1.set_random_seed(0)
      init = v1.glorot_uniform_initializer(seed=0)
      w1 = v1.get_variable("w1", [16, 32], initializer=init)
      w2 = v1.get_variable("w2", [32, 4], initializer=init)
      logits = tf.matmul(tf.nn.relu(tf.matmul(images, w1)), w2)
      loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
      global_step = v1.train.get_or_create_global_step()
      opt = v1.train.MomentumOptimizer(learning_rate, momentum=0.9)
      train_op = opt.minimize(loss, global_step=global_step)
      with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        for _ in range(steps):
          _, value = sess.run([train_op, loss])
          print(f"loss {value:.9f}")
        rewrite = sess._config.graph_options.rewrite_options  # pylint: disable=protected-access
        print("auto_mixed_precision", rewrite.auto_mixed_precision)
        print("scale variables", sorted(
            v.op.name for v in v1.global_variables()
            if "loss_scale" in v.op.name or "good_steps" in v.op.name))


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--amp", action="store_true")
  parser.add_argument("--static-loss-scale", action="store_true")
  args = parser.parse_args()
  Runner(args.amp, args.static_loss_scale).train()


if __name__ == "__main__":
  main()
