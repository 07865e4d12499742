"""overflow_report: on a skipped step, which gradients were NaN or Inf.

Faults are injected after `compute_gradients`: one entry of one variable's
gradient is replaced by NaN or Inf (as a real overflow would leave it), and
the printed line (to a file through `tf.print`'s "file://" stream) must name
exactly that variable and the kind of fault. A clean step prints nothing and
runs none of the report's ops.
"""

import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from mp_optimizer.overflow import OverflowReport
from tests.support import mirrored

v1 = tf.compat.v1
F16, F32 = tf.float16, tf.float32
# Two kernels of one shape (stacked together by the report) and two others.
SHAPES = {"a/kernel": [4, 3], "b/kernel": [3, 3], "b/bias": [3],
          "c/kernel": [3, 3]}
NAMES = sorted(SHAPES)


def _model():
  """A float16 three-layer net on fixed data; returns the float32 loss."""
  rng = np.random.RandomState(0)
  hidden = tf.constant(rng.randn(8, 4).astype(np.float16))
  variables = {name: v1.get_variable(
      name, initializer=(0.3 * rng.randn(*shape)).astype(np.float32))
               for name, shape in SHAPES.items()}
  hidden = tf.tanh(tf.matmul(hidden, tf.cast(variables["a/kernel"], F16)))
  hidden = tf.tanh(tf.matmul(hidden, tf.cast(variables["b/kernel"], F16)) +
                   tf.cast(variables["b/bias"], F16))
  hidden = tf.matmul(hidden, tf.cast(variables["c/kernel"], F16))
  return tf.reduce_mean(tf.square(tf.cast(hidden, F32)))


def _inject(grads_and_vars, values):
  """Writes values[name] (a fed scalar) into entry 0 of that gradient."""
  out = []
  for grad, var in grads_and_vars:
    value = values[var.op.name]
    flat = tf.reshape(grad, [-1])
    # 0 means "no fault" (NaN != 0 holds, so NaN is written).
    first = tf.equal(tf.range(tf.size(flat)), 0) & tf.not_equal(value, 0.0)
    out.append((tf.reshape(tf.where(first, tf.fill(tf.shape(flat), value),
                                    flat), tf.shape(grad)), var))
  return out


class _Run:
  """The model's graph with an overflow report written to `path`."""

  def __init__(self, testcase, path, max_variables=10, **options):
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.values = {name: v1.placeholder_with_default(np.float32(0), [])
                     for name in NAMES}
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.1),
          managers.FixedLossScaleManager(64),
          overflow_report=OverflowReport(max_variables,
                                         output_stream="file://" + path),
          **options)
      grads_and_vars = _inject(opt.compute_gradients(_model()), self.values)
      self.train_op = opt.apply_gradients(grads_and_vars)
      self.applied = mp_optimizer.step_applied()
      self.session = v1.Session(graph=self.graph)
      testcase.addCleanup(self.session.close)
      self.session.run(v1.global_variables_initializer())

  def step(self, faults=None, trace=False):
    feed = {self.values[name]: value for name, value in (faults or {}).items()}
    metadata = v1.RunMetadata()
    options = v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE)
    _, applied = self.session.run(
        [self.train_op, self.applied], feed,
        options=options if trace else None, run_metadata=metadata)
    executed = [node.node_name for device in metadata.step_stats.dev_stats
                for node in device.node_stats]
    return applied, executed


def _lines(path):
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return f.read().splitlines()


class OverflowReportTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{name.replace('/', '_')}_{label}", name, value, kind)
      for name in NAMES for value, kind, label in (
          (np.nan, "NaN", "nan"), (np.inf, "Inf", "inf"),
          (-np.inf, "Inf", "minus_inf")))
  def test_names_exactly_the_poisoned_variable(self, name, value, kind):
    path = self.create_tempdir().full_path + "/report.txt"
    run = _Run(self, path)
    self.assertTrue(run.step()[0])
    self.assertEqual(_lines(path), [])
    self.assertFalse(run.step({name: value})[0])
    self.assertTrue(run.step()[0])
    self.assertEqual(_lines(path), [
        "mp_optimizer: step skipped at loss scale 64: 1 of 4 gradients "
        f"non-finite: {name}:0 {kind}"])

  @parameterized.named_parameters(
      ("all_shown", 10, {"b/bias": np.inf, "a/kernel": np.nan},
       "2 of 4 gradients non-finite: a/kernel:0 NaN, b/bias:0 Inf"),
      ("first_one_shown", 1, {"c/kernel": np.nan, "b/kernel": np.inf},
       "2 of 4 gradients non-finite: b/kernel:0 Inf, ..."),
      ("finite_but_sum_overflows", 10,
       {"a/kernel": 3e38, "b/kernel": 3e38},
       "0 of 4 gradients non-finite: none has a NaN/Inf entry here"),
  )
  def test_several_faults(self, max_variables, faults, expected):
    path = self.create_tempdir().full_path + "/report.txt"
    run = _Run(self, path, max_variables=max_variables)
    self.assertFalse(run.step(faults)[0])
    line, = _lines(path)
    self.assertIn(expected, line)

  @parameterized.named_parameters(
      (f"{target}_{kind}", target, value, kind)
      for target in ("table", "big") for value, kind in ((np.nan, "NaN"),
                                                         (np.inf, "Inf")))
  def test_sparse_and_large_gradients(self, target, value, kind):
    # loss = sum(gather(table) * p) + sum(big * q): d/d(table rows) = p and
    # d/d(big) = q exactly, so a fed p or q is exactly that gradient's fault.
    path = self.create_tempdir().full_path + "/report.txt"
    with tf.Graph().as_default():
      faults = {name: v1.placeholder_with_default(np.float32(1), [])
                for name in ("table", "big")}
      table = v1.get_variable("table", [50, 4])
      big = v1.get_variable("big", [300, 256])  # Above GROUP_MAX_ELEMENTS.
      loss = (tf.reduce_sum(tf.gather(table, [1, 7]) * faults["table"]) +
              tf.reduce_sum(big * faults["big"]))
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.1),
          managers.FixedLossScaleManager(2),
          overflow_report=OverflowReport(output_stream="file://" + path))
      grads_and_vars = opt.compute_gradients(loss)
      self.assertIsInstance(grads_and_vars[0][0], tf.IndexedSlices)
      train_op = opt.apply_gradients(grads_and_vars)
      with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(train_op)
        sess.run(train_op, {faults[target]: value})
    self.assertEqual(_lines(path), [
        "mp_optimizer: step skipped at loss scale 2: 1 of 2 gradients "
        f"non-finite: {target}:0 {kind}"])

  @parameterized.named_parameters(("clean", False), ("skipped", True))
  def test_report_ops_run_only_on_skipped_steps(self, poisoned):
    path = self.create_tempdir().full_path + "/report.txt"
    run = _Run(self, path)
    applied, executed = run.step({"b/bias": np.nan} if poisoned else None,
                                 trace=True)
    self.assertEqual(applied, not poisoned)
    report_ops = [n for n in executed if "overflow_report/" in n]
    self.assertEqual(bool(report_ops), poisoned, report_ops)

  def test_dropped_micro_step_of_gradient_accumulation(self):
    path = self.create_tempdir().full_path + "/report.txt"
    run = _Run(self, path, gradient_accumulation_steps=2)
    self.assertTrue(run.step()[0])
    self.assertFalse(run.step({"c/kernel": np.inf})[0])
    self.assertTrue(run.step()[0])
    self.assertEqual(_lines(path), [
        "mp_optimizer: micro-step dropped at loss scale 64: 1 of 4 gradients "
        "non-finite: c/kernel:0 Inf"])

  @parameterized.named_parameters(
      ("replica0", 0, np.nan, "replica 0: w:0 NaN"),
      ("replica1", 1, np.nan, "replica 1: w:0 NaN"))
  def test_mirrored_strategy_names_the_replica(self, replica, poison,
                                               expected):
    # The fed poison multiplies the replica's loss. NaN, not Inf: an Inf loss
    # gives ±Inf terms that the matmul gradient adds into NaN anyway.
    path = self.create_tempdir().full_path + "/report.txt"
    run = mirrored.MirroredRun(self, lambda: mp_optimizer.LossScaleOptimizer(
        v1.train.GradientDescentOptimizer(0.1),
        managers.FixedLossScaleManager(8),
        overflow_report=OverflowReport(output_stream="file://" + path)))
    run.step(mirrored.NO_REPLICA, poison)
    self.assertEqual(_lines(path), [])
    run.step(replica, poison)
    run.step(mirrored.NO_REPLICA, poison)
    self.assertEqual(_lines(path), [
        "mp_optimizer: step skipped at loss scale 8: 1 of 2 gradients "
        f"non-finite: {expected}"])

  @parameterized.named_parameters(
      ("string", "yes", TypeError, "`overflow_report` must be True, False"),
      ("number", 3, TypeError, r"got 3 \(type int\)"),
      ("zero_variables", lambda: OverflowReport(0), ValueError,
       "`max_variables`"),
      ("float_variables", lambda: OverflowReport(2.0), TypeError,
       "`max_variables`"))
  def test_bad_option(self, option, error, message):
    with self.assertRaisesRegex(error, message):
      option = option() if callable(option) else option
      mp_optimizer.LossScaleOptimizer(v1.train.GradientDescentOptimizer(0.1),
                                      managers.FixedLossScaleManager(8),
                                      overflow_report=option)
