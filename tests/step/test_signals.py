"""Skip signals: step_applied, skipped_steps, summaries, LossScaleHook."""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import models

v1 = tf.compat.v1
POISONED = (2, 3, 7)  # Steps (0-based) fed an Inf loss.


def _build(manager=None):
  poison = models.poison_input()
  loss = models.dense_loss(poison)
  opt = mp_optimizer.LossScaleOptimizer(
      models.OPTIMIZERS["adam"](),
      manager or managers.ExponentialUpdateLossScaleManager(2**10, 3))
  train_op = opt.minimize(loss, global_step=v1.train.get_or_create_global_step())
  return poison, train_op


class SignalsTest(parameterized.TestCase):

  def test_step_applied_and_skip_count_fetched_with_the_train_op(self):
    with tf.Graph().as_default() as g:
      poison, train_op = _build()
      applied, skipped = mp_optimizer.step_applied(), mp_optimizer.skipped_steps()
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        flags = []
        for step in range(10):
          feed = {poison: np.inf} if step in POISONED else {}
          flags.append(sess.run([train_op, applied], feed)[1])
        self.assertEqual([i for i, f in enumerate(flags) if not f],
                         list(POISONED))
        self.assertEqual(sess.run(skipped), len(POISONED))
        self.assertEqual(sess.run(v1.train.get_global_step()),
                         10 - len(POISONED))

  @parameterized.named_parameters(
      ("global_init_only", "global"), ("restore_only", "restore"),
      ("local_init_too", "local"))
  def test_counter_needs_no_local_initialization(self, start):
    # The skip count is LOCAL (not checkpointed); programs that never run
    # local_variables_initializer() must still train and count.
    with tf.Graph().as_default() as g:
      poison, train_op = _build()
      saver = v1.train.Saver()
      path = self.create_tempdir().full_path + "/ckpt"
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        saver.save(sess, path)
      with v1.Session(graph=g) as sess:
        if start == "restore":
          saver.restore(sess, path)
        else:
          sess.run(v1.global_variables_initializer())
        if start == "local":
          sess.run(v1.local_variables_initializer())
        self.assertEqual(sess.run(mp_optimizer.skipped_steps()), 0)
        sess.run(train_op)
        sess.run(train_op, {poison: np.nan})
        sess.run(train_op, {poison: np.inf})
        self.assertEqual(sess.run(mp_optimizer.skipped_steps()), 2)

  def test_new_state_stays_out_of_checkpoints(self):
    with tf.Graph().as_default():
      _build(managers.ExponentialUpdateLossScaleManager(
          8, 2, fail_at_floor_after=3))
      graph = v1.get_default_graph()
      collected = {v.op.name for key in graph.get_all_collection_keys()
                   for v in graph.get_collection(key)
                   if isinstance(v, tf.Variable)}
      handles = {op.name for op in graph.get_operations()
                 if op.type == "VarHandleOp"}
    # In no collection: not saved, and no initializer resets them.
    self.assertContainsSubset({"skipped_steps", "nonfinite_steps_at_min_scale"},
                              handles - collected)

  def test_fixed_scale_that_applies_every_step(self):
    with tf.Graph().as_default() as g:
      poison, train_op = _build(managers.FixedLossScaleManager(
          8, skip_nonfinite_steps=False))
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        _, applied = sess.run([train_op, mp_optimizer.step_applied()],
                              {poison: np.inf})
        self.assertTrue(applied)
        self.assertEqual(sess.run(mp_optimizer.skipped_steps()), 0)

  def test_signals_before_a_train_op_say_what_to_do(self):
    with tf.Graph().as_default():
      with self.assertRaisesRegex(ValueError, "build the train op"):
        mp_optimizer.step_applied()

  def test_summaries_report_scale_and_skips(self):
    with tf.Graph().as_default() as g:
      poison, train_op = _build()
      summary = mp_optimizer.add_summaries()
      self.assertLen(g.get_collection(v1.GraphKeys.SUMMARIES), 2)
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(train_op, {poison: np.inf})
        sess.run(train_op, {poison: np.inf})  # Second overflow: 1024 * 0.8.
        parsed = tf.compat.v1.Summary.FromString(sess.run(summary))
        values = {v.tag: v.simple_value for v in parsed.value}
    self.assertEqual(values, {"mp_optimizer/loss_scale": np.float32(819.2),
                              "mp_optimizer/skipped_steps": 2})


class LossScaleHookTest(parameterized.TestCase):

  def test_hook_adds_no_fetch_to_any_step(self):
    # Its reads run in a separate small run after a reporting step; the
    # training steps' own runs carry nothing of it.
    with tf.Graph().as_default():
      _, train_op = _build()
      hook = mp_optimizer.LossScaleHook(every_n_steps=2)
      added = []

      class Recorder(v1.train.SessionRunHook):

        def before_run(self, run_context):
          added.append(hook.before_run(run_context))

      with v1.train.MonitoredTrainingSession(hooks=[hook, Recorder()]) as sess:
        for _ in range(5):
          sess.run(train_op)
    self.assertEqual(added, [None] * 5)

  def test_hook_logs_scale_and_skip_rate_in_a_monitored_session(self):
    with tf.Graph().as_default():
      poison, train_op = _build()
      hook = mp_optimizer.LossScaleHook(every_n_steps=5)
      with self.assertLogs("tensorflow", "INFO") as logs:
        with v1.train.MonitoredTrainingSession(hooks=[hook]) as sess:
          for step in range(11):
            sess.run(train_op, {poison: np.inf} if step in POISONED else {})
    lines = [r.getMessage() for r in logs.records if "loss scale" in r.getMessage()]
    self.assertLen(lines, 2)  # Reports at steps 5 and 10 (each over 5 steps).
    self.assertIn("2 of the last 5 steps skipped (40.0%)", lines[0])
    self.assertIn("1 of the last 5 steps skipped (20.0%)", lines[1])
    # Steps 2 and 3 shrank the scale to 1024 * 0.8; steps 4-6 grew it x2.
    self.assertEqual(hook.latest,
                     (10, float(np.float32(1024) * np.float32(0.8) * 2), 0.2))
