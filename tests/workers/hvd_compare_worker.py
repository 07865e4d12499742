"""One rank of a Horovod-style training script, on Horovod or on the drop-in.

    horovodrun -np 2 --gloo python hvd_compare_worker.py horovod OUT_DIR
    mpirun -np 2 python hvd_compare_worker.py mp_optimizer OUT_DIR

The script NVIDIA's examples follow: a float16 model, contrib's dynamic
manager, `LossScaleOptimizer(hvd.DistributedOptimizer(opt))`, the broadcast
hook and `MonitoredTrainingSession`. Each rank starts from its own weights
(the hook must replace them with rank 0's) and trains on its own data; rank
1's loss is Inf at POISONED_STEP. Writes OUT_DIR/<rank>.npz: the loss, the
scale and global_step of every step, and the final weights.
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


def main(implementation: str, out_dir: str) -> None:
  hvd = importlib.import_module(MODULES[implementation])
  v1.disable_eager_execution()
  hvd.init()
  step_input = v1.placeholder(tf.int32, [])
  w = v1.get_variable("w", initializer=replicated.INITIAL_W * (hvd.rank() + 1))
  global_step = v1.train.get_or_create_global_step()
  x, y = replicated.replica_data(hvd.rank())
  loss = replicated.loss(w, x, y)
  poison = tf.where(tf.logical_and(tf.equal(step_input, POISONED_STEP),
                                   tf.equal(hvd.rank(), 1)), np.inf, 1.0)
  opt = mixed_precision.LossScaleOptimizer(
      hvd.DistributedOptimizer(v1.train.MomentumOptimizer(0.05, 0.9)),
      mixed_precision.ExponentialUpdateLossScaleManager(
          2**12, 3, decr_every_n_nan_or_inf=1))
  train_op = opt.minimize(loss * poison, global_step=global_step)
  history = {"losses": [], "scales": [], "steps": []}
  with v1.train.MonitoredTrainingSession(
      hooks=[hvd.BroadcastGlobalVariablesHook(0)]) as sess:
    for step in range(STEPS):
      value, _ = sess.run((loss, train_op), {step_input: step})
      scale, count = sess.run((opt.get_loss_scale(), global_step))
      for key, item in zip(history, (value, scale, count)):
        history[key].append(item)
    final = sess.run(w)
  np.savez(os.path.join(out_dir, f"{hvd.rank()}.npz"), w=final,
           **{k: np.array(v) for k, v in history.items()})


if __name__ == "__main__":
  main(*sys.argv[1:])
