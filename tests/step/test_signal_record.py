"""Each train op's signals, found by its optimizer's name, and the promised
graph collections (docs: Skip signals).

G builds a train op, D one, then G a second: readers asked for G must see
G's newest train op, whatever was built in between.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from tests.support import models

v1 = tf.compat.v1
SIGNALS = mp_optimizer.signals


def _interleaved():
  """G's first train op (clean), D's (always Inf), G's second (fed).

  Returns:
    The three train ops in build order, the fed poison of G's second and
    the optimizers G and D.
  """
  g_opt = mp_optimizer.LossScaleOptimizer(
      v1.train.GradientDescentOptimizer(0.1, name="G"),
      managers.FixedLossScaleManager(8))
  d_opt = mp_optimizer.LossScaleOptimizer(
      v1.train.GradientDescentOptimizer(0.1, name="D"),
      managers.ExponentialUpdateLossScaleManager(2**10, 1000))
  poison = v1.placeholder_with_default(1.0, [])
  train_ops = [
      g_opt.minimize(models.dense_loss(tf.constant(1.0), scope="g1")),
      d_opt.minimize(models.dense_loss(tf.constant(np.inf), scope="d")),
      g_opt.minimize(models.dense_loss(poison, scope="g2"))]
  return train_ops, poison, g_opt, d_opt


class SignalRecordTest(parameterized.TestCase):

  @parameterized.named_parameters(("clean", 1.0, True),
                                  ("overflow", np.inf, False))
  def test_readers_find_an_optimizers_newest_train_op_by_name_or_object(
      self, fed, applied):
    with tf.Graph().as_default() as graph:
      train_ops, poison, g_opt, d_opt = _interleaved()
      self.assertEqual(SIGNALS.optimizer_names(), ["G", "D"])
      verdicts = {"G": mp_optimizer.step_applied(optimizer="G"),
                  "G object": mp_optimizer.step_applied(optimizer=g_opt),
                  "D": mp_optimizer.step_applied(optimizer=d_opt),
                  "newest": mp_optimizer.step_applied()}
      counts = {"G": mp_optimizer.skipped_steps(optimizer=g_opt),
                "D": mp_optimizer.skipped_steps(optimizer="D"),
                "total": mp_optimizer.skipped_steps()}
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        _, seen = sess.run([train_ops, verdicts], {poison: fed})
        self.assertEqual(seen, {"G": applied, "G object": applied,
                                "D": False, "newest": applied})
        self.assertEqual(sess.run(counts), {"G": 0 if applied else 1, "D": 1,
                                            "total": 1 if applied else 2})

  def test_readers_give_the_scale_each_optimizer_used(self):
    with tf.Graph().as_default() as graph:
      _interleaved()
      scales = {"G": SIGNALS.loss_scale(optimizer="G"),
                "D": SIGNALS.loss_scale(optimizer="D"),
                "newest": SIGNALS.loss_scale()}
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        self.assertEqual(sess.run(scales),
                         {"G": 8.0, "D": 2.0**10, "newest": 8.0})

  def test_the_promised_collections_hold_every_train_ops_signals(self):
    with tf.Graph().as_default() as graph:
      train_ops, poison, _, _ = _interleaved()
      collected = {key: v1.get_collection(key) for key in
                   (SIGNALS.STEP_APPLIED, SIGNALS.SKIPPED_STEPS,
                    SIGNALS.LOSS_SCALE)}
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(train_ops, {poison: np.inf})
        verdicts = sess.run(collected[SIGNALS.STEP_APPLIED], {poison: np.inf})
        self.assertEqual(verdicts, [True, False, False])
        self.assertLen(collected[SIGNALS.SKIPPED_STEPS], 3)
        self.assertEqual(sess.run(collected[SIGNALS.LOSS_SCALE]),
                         [8.0, 2.0**10, 8.0])

  def test_an_imported_meta_graph_keeps_the_collections_and_says_so(self):
    with tf.Graph().as_default():
      _interleaved()
      exported = v1.train.export_meta_graph()
    with tf.Graph().as_default() as graph:
      v1.train.import_meta_graph(exported)
      applied = v1.get_collection(SIGNALS.STEP_APPLIED)
      self.assertLen(applied, 3)
      self.assertLen(v1.get_collection(SIGNALS.SKIPPED_STEPS), 3)
      self.assertLen(v1.get_collection(SIGNALS.LOSS_SCALE), 3)
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(v1.get_collection(v1.GraphKeys.TRAIN_OP))
        self.assertEqual(sess.run(applied), [True, False, True])
      for reader in (mp_optimizer.step_applied, mp_optimizer.skipped_steps,
                     SIGNALS.loss_scale, SIGNALS.optimizer_names,
                     mp_optimizer.add_summaries):
        with self.assertRaisesRegex(
            ValueError, "imported from a meta-graph.*STEP_APPLIED"):
          reader()
