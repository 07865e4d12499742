"""The replicated-training scenario shared by the distribution tests.

Replica r trains a float16 linear regression on its own data; at the steps
of SCHEDULE one named replica's loss is multiplied by a poison (NaN or Inf).
Used in one process (MirroredStrategy) and across worker processes
(MultiWorkerMirroredStrategy), so both check the same table.
"""

from typing import Tuple

import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer

NO_REPLICA = -1
REPLICAS = 2
# Which replica is poisoned at each step (NO_REPLICA: a clean step).
SCHEDULE = (NO_REPLICA, 0, NO_REPLICA, 1, NO_REPLICA, NO_REPLICA, NO_REPLICA)
APPLIED = tuple(r == NO_REPLICA for r in SCHEDULE)
MANAGERS = {
    "contrib": lambda: managers.ExponentialUpdateLossScaleManager(
        8, 2, decr_every_n_nan_or_inf=1, decr_ratio=0.5),
    "tf2": lambda: managers.DynamicLossScale(8, 2),
    "fixed": lambda: managers.FixedLossScaleManager(8),
}
# The scale after each step of SCHEDULE, worked by hand: an overflow halves
# it, the second clean step in a row doubles it; the fixed scale never moves.
EXPECTED_SCALES = {
    "contrib": [8, 4, 4, 2, 2, 4, 4],
    "tf2": [8, 4, 4, 2, 2, 4, 4],
    "fixed": [8] * 7,
}
LEARNING_RATE, MOMENTUM = 0.05, 0.9
INITIAL_W = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)


def replica_data(replica_id: int) -> Tuple[np.ndarray, np.ndarray]:
  """The (x, y) batch of one replica: different for every replica."""
  rng = np.random.RandomState(100 + replica_id)
  return (rng.randn(3, 4).astype(np.float32),
          rng.randn(3, 2).astype(np.float32))


def all_replica_data() -> Tuple[np.ndarray, np.ndarray]:
  """Every replica's (x, y), stacked on a new first axis of size REPLICAS."""
  xs, ys = zip(*(replica_data(r) for r in range(REPLICAS)))
  return np.stack(xs), np.stack(ys)


def loss(w: tf.Tensor, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
  """Mean squared error of x @ w computed in float16; a float32 scalar."""
  pred = tf.matmul(tf.cast(x, tf.float16), tf.cast(w, tf.float16))
  return tf.reduce_mean(tf.square(tf.cast(pred, tf.float32) - y))


def make_optimizer(manager_name: str) -> tf.compat.v1.train.Optimizer:
  return mp_optimizer.LossScaleOptimizer(
      tf.compat.v1.train.MomentumOptimizer(LEARNING_RATE, MOMENTUM),
      MANAGERS[manager_name]())


def reference_weights(average: bool = False) -> list:
  """w after 0, 1, 2, ... clean steps of the inner optimizer on one device.

  Outside an Estimator, a v1 optimizer under a strategy sums the replicas'
  gradients (`tf.distribute` leaves dividing the loss to the user); Horovod
  averages them (`average=True`). Here the same sum or mean comes from the
  replicas' losses, with TF's own optimizer and no loss scaling.
  """
  v1 = tf.compat.v1
  with tf.Graph().as_default() as graph:
    w = v1.get_variable("w", initializer=INITIAL_W)
    xs, ys = all_replica_data()
    total = tf.add_n([loss(w, xs[r], ys[r]) for r in range(REPLICAS)])
    train_op = v1.train.MomentumOptimizer(LEARNING_RATE, MOMENTUM).minimize(
        total / REPLICAS if average else total)
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      weights = [sess.run(w)]
      for _ in range(sum(APPLIED)):
        sess.run(train_op)
        weights.append(sess.run(w))
  return weights
