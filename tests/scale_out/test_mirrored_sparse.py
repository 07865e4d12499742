"""Sparse gradients on two replicas, with every option of the optimizer.

An embedding table (its gradient an `IndexedSlices`) feeds a float16 dense
layer; each replica reads different rows. Every option set trains on two
replicas (tests/support/mirrored.py's devices) and, as the reference, on one device
on the sum of both replicas' losses (a v1 optimizer under a strategy sums
the replicas' gradients); the variables must agree on every replica.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import mirrored

v1 = tf.compat.v1
ROWS = [[0, 2, 2], [1, 2, 5]]  # Rows each replica reads; row 2 by both.
TABLE = np.arange(12, dtype=np.float32).reshape(6, 2) / 10
OPTIONS = {
    "no_option": {},
    "clipnorm": {"clipnorm": 0.5},
    "global_clipnorm": {"global_clipnorm": 0.5},
    "clipvalue": {"clipvalue": 0.1},
    "accumulation": {"gradient_accumulation_steps": 2},
    "accumulation_and_global_clipnorm": {"gradient_accumulation_steps": 2,
                                         "global_clipnorm": 0.5},
    "overflow_report": {"overflow_report": True},
    "precision_telemetry": {"precision_telemetry": True},
    "accumulation_and_precision_telemetry": {"gradient_accumulation_steps": 2,
                                             "precision_telemetry": True},
}


def _loss(table, dense, rows):
  read = tf.cast(tf.gather(table, rows), tf.float16)
  out = tf.matmul(read, tf.cast(dense, tf.float16))
  return tf.reduce_sum(tf.cast(out, tf.float32)**2)


def _train(options, replicas):
  """Each replica's (table, dense) after 4 steps (one copy on one device)."""
  with tf.Graph().as_default() as graph:
    strategy = (tf.distribute.MirroredStrategy(mirrored.DEVICES)
                if replicas else tf.distribute.get_strategy())
    with strategy.scope():
      table = v1.get_variable("table", initializer=TABLE)
      dense = v1.get_variable("dense", initializer=np.ones([2, 3], np.float32))
      optimizer = mp_optimizer.LossScaleOptimizer(
          v1.train.AdamOptimizer(0.01),
          managers.ExponentialUpdateLossScaleManager(8, 2), **options)
      if replicas:

        def step():
          replica = tf.distribute.get_replica_context().replica_id_in_sync_group
          return optimizer.minimize(
              _loss(table, dense, tf.gather(tf.constant(ROWS), replica)))

        train_op = strategy.group(strategy.run(step))
      else:
        train_op = optimizer.minimize(
            _loss(table, dense, ROWS[0]) + _loss(table, dense, ROWS[1]))
    with v1.Session(graph=graph, config=mirrored.SESSION_CONFIG) as sess:
      sess.run(v1.global_variables_initializer())
      for _ in range(4):
        sess.run(train_op)
      return [sess.run(strategy.experimental_local_results(v))
              for v in (table, dense)]


class MirroredSparseTest(parameterized.TestCase):

  @parameterized.named_parameters(*OPTIONS.items())
  def test_replicas_match_the_single_device_run(self, options):
    (table,), (dense,) = _train(options, replicas=False)
    self.assertFalse(np.allclose(table, TABLE))  # The table did train.
    tables, denses = _train(options, replicas=True)
    for got_table, got_dense in zip(tables, denses):
      np.testing.assert_allclose(got_table, table, rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(got_dense, dense, rtol=1e-5, atol=1e-6)

  def test_accumulation_applies_the_values_worked_by_hand(self):
    # SGD (rate 0.5) on the sum of squares of the rows read, no dense layer:
    # a window of two micro-steps applies the summed gradient 2 * w * (times
    # read), so after two windows a row read k times in all is
    # w * (1 - k)**2: rows 0 and 1 become 0, row 2 (k = 3) 4 * w, rows 3
    # and 4 (never read) stay.
    with tf.Graph().as_default() as graph:
      strategy = tf.distribute.MirroredStrategy(mirrored.DEVICES)
      with strategy.scope():
        table = v1.get_variable("table", initializer=TABLE)
        optimizer = mp_optimizer.LossScaleOptimizer(
            v1.train.GradientDescentOptimizer(0.5),
            managers.FixedLossScaleManager(8), gradient_accumulation_steps=2)

        def step():
          replica = tf.distribute.get_replica_context().replica_id_in_sync_group
          read = tf.gather(table, tf.gather(tf.constant(ROWS), replica))
          return optimizer.minimize(tf.reduce_sum(read**2))

        train_op = strategy.group(strategy.run(step))
      with v1.Session(graph=graph, config=mirrored.SESSION_CONFIG) as sess:
        sess.run(v1.global_variables_initializer())
        for _ in range(4):
          sess.run(train_op)
        replicas = sess.run(strategy.experimental_local_results(table))
    reads = np.bincount(sum(ROWS, []), minlength=6)[:, None]
    for value in replicas:
      np.testing.assert_allclose(value, TABLE * (1 - reads)**2, rtol=1e-6)


if __name__ == "__main__":
  parameterized.absltest.main()
