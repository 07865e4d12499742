"""One S per step: whatever reports "the scale this step used" reports the
S its gradients were multiplied by.

Two train ops share a manager and run in one `sess.run`, ordered so that B
runs whole (and halves the scale: it always overflows) after A's gradients
were computed at S = 1024 and before A's step is applied. A's signals, its
telemetry (headroom, skip reason) and its overflow report must all say
1024, the S of A's gradients, not the 512 B left. Likewise gradients taken
by hand (`get_scaled_loss`, then `get_unscaled_gradients`) are unscaled with
the S their loss was scaled with, even if the scale changed in between.
"""

import math
import os
import re
import tempfile

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from mp_optimizer.overflow import OverflowReport

v1 = tf.compat.v1
SCALE, FLOOR = 1024.0, 512.0
GRADIENT = np.array([0.5, -2.0], np.float32)  # d(loss)/dw: amax is 2.


def _build(report_path: str):
  """A's and B's train ops, B between A's gradients and A's apply."""
  manager = managers.ExponentialUpdateLossScaleManager(
      SCALE, 1000, decr_every_n_nan_or_inf=1, decr_ratio=0.5,
      min_loss_scale=FLOOR)
  opt_a = mp_optimizer.LossScaleOptimizer(
      v1.train.GradientDescentOptimizer(0.1, name="A"), manager,
      precision_telemetry=True,
      overflow_report=OverflowReport(output_stream="file://" + report_path))
  opt_b = mp_optimizer.LossScaleOptimizer(
      v1.train.GradientDescentOptimizer(0.1, name="B"), manager)
  poison = v1.placeholder(tf.float32, [])
  w_a = v1.get_variable("w_a", initializer=np.ones(2, np.float32))
  w_b = v1.get_variable("w_b", initializer=np.ones(2, np.float32))
  grads_a = opt_a.compute_gradients(tf.reduce_sum(w_a * GRADIENT) * poison,
                                    var_list=[w_a])
  with tf.control_dependencies([g for g, _ in grads_a]):
    train_b = opt_b.minimize(tf.reduce_sum(w_b * GRADIENT) * np.inf,
                             var_list=[w_b])
  with tf.control_dependencies([train_b]):
    train_a = opt_a.apply_gradients(grads_a)
  return poison, [train_a, train_b], opt_a, opt_b


class OneScalePerStepTest(parameterized.TestCase):

  @parameterized.named_parameters(
      # A finite: headroom = log2(65504 / (S * amax)).
      ("a_applied", 1.0, 0, math.log2(65504 / (SCALE * 2)), []),
      # A overflows above the floor: "overflow", not "at the floor", and the
      # report names S.
      ("a_skipped", np.inf, 1, -np.inf,
       [f"at loss scale {SCALE:g}:"]))
  def test_each_consumer_reports_the_scale_of_its_gradients(
      self, poison_value, reason, headroom, report_lines):
    report = os.path.join(tempfile.mkdtemp(), "report.txt")
    with tf.Graph().as_default() as graph:
      poison, train_ops, opt_a, opt_b = _build(report)
      signals = mp_optimizer.signals
      scales = {"A": signals.loss_scale(optimizer=opt_a),
                "B": signals.loss_scale(optimizer=opt_b)}
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        _, used = sess.run([train_ops, scales], {poison: poison_value})
        after = sess.run(opt_a.get_loss_scale())
        telemetry = sess.run(signals.precision(optimizer=opt_a))
    printed = ""
    if os.path.exists(report):  # Made by the first line printed.
      with open(report) as lines:
        printed = lines.read()
    self.assertEqual(after, FLOOR)  # B (and a skipped A) halved the scale.
    # All at once, so a failure shows every consumer's S.
    headroom_seen = round(float(telemetry["headroom_bits"]), 4)
    self.assertEqual(
        {"signal": used, "headroom_bits": headroom_seen,
         "skip_reason": telemetry["skip_reason"],
         "report": re.findall(r"at loss scale \S+", printed)},
        {"signal": {"A": SCALE, "B": SCALE},
         "headroom_bits": round(headroom, 4), "skip_reason": reason,
         "report": report_lines})


class ScaledByHandTest(parameterized.TestCase):

  def test_unscaled_with_the_read_that_scaled_the_loss(self):
    with tf.Graph().as_default() as graph:
      manager = managers.ExponentialUpdateLossScaleManager(SCALE, 1000)
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.1), manager)
      w = v1.get_variable("w", initializer=np.ones(2, np.float32))
      grads = tf.gradients(opt.get_scaled_loss(tf.reduce_sum(w * GRADIENT)),
                           [w])
      with tf.control_dependencies(grads):  # After the loss was scaled.
        change = manager.get_loss_scale().assign(FLOOR)
      with tf.control_dependencies([change]):
        unscaled = opt.get_unscaled_gradients(grads)
      train_op = opt.apply_gradients(zip(unscaled, [w]))
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        _, gradient, used = sess.run(
            [train_op, unscaled[0], mp_optimizer.signals.loss_scale()])
    self.assertEqual(used, SCALE)
    np.testing.assert_array_equal(gradient, GRADIENT)  # Not twice as large.


if __name__ == "__main__":
  tf.test.main()
