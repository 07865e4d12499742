"""Loss scaling under MirroredStrategy: an overflow on one replica.

A TF1-style program (eager execution disabled) trains a float16 softmax
classifier on scikit-learn's digits with two replicas on two CPU devices
(with GPUs, list them instead). Each step feeds a global batch; each replica
takes its half. At a few steps one replica's loss is made Inf, as a bad batch
or a too-large scale would on one device only. The optimizer checks every
replica's gradients in cross-replica context: every replica skips that step,
the scale backs off once, and the replicas' weights stay identical.

Run: `python examples/mirrored_example.py` (any supported TF), with the
`examples` extra installed (`pip install ".[examples]"`) for scikit-learn.
"""

import numpy as np
from sklearn import datasets
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer

v1 = tf.compat.v1
DEVICES = ["/cpu:0", "/cpu:1"]
STEPS = 60
BATCH = 64
OVERFLOW_AT = {10: 1, 20: 0, 30: 1}  # step -> the replica that overflows


def main() -> None:
  v1.disable_eager_execution()
  digits = datasets.load_digits()
  images = (digits.data / 16.0).astype(np.float32)
  labels = digits.target.astype(np.int32)

  strategy = tf.distribute.MirroredStrategy(DEVICES)
  images_in = v1.placeholder(tf.float32, [BATCH, 64])
  labels_in = v1.placeholder(tf.int32, [BATCH])
  overflow_replica = v1.placeholder_with_default(-1, [])
  with strategy.scope():
    w = v1.get_variable("w", [64, 10], initializer=v1.zeros_initializer())
    global_step = v1.train.get_or_create_global_step()
    manager = managers.DynamicLossScale(initial_loss_scale=2**15,
                                        increment_period=20)
    opt = mp_optimizer.LossScaleOptimizer(
        v1.train.MomentumOptimizer(0.05, 0.9), manager)

    def replica_step():
      replica = tf.distribute.get_replica_context().replica_id_in_sync_group
      half = BATCH // len(DEVICES)
      x = images_in[replica * half:(replica + 1) * half]
      y = labels_in[replica * half:(replica + 1) * half]
      logits16 = tf.matmul(tf.cast(x, tf.float16), tf.cast(w, tf.float16))
      logits = tf.cast(logits16, tf.float32)
      loss = v1.losses.sparse_softmax_cross_entropy(y, logits)
      poison = tf.where(tf.equal(replica, overflow_replica), np.inf, 1.0)
      return opt.minimize(loss * poison, global_step=global_step)

    train_op = strategy.group(strategy.run(replica_step))
  scale = opt.get_loss_scale()
  replica_weights = list(strategy.experimental_local_results(w))

  rng = np.random.RandomState(0)
  config = v1.ConfigProto(device_count={"CPU": len(DEVICES)})
  with v1.Session(config=config) as sess:
    sess.run(v1.global_variables_initializer())
    for step in range(1, STEPS + 1):
      rows = rng.choice(len(labels), BATCH, replace=False)
      feed = {images_in: images[rows], labels_in: labels[rows],
              overflow_replica: OVERFLOW_AT.get(step, -1)}
      scale_before = sess.run(scale)
      sess.run(train_op, feed)
      if step in OVERFLOW_AT or step % 20 == 0:
        w0, w1 = sess.run(replica_weights)
        event = (f"replica {OVERFLOW_AT[step]} overflows" if step in OVERFLOW_AT
                 else "clean")
        print(f"run {step:2d} ({event}): loss scale {scale_before:,.0f} -> "
              f"{sess.run(scale):,.0f}, global_step {sess.run(global_step)}, "
              f"replicas identical: {np.array_equal(w0, w1)}")
    applied = sess.run(global_step)
    print(f"{STEPS} runs: {applied} applied, {STEPS - applied} skipped")


if __name__ == "__main__":
  v1.logging.set_verbosity(v1.logging.ERROR)
  main()
