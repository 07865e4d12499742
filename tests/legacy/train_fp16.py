#!/usr/bin/env python
# Legacy fixture for tests/test_migrate.py: a plain tf.Session training script
# of the TF 1.15 era, written against tf.compat.v1 but still using
# tf.contrib.mixed_precision and tf.compat.v1.mixed_precision. Keep it legacy:
# the tests convert it.
"""Trains a float16 softmax classifier on synthetic blobs with loss scaling.

    python train_fp16.py --steps 300 --api contrib --loss_scale dynamic
    python train_fp16.py --api tf --loss_scale 1024 --model_dir /tmp/fp16
"""

import argparse
import sys

import numpy as np
import tensorflow as tf
from tensorflow.contrib.mixed_precision import ExponentialUpdateLossScaleManager
from tensorflow.contrib.mixed_precision import FixedLossScaleManager
from tensorflow.contrib.mixed_precision import (
    LossScaleOptimizer as ContribLossScaleOptimizer)

v1 = tf.compat.v1

NUM_FEATURES = 20
NUM_CLASSES = 4


def make_blobs(num_examples, seed):
  """Gaussian blobs, one per class, with unit-variance noise."""
  rng = np.random.RandomState(seed)
  centers = rng.normal(scale=3.0, size=(NUM_CLASSES, NUM_FEATURES))
  labels = rng.randint(NUM_CLASSES, size=num_examples)
  features = centers[labels] + rng.normal(size=(num_examples, NUM_FEATURES))
  return features.astype(np.float32), labels.astype(np.int64)


def wrap_optimizer(optimizer, api, loss_scale):
  """Returns (loss-scaling optimizer, tensor holding the current scale)."""
  if api == "contrib":
    if loss_scale == "dynamic":
      manager = ExponentialUpdateLossScaleManager(init_loss_scale=2**15,
                                                  incr_every_n_steps=100)
    else:
      manager = FixedLossScaleManager(float(loss_scale))
    return (ContribLossScaleOptimizer(optimizer, manager),
            manager.get_loss_scale())
  if loss_scale == "dynamic":
    scale = tf.compat.v1.mixed_precision.DynamicLossScale(
        initial_loss_scale=2**15, increment_period=100)
  else:
    scale = tf.compat.v1.mixed_precision.FixedLossScale(float(loss_scale))
  optimizer = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
      optimizer, scale)
  return optimizer, scale()


def build_graph(args):
  """Builds the model; returns a dict of the tensors and ops main() runs."""
  x = v1.placeholder(tf.float32, [None, NUM_FEATURES], name="x")
  y = v1.placeholder(tf.int64, [None], name="y")
  # float32 master weights, float16 compute.
  w = v1.get_variable("w", [NUM_FEATURES, NUM_CLASSES],
                      initializer=v1.random_normal_initializer(stddev=0.1))
  b = v1.get_variable("b", [NUM_CLASSES], initializer=v1.zeros_initializer())
  logits = tf.matmul(tf.cast(x, tf.float16), tf.cast(w, tf.float16)) + \
      tf.cast(b, tf.float16)
  loss = v1.losses.sparse_softmax_cross_entropy(y, tf.cast(logits, tf.float32))

  global_step = v1.train.get_or_create_global_step()
  optimizer, loss_scale = wrap_optimizer(
      v1.train.AdamOptimizer(args.learning_rate), args.api, args.loss_scale)
  train_op = optimizer.minimize(loss, global_step=global_step)
  return {"x": x, "y": y, "loss": loss, "loss_scale": loss_scale,
          "global_step": global_step, "train_op": train_op}


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--batch_size", type=int, default=64)
  parser.add_argument("--learning_rate", type=float, default=0.01)
  parser.add_argument("--api", choices=["contrib", "tf"], default="contrib")
  parser.add_argument("--loss_scale", default="dynamic",
                      help='"dynamic" or a fixed loss scale')
  parser.add_argument("--log_every", type=int, default=50)
  parser.add_argument("--model_dir", default=None,
                      help="where to save the final checkpoint")
  return parser.parse_args(argv)


def main(argv):
  args = parse_args(argv)
  v1.disable_eager_execution()
  features, labels = make_blobs(4096, seed=0)
  model = build_graph(args)
  saver = v1.train.Saver()
  rng = np.random.RandomState(1)
  with v1.Session() as sess:
    sess.run(v1.global_variables_initializer())
    for step in range(args.steps):
      batch = rng.randint(len(features), size=args.batch_size)
      _, loss = sess.run([model["train_op"], model["loss"]],
                         {model["x"]: features[batch],
                          model["y"]: labels[batch]})
      if step % args.log_every == 0 or step == args.steps - 1:
        print("step %d loss %.6f loss_scale %g global_step %d" % (
            step, loss, sess.run(model["loss_scale"]),
            sess.run(model["global_step"])))
        sys.stdout.flush()
    if args.model_dir:
      print("saved", saver.save(sess, args.model_dir + "/model.ckpt"))


if __name__ == "__main__":
  main(sys.argv[1:])
