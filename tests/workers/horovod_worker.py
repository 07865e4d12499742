"""One Horovod rank: `horovodrun -np 2 ... horovod_worker.py OUT_DIR`.

Writes OUT_DIR/<rank>_<case>.npz for three cases, each its own graph:

* "schedule": our optimizer outside `hvd.DistributedOptimizer`; rank r is
  replica r of `replicated.SCHEDULE`. Records the scale, global_step and w
  after every step.
* "tiny_ours_outside" / "tiny_hvd_outside": gradients TINY_GRADIENTS (at
  most 2e-8) sent with `hvd.Compression.fp16`, in both wrapping orders;
  records w after one SGD step (learning rate 1) from zero. Outside, our
  optimizer hands Horovod the scaled gradients (at most 7e-4 at S = 2**15),
  which float16 holds; inside, Horovod compresses the unscaled ones, below
  half of float16's smallest subnormal (6e-8), to zero.
* "huge_scale": our optimizer outside, fp16 compression, S = 2**30 and
  gradients near 1: the compressed gradients are Inf. Records the scale and
  global_step after each of two steps.
"""

import os
import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.workers import replicated

v1 = tf.compat.v1
TINY_GRADIENTS = np.array([0.5e-8, 1e-8, 2e-8], np.float32)


def run_schedule() -> dict:
  poisoned_replica = v1.placeholder(tf.int32, [])
  w = v1.get_variable("w", initializer=replicated.INITIAL_W)
  global_step = v1.train.get_or_create_global_step()
  x, y = replicated.replica_data(hvd.rank())
  poison = tf.where(tf.equal(hvd.rank(), poisoned_replica), np.inf, 1.0)
  opt = mp_optimizer.LossScaleOptimizer(
      hvd.DistributedOptimizer(v1.train.MomentumOptimizer(
          replicated.LEARNING_RATE, replicated.MOMENTUM)),
      replicated.MANAGERS["tf2"]())
  train_op = opt.minimize(replicated.loss(w, x, y) * poison,
                          global_step=global_step)
  history = {"scales": [], "steps": [], "ws": []}
  with v1.Session() as sess:
    sess.run(v1.global_variables_initializer())
    sess.run(hvd.broadcast_global_variables(0))
    for replica in replicated.SCHEDULE:
      sess.run(train_op, {poisoned_replica: replica})
      for key, value in zip(history, sess.run(
          (opt.get_loss_scale(), global_step, w))):
        history[key].append(value)
  return history


def wrap(order: str, inner, manager):
  compressed = lambda opt: hvd.DistributedOptimizer(
      opt, compression=hvd.Compression.fp16)
  if order == "ours_outside":
    return mp_optimizer.LossScaleOptimizer(compressed(inner), manager)
  return compressed(mp_optimizer.LossScaleOptimizer(inner, manager))


def run_tiny(order: str) -> dict:
  w = v1.get_variable("w", initializer=np.zeros(3, np.float32))
  loss = tf.reduce_sum(w * TINY_GRADIENTS)
  opt = wrap(order, v1.train.GradientDescentOptimizer(1.0),
             managers.FixedLossScaleManager(2**15))
  train_op = opt.minimize(loss)
  with v1.Session() as sess:
    sess.run(v1.global_variables_initializer())
    sess.run(train_op)
    return {"w": sess.run(w)}


def run_huge_scale() -> dict:
  w = v1.get_variable("w", initializer=np.zeros(3, np.float32))
  global_step = v1.train.get_or_create_global_step()
  loss = tf.reduce_sum(w * tf.constant([1.0, 2.0, 3.0]))
  opt = wrap("ours_outside", v1.train.GradientDescentOptimizer(1.0),
             managers.DynamicLossScale(2**30, 1000))
  train_op = opt.minimize(loss, global_step=global_step)
  history = {"scales": [], "steps": []}
  with v1.Session() as sess:
    sess.run(v1.global_variables_initializer())
    for _ in range(2):
      sess.run(train_op)
      for key, value in zip(history, sess.run((opt.get_loss_scale(),
                                               global_step))):
        history[key].append(value)
  return history


def main(out_dir: str) -> None:
  hvd.init()
  cases = {"schedule": run_schedule,
           "tiny_ours_outside": lambda: run_tiny("ours_outside"),
           "tiny_hvd_outside": lambda: run_tiny("hvd_outside"),
           "huge_scale": run_huge_scale}
  for name, run in cases.items():
    with tf.Graph().as_default():
      result = run()
    np.savez(os.path.join(out_dir, f"{hvd.rank()}_{name}.npz"), **result)


if __name__ == "__main__":
  main(*sys.argv[1:])
