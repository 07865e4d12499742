"""One rank of a Horovod-style training script, on Horovod or on the drop-in.

    horovodrun -np 2 --gloo python hvd_compare_worker.py horovod OUT_DIR
    mpirun -np 2 python hvd_compare_worker.py mp_optimizer OUT_DIR

The script NVIDIA's examples follow: a float16 model, contrib's dynamic
manager, `LossScaleOptimizer(hvd.DistributedOptimizer(opt))`, the broadcast
hook and `MonitoredTrainingSession`. Each rank starts from its own weights
(the hook must replace them with rank 0's) and trains on its own data; rank
1's loss is Inf at POISONED_STEP. Writes OUT_DIR/<rank>.npz: the loss, the
scale and global_step of every step, and the final weights.

The model's matmul takes float16 operands and sums their products in
float32, rounding once to float16, as TensorFlow's float16 matmul on a
GPU does by default (`float16_matmul`).
A float16 `tf.matmul` on CPU does not: TensorFlow 2.15's gives what
summing in float16 gives, rounding after every product, while 2.21's rounds
the sum once, so the same script gives different losses on the two
versions before any rank talks to another. Each product of two float16
values is exact in float32 (11-bit significands multiply into 22 bits);
the float32 matmul that sums them gives the same bits on both versions
(docs/horovod.md, "Against Horovod itself").
"""

import importlib
import os
import sys

import numpy as np
import tensorflow as tf

from mp_optimizer import contrib as mixed_precision
from tests.workers import replicated

v1 = tf.compat.v1
STEPS = 12
POISONED_STEP = 4
MODULES = {"horovod": "horovod.tensorflow",
           "mp_optimizer": "mp_optimizer.horovod"}


def float16_matmul(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
  """`a @ b` of float16 matrices, summed in float32 and rounded once."""
  product = tf.matmul(tf.cast(a, tf.float32), tf.cast(b, tf.float32))
  return tf.cast(product, tf.float16)


def loss(w: tf.Tensor, x: np.ndarray, y: np.ndarray) -> tf.Tensor:
  """Mean squared error of a float16 matmul summed in float32 (module doc)."""
  pred = float16_matmul(tf.cast(x, tf.float16), tf.cast(w, tf.float16))
  return tf.reduce_mean(tf.square(tf.cast(pred, tf.float32) - y))


def main(implementation: str, out_dir: str) -> None:
  hvd = importlib.import_module(MODULES[implementation])
  v1.disable_eager_execution()
  hvd.init()
  step_input = v1.placeholder(tf.int32, [])
  w = v1.get_variable("w", initializer=replicated.INITIAL_W * (hvd.rank() + 1))
  global_step = v1.train.get_or_create_global_step()
  x, y = replicated.replica_data(hvd.rank())
  model_loss = loss(w, x, y)
  poison = tf.where(tf.logical_and(tf.equal(step_input, POISONED_STEP),
                                   tf.equal(hvd.rank(), 1)), np.inf, 1.0)
  opt = mixed_precision.LossScaleOptimizer(
      hvd.DistributedOptimizer(v1.train.MomentumOptimizer(0.05, 0.9)),
      mixed_precision.ExponentialUpdateLossScaleManager(
          2**12, 3, decr_every_n_nan_or_inf=1))
  train_op = opt.minimize(model_loss * poison, global_step=global_step)
  history = {"losses": [], "scales": [], "steps": []}
  with v1.train.MonitoredTrainingSession(
      hooks=[hvd.BroadcastGlobalVariablesHook(0)]) as sess:
    for step in range(STEPS):
      value, _ = sess.run((model_loss, train_op), {step_input: step})
      scale, count = sess.run((opt.get_loss_scale(), global_step))
      for key, item in zip(history, (value, scale, count)):
        history[key].append(item)
    final = sess.run(w)
  np.savez(os.path.join(out_dir, f"{hvd.rank()}.npz"), w=final,
           **{k: np.array(v) for k, v in history.items()})


if __name__ == "__main__":
  main(*sys.argv[1:])
