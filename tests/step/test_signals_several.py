"""Signals when one graph holds several loss-scaling optimizers (a GAN).

D overflows on every step, G never does. Every reading says which optimizer
it belongs to, and none of them hides D's skips behind G's clean steps.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from tests.support import models

v1 = tf.compat.v1
STEPS = 6


def _gan(shared_manager: bool = False):
  """G (clean) and D (always Inf); returns both train ops and optimizers."""
  shared = managers.ExponentialUpdateLossScaleManager(2**10, 1000)
  ops, opts = [], []
  for name, poison in (("G", 1.0), ("D", np.inf)):
    manager = shared if shared_manager else (
        managers.ExponentialUpdateLossScaleManager(2**10, 1000))
    opt = mp_optimizer.LossScaleOptimizer(
        v1.train.GradientDescentOptimizer(0.1, name=name), manager)
    loss = models.dense_loss(tf.constant(poison), scope=name)
    ops.append(opt.minimize(loss))
    opts.append(opt)
  return ops, opts


class SeveralOptimizersTest(parameterized.TestCase):

  def test_each_optimizer_counts_its_own_skips_and_the_total_adds_up(self):
    with tf.Graph().as_default() as g:
      train_ops, (g_opt, d_opt) = _gan()
      self.assertEqual(mp_optimizer.signals.optimizer_names(), ["G", "D"])
      counts = {"total": mp_optimizer.skipped_steps(),
                "G": mp_optimizer.skipped_steps(optimizer="G"),
                "D": mp_optimizer.skipped_steps(optimizer=d_opt)}
      applied = {"G": mp_optimizer.step_applied(optimizer=g_opt),
                 "D": mp_optimizer.step_applied(optimizer="D")}
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        for _ in range(STEPS):
          _, verdicts = sess.run([train_ops, applied])
          self.assertEqual(verdicts, {"G": True, "D": False})
        self.assertEqual(sess.run(counts),
                         {"total": STEPS, "G": 0, "D": STEPS})

  def test_repeated_inner_names_are_told_apart(self):
    with tf.Graph().as_default():
      for scope in ("a", "b"):
        mp_optimizer.LossScaleOptimizer(
            v1.train.AdamOptimizer(1e-3),
            managers.FixedLossScaleManager(8)).minimize(
                models.dense_loss(tf.constant(1.0), scope=scope))
      self.assertEqual(mp_optimizer.signals.optimizer_names(),
                       ["Adam", "Adam_1"])

  def test_one_optimizer_minimized_twice_reports_once(self):
    with tf.Graph().as_default():
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.1, name="opt"),
          managers.FixedLossScaleManager(8))
      for scope in ("a", "b"):
        opt.minimize(models.dense_loss(tf.constant(1.0), scope=scope))
      self.assertEqual(mp_optimizer.signals.optimizer_names(), ["opt"])

  def test_unknown_optimizer_is_refused_with_the_names(self):
    with tf.Graph().as_default():
      _gan()
      with self.assertRaisesRegex(ValueError, r"\['G', 'D'\]; got 'X'"):
        mp_optimizer.skipped_steps(optimizer="X")

  def test_summaries_per_optimizer_and_total(self):
    with tf.Graph().as_default() as g:
      train_ops, _ = _gan()
      summary = mp_optimizer.add_summaries()
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        for _ in range(2):
          sess.run(train_ops)
        parsed = tf.compat.v1.Summary.FromString(sess.run(summary))
    values = {v.tag: v.simple_value for v in parsed.value}
    # D's two overflows: 1024 -> 1024 (one tolerated) -> 1024 * 0.8.
    self.assertEqual(values, {
        "mp_optimizer/skipped_steps": 2,
        "mp_optimizer/G/loss_scale": 1024.0,
        "mp_optimizer/G/skipped_steps": 0,
        "mp_optimizer/D/loss_scale": np.float32(1024) * np.float32(0.8),
        "mp_optimizer/D/skipped_steps": 2})

  def test_hook_reports_each_optimizer_by_name(self):
    with tf.Graph().as_default():
      train_ops, _ = _gan(shared_manager=True)
      hook = mp_optimizer.LossScaleHook(every_n_steps=STEPS)
      with self.assertLogs("tensorflow", "INFO") as logs:
        with v1.train.MonitoredTrainingSession(hooks=[hook]) as sess:
          for _ in range(STEPS):
            sess.run(train_ops)
    lines = [r.getMessage() for r in logs.records
             if "skipped" in r.getMessage()]
    self.assertLen(lines, 3)
    self.assertIn("optimizer 'G': ", lines[0])
    self.assertIn(f"0 of the last {STEPS} steps skipped", lines[0])
    self.assertIn("optimizer 'D': ", lines[1])
    self.assertIn(f"{STEPS} of the last {STEPS} steps skipped (100.0%)",
                  lines[1])
    self.assertIn(f"all 2 loss-scaling optimizers: {STEPS} skipped", lines[2])
    self.assertIsNone(hook.latest)
    self.assertEqual(hook.latest_by_optimizer["D"][2], 1.0)
    self.assertEqual(hook.latest_by_optimizer["G"][2], 0.0)


class LossScaleAfterFinalizeTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("exponential", lambda: managers.ExponentialUpdateLossScaleManager(
          64, 10)),
      ("tf2_dynamic", lambda: managers.DynamicLossScale(64, 10)),
      ("fixed", lambda: managers.FixedLossScaleManager(64)))
  def test_hook_reads_the_scale_of_a_finalized_graph(self, make_manager):
    class ScaleHook(v1.train.SessionRunHook):
      """Asks the manager for its scale after the graph is finalized."""

      def __init__(self, manager):
        self.manager = manager
        self.seen = []

      def after_run(self, run_context, run_values):
        scale = self.manager.get_loss_scale()
        self.seen.append(run_context.session.run(scale))

    with tf.Graph().as_default():
      manager = make_manager()
      train_op = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.1), manager).minimize(
              models.dense_loss(tf.constant(1.0)))
      self.assertIs(manager.get_loss_scale(), manager.get_loss_scale())
      hook = ScaleHook(manager)
      with v1.train.MonitoredTrainingSession(hooks=[hook]) as sess:
        for _ in range(2):
          sess.run(train_op)
    self.assertEqual(hook.seen, [64.0, 64.0])


def _telemetry_gan():
  """`_gan`'s two optimizers, G also with precision telemetry."""
  ops, opts = [], []
  for name, poison, telemetry in (("G", 1.0, True), ("D", np.inf, False)):
    opt = mp_optimizer.LossScaleOptimizer(
        v1.train.GradientDescentOptimizer(0.1, name=name),
        managers.ExponentialUpdateLossScaleManager(2**10, 1000),
        precision_telemetry=telemetry)
    ops.append(opt.minimize(models.dense_loss(tf.constant(poison),
                                              scope=name)))
    opts.append(opt)
  return ops, opts


class FirstUse(v1.train.SessionRunHook):
  """Asks for a signal the first time in `before_run` (the graph is final);
  after each step, reads it in a run of its own."""

  def __init__(self, signal):
    self.signal = signal
    self.made, self.read = [], []

  def before_run(self, run_context):
    self.made.append(self.signal())
    return None

  def after_run(self, run_context, run_values):
    made = self.made[-1]  # optimizer_names() gives strings, not a tensor.
    self.read.append(made if isinstance(made, list) else
                     run_context.session.run(made))


def _summary_tags(serialized) -> dict:
  return {value.tag: value.simple_value
          for value in v1.Summary.FromString(serialized).value}


class SignalsAfterFinalizeTest(parameterized.TestCase):
  """Every signal, first asked for in a hook of MonitoredTrainingSession."""

  @parameterized.named_parameters(
      ("optimizer_names", mp_optimizer.signals.optimizer_names, ["G", "D"]),
      ("step_applied_newest", mp_optimizer.step_applied, False),
      ("step_applied_of_g",
       lambda: mp_optimizer.step_applied(optimizer="G"), True),
      ("skipped_steps_total", mp_optimizer.skipped_steps, STEPS),
      ("skipped_steps_of_d",
       lambda: mp_optimizer.skipped_steps(optimizer="D"), STEPS),
      ("loss_scale_of_g",
       lambda: mp_optimizer.signals.loss_scale(optimizer="G"), 1024.0),
      ("precision_of_g",
       lambda: mp_optimizer.signals.precision(optimizer="G")["skip_reason"],
       0),
      ("summaries", lambda: mp_optimizer.add_summaries(), {
          "mp_optimizer/skipped_steps": STEPS,
          "mp_optimizer/G/loss_scale": 1024.0,
          "mp_optimizer/G/skipped_steps": 0,
          "mp_optimizer/D/loss_scale": 1024 * np.float32(0.8)**(STEPS // 2),
          "mp_optimizer/D/skipped_steps": STEPS}))
  def test_signal_first_asked_for_after_the_graph_is_finalized(
      self, signal, expected):
    with tf.Graph().as_default() as graph:
      train_ops, _ = _telemetry_gan()
      hook = FirstUse(signal)
      with v1.train.MonitoredTrainingSession(hooks=[hook]) as sess:
        self.assertTrue(graph.finalized)
        for _ in range(STEPS):
          sess.run(train_ops)
    self.assertLen(hook.read, STEPS)
    # One tensor per graph: every call returned the same one.
    self.assertTrue(all(made is hook.made[0] or isinstance(made, list) and
                        made == hook.made[0] for made in hook.made))
    last = hook.read[-1]
    if isinstance(expected, dict):
      last = _summary_tags(last)
      for tag, value in expected.items():
        self.assertAlmostEqual(last.pop(tag), value, places=3, msg=tag)
      self.assertTrue(all(tag.startswith("mp_optimizer/G/")
                          for tag in last), last)  # G's telemetry.
    elif isinstance(expected, list):
      self.assertEqual(list(last), expected)
    else:
      self.assertEqual(last, expected)


if __name__ == "__main__":
  tf.test.main()
