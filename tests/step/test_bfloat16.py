"""The bfloat16 mode: `managers.NoLossScale`, the same in both faces.

No multiply by S and no unscale is built, yet a step with a NaN/Inf gradient
is skipped exactly as under a loss scale: variables, slots and `global_step`
stay bit-identical, and the signals, the telemetry ("non-finite, unscaled"),
the overflow report and the origin report all say so.
"""

import os
import warnings

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from mp_optimizer.overflow import OverflowReport
from tests.support import harness

v1 = tf.compat.v1
BF16, F32 = tf.bfloat16, tf.float32
FACES = (("contrib", mp_optimizer.LossScaleOptimizer),
         ("tf2", mp_optimizer.MixedPrecisionLossScaleOptimizer))


def _model(poison):
  """A two-layer bfloat16 net (float32 master weights); float32 loss."""
  rng = np.random.RandomState(0)
  features = tf.constant(rng.randn(8, 4).astype(np.float32), BF16)
  with mp_optimizer.float32_master_weights():
    hidden = tf.tanh(tf.matmul(features, v1.get_variable(
        "a/kernel", [4, 3], BF16, v1.initializers.glorot_uniform(0))))
    hidden = hidden * tf.cast(poison, BF16)
    out = tf.matmul(hidden, v1.get_variable(
        "b/kernel", [3, 2], BF16, v1.initializers.glorot_uniform(1)))
  return tf.reduce_mean(tf.square(tf.cast(out, F32)))


class _Run:
  """A bfloat16 model under `face(Adam, NoLossScale())`, with every report."""

  def __init__(self, testcase, face, path):
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.poison = v1.placeholder_with_default(np.float32(1), [])
      self.opt = face(v1.train.AdamOptimizer(1e-2), managers.NoLossScale(),
                      precision_telemetry=True,
                      overflow_report=OverflowReport(
                          first_nonfinite_op=True,
                          output_stream="file://" + path))
      self.global_step = v1.train.get_or_create_global_step()
      self.train_op = self.opt.minimize(_model(self.poison),
                                        global_step=self.global_step)
      self.skipped = mp_optimizer.signals.skipped_steps()
      self.applied = mp_optimizer.step_applied()
      self.reason = mp_optimizer.signals.precision()["skip_reason"]
      self.session = v1.Session(graph=self.graph)
      testcase.addCleanup(self.session.close)
      self.session.run(v1.global_variables_initializer())

  def state(self):
    variables = self.graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES)
    assert variables, "the model has variables"
    return harness.snapshot(self.session, variables)


class NoLossScaleTest(parameterized.TestCase):

  @parameterized.named_parameters(*FACES)
  def test_builds_no_scale_multiply_and_no_unscale(self, face):
    graph = tf.Graph()
    with graph.as_default():
      opt = face(v1.train.AdamOptimizer(1e-2), managers.NoLossScale())
      loss = _model(tf.constant(1.0))
      before = {op.name for op in graph.get_operations()}
      with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grads_and_vars = opt.compute_gradients(loss)
      # The bfloat16-only warning is for loss-scaled bfloat16 models.
      self.assertEmpty([w for w in caught if "bfloat16" in str(w.message)])
      made = [op for op in graph.get_operations() if op.name not in before]
      plain = tf.gradients(loss, [v for _, v in grads_and_vars])
      self.assertIs(opt.get_scaled_loss(loss), loss)
      self.assertEqual(opt.get_unscaled_gradients(plain), plain)
      # Gradients that never saw a scale are not refused: there is none.
      opt.apply_gradients(zip(plain, [v for _, v in grads_and_vars]))
    self.assertEmpty([op.name for op in made if "scaled" in op.name or
                      "inverse_loss_scale" in op.name])
    self.assertEqual(len(plain), len(grads_and_vars))
    # The gradients are the inner optimizer's own: same ops as tf.gradients.
    self.assertEqual([g.op.type for g, _ in grads_and_vars],
                     [g.op.type for g in plain])

  @parameterized.named_parameters(*FACES)
  def test_nonfinite_step_skipped_with_every_signal(self, face):
    path = os.path.join(self.create_tempdir().full_path, "report.txt")
    run = _Run(self, face, path)
    run.session.run(run.train_op)
    before = run.state()
    _, applied = run.session.run([run.train_op, run.applied],
                                 {run.poison: np.inf})
    harness.assert_bit_identical(self, before, run.state())
    self.assertFalse(applied)
    self.assertEqual(run.session.run(run.skipped), 1)
    self.assertEqual(run.session.run(run.global_step), 1)
    self.assertEqual(
        mp_optimizer.signals.SKIP_REASONS[run.session.run(run.reason)],
        "non-finite, unscaled")
    with open(path) as report:
      lines = report.read().splitlines()
    self.assertLen(lines, 2)
    self.assertIn("step skipped at loss scale 1:", lines[0])
    self.assertIn("first non-finite op: ", lines[1])
    # The fed Inf is the first non-finite output of the step.
    self.assertIn("first non-finite op: PlaceholderWithDefault ", lines[1])

  @parameterized.named_parameters(*FACES)
  def test_finite_step_applies(self, face):
    path = os.path.join(self.create_tempdir().full_path, "report.txt")
    run = _Run(self, face, path)
    before = run.state()
    _, applied = run.session.run([run.train_op, run.applied])
    after = run.state()
    self.assertTrue(applied)
    kernel = next(name for name in before if name.endswith("a/kernel"))
    self.assertEqual(after[kernel].dtype, np.float32)  # The master weight.
    self.assertFalse(np.array_equal(before[kernel], after[kernel]))
    self.assertEqual(
        mp_optimizer.signals.SKIP_REASONS[run.session.run(run.reason)],
        "applied")
    self.assertFalse(os.path.exists(path) and open(path).read())

  def test_hook_line_counts_the_unscaled_skips(self):
    logged = []
    path = os.path.join(self.create_tempdir().full_path, "report.txt")
    run = _Run(self, mp_optimizer.LossScaleOptimizer, path)
    with run.graph.as_default():
      hook = mp_optimizer.LossScaleHook(every_n_steps=3)
      original = v1.logging.info
      v1.logging.info = lambda fmt, *args: logged.append(fmt % args)
      self.addCleanup(setattr, v1.logging, "info", original)
      with v1.train.MonitoredTrainingSession(hooks=[hook]) as session:
        for value in (1.0, np.inf, 1.0):
          session.run(run.train_op, {run.poison: value})
    line = [entry for entry in logged if "headroom" in entry][-1]
    self.assertIn("skipped for overflow 0, at the floor 0", line)
    self.assertTrue(line.endswith("; non-finite, unscaled 1"), line)
    self.assertEqual(
        list(hook.latest_precision[run.opt.get_name()]["reason_counts"]),
        [2, 0, 0, 0, 1])

  def test_float32_master_weights_of_bfloat16_keep_small_updates(self):
    # 1000 updates of +1e-3 to a weight of 1.0: 2.0 in float32 (by hand),
    # where a bfloat16 weight would stay 1.0 (tests/step/test_compensation).
    with tf.Graph().as_default() as graph:
      with mp_optimizer.float32_master_weights():
        weight = v1.get_variable("w", initializer=tf.constant([1.0], BF16))
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(1e-3), managers.NoLossScale())
      train_op = opt.minimize(-tf.reduce_sum(tf.cast(weight, F32)))
      (master,) = graph.get_collection(v1.GraphKeys.TRAINABLE_VARIABLES)
      with v1.Session(graph=graph) as session:
        session.run(v1.global_variables_initializer())
        for _ in range(1000):
          session.run(train_op)
        self.assertEqual(weight.dtype, BF16)
        self.assertEqual(master.dtype.base_dtype, F32)
        self.assertAlmostEqual(float(session.run(master)[0]), 2.0, places=4)

  def test_scale_is_one_and_nothing_to_checkpoint(self):
    manager = managers.NoLossScale()
    with tf.Graph().as_default() as graph:
      scale = manager.get_loss_scale()
      self.assertEqual(scale.dtype, F32)
      with v1.Session(graph=graph) as session:
        self.assertEqual(session.run(scale), 1.0)
      self.assertEqual(manager.variables(), [])
    self.assertFalse(manager.dynamic)
    self.assertTrue(manager.skips_nonfinite_steps)
    self.assertEqual(repr(manager), "NoLossScale()")
    self.assertIs(managers.get(manager), manager)


if __name__ == "__main__":
  tf.test.main()
