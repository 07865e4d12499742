"""float32 master weights on two replicas (tests/support/mirrored.py's devices).

Built inside the replica function, as a model_fn builds them, the float16
casts are made on each replica and the float32 copies train as on one
device. Built directly under `strategy.scope()`, the casts are made once,
outside, and reach one replica's copies only: `minimize` then says where to
build them.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import mirrored

v1 = tf.compat.v1
ROWS = [[0, 2, 2], [1, 2, 5]]  # Rows of the table each replica reads.
TABLE = np.arange(12, dtype=np.float16).reshape(6, 2) / 10


def _parameters():
  """A float16 table and dense kernel, stored as float32 master weights."""
  with v1.variable_scope("model", reuse=v1.AUTO_REUSE), \
      mp_optimizer.float32_master_weights():
    return (v1.get_variable("table", initializer=TABLE, dtype=tf.float16),
            v1.get_variable("dense", initializer=np.ones([2, 3], np.float16),
                            dtype=tf.float16))


def _loss(parameters, rows):
  table, dense = parameters
  out = tf.matmul(tf.gather(table, rows), dense)
  return tf.reduce_sum(tf.cast(out, tf.float32)**2)


def _optimizer():
  return mp_optimizer.LossScaleOptimizer(
      v1.train.AdamOptimizer(0.01),
      managers.ExponentialUpdateLossScaleManager(8, 2),
      global_clipnorm=0.5)


def _run(graph, train_op, variables, strategy):
  with v1.Session(graph=graph, config=mirrored.SESSION_CONFIG) as sess:
    sess.run(v1.global_variables_initializer())
    for _ in range(4):
      sess.run(train_op)
    return [sess.run(strategy.experimental_local_results(v))
            for v in variables]


class MirroredMasterWeightsTest(parameterized.TestCase):

  def test_built_in_the_replica_function_they_train_as_on_one_device(self):
    with tf.Graph().as_default() as graph:
      parameters = _parameters()
      train_op = _optimizer().minimize(
          _loss(parameters, ROWS[0]) + _loss(parameters, ROWS[1]))
      masters = v1.trainable_variables()
      (table,), (dense,) = _run(graph, train_op, masters,
                                tf.distribute.get_strategy())
    self.assertFalse(np.allclose(table, TABLE))  # The table did train.
    with tf.Graph().as_default() as graph:
      strategy = tf.distribute.MirroredStrategy(mirrored.DEVICES)
      with strategy.scope():
        optimizer = _optimizer()

        def step():
          replica = tf.distribute.get_replica_context().replica_id_in_sync_group
          return optimizer.minimize(
              _loss(_parameters(), tf.gather(tf.constant(ROWS), replica)))

        train_op = strategy.group(strategy.run(step))
      masters = v1.trainable_variables()
      self.assertEqual([v.dtype for v in masters], [tf.float32] * 2)
      tables, denses = _run(graph, train_op, masters, strategy)
    for got_table, got_dense in zip(tables, denses):
      np.testing.assert_allclose(got_table, table, rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(got_dense, dense, rtol=1e-5, atol=1e-6)

  def test_built_under_the_scope_minimize_says_where_to_build_them(self):
    with tf.Graph().as_default():
      strategy = tf.distribute.MirroredStrategy(mirrored.DEVICES)
      with strategy.scope():
        parameters = _parameters()  # Casts made in cross-replica context.
        optimizer = _optimizer()

        def step():
          replica = tf.distribute.get_replica_context().replica_id_in_sync_group
          return optimizer.minimize(
              _loss(parameters, tf.gather(tf.constant(ROWS), replica)))

        with self.assertRaisesRegex(
            ValueError, r"(?s)^No gradients provided.*float32_master_weights"
            r".*Create the variables inside the function given to "
            r"`strategy.run`"):
          strategy.run(step)

  def test_without_a_strategy_the_message_does_not_speak_of_one(self):
    with tf.Graph().as_default():
      unused = v1.get_variable("unused", initializer=1.0)
      with self.assertRaises(ValueError) as raised:
        _optimizer().minimize(tf.constant(1.0) * 2, var_list=[unused])
    self.assertIn("No variable got a gradient", str(raised.exception))
    self.assertNotIn("tf.distribute", str(raised.exception))


if __name__ == "__main__":
  parameterized.absltest.main()
