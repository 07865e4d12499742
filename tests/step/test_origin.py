"""OverflowReport(first_nonfinite_op=True): where an overflow started.

A 20-layer float16 MLP whose layer 13 MatMul overflows (its finite float16
inputs multiply out past 65504) must name that MatMul first; an Inf put into
the loss only must name the loss; a NaN fed in the data names the
placeholder it was fed to. A clean step prints nothing.
"""

import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from mp_optimizer.overflow import OverflowReport

v1 = tf.compat.v1
F16 = tf.float16
LAYERS, WIDTH = 20, 64


def _mlp():
  """Returns (loss, data, layer-13 weight factor, loss exponent), all fed."""
  data = v1.placeholder(tf.float32, [4, WIDTH], name="data")
  layer_13_factor = v1.placeholder_with_default(1.0, [], name="factor_13")
  loss_exponent = v1.placeholder_with_default(0.0, [], name="loss_exponent")
  hidden = tf.cast(data, F16)
  for layer in range(1, LAYERS + 1):
    with tf.name_scope(f"layer_{layer}"):
      w = v1.get_variable(f"w{layer}", [WIDTH, WIDTH],
                          initializer=v1.constant_initializer(1.0 / WIDTH))
      if layer == 13:
        w = w * layer_13_factor
      hidden = tf.nn.relu(tf.matmul(hidden, tf.cast(w, F16)))
  with tf.name_scope("loss"):
    # exp(exponent) overflows float32 for an exponent of 100.
    loss = tf.reduce_mean(tf.cast(hidden, tf.float32)) * tf.exp(loss_exponent)
  return loss, data, layer_13_factor, loss_exponent


class FirstNonFiniteOpTest(parameterized.TestCase):

  def _run(self, feed_for):
    path = os.path.join(self.create_tempdir().full_path, "report.txt")
    with tf.Graph().as_default() as graph:
      loss, data, layer_13_factor, loss_exponent = _mlp()
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.1),
          managers.FixedLossScaleManager(1),
          overflow_report=OverflowReport(first_nonfinite_op=True,
                                         output_stream=f"file://{path}"))
      train_op = opt.minimize(loss)
      feed = {data: np.ones([4, WIDTH], np.float32)}
      feed.update(feed_for(layer_13_factor, loss_exponent, data))
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        _, applied = sess.run([train_op, mp_optimizer.step_applied()], feed)
    lines = open(path).read().splitlines() if os.path.exists(path) else []
    return applied, [line for line in lines if "first non-finite op" in line]

  def test_an_overflowing_matmul_is_named_first(self):
    # Layer 13's float16 weights become 1/64 * 2e5 = 3125: finite; its
    # MatMul sums 64 of them: 200000, past float16's 65504.
    applied, lines = self._run(lambda factor, *_: {factor: 2e5})
    self.assertFalse(applied)
    self.assertLen(lines, 1)
    self.assertIn("first non-finite op: layer_13/MatMul (MatMul, float16, "
                  "shape (4, 64)) Inf;", lines[0])

  def test_an_inf_in_the_loss_only_names_the_loss(self):
    applied, lines = self._run(lambda _, exponent, __: {exponent: 100.0})
    self.assertFalse(applied)
    self.assertLen(lines, 1)
    self.assertIn("first non-finite op: loss/Exp (Exp, float32, shape ()) "
                  "Inf;", lines[0])

  def test_nan_in_the_data_names_the_placeholder_it_was_fed_to(self):
    batch = np.ones([4, WIDTH], np.float32)
    batch[2, 5] = np.nan
    applied, lines = self._run(lambda _, __, data: {data: batch})
    self.assertFalse(applied)
    self.assertLen(lines, 1)
    # The fed tensor holds the NaN itself, before any op reads it.
    self.assertIn("first non-finite op: data (Placeholder, float32, shape "
                  "(4, 64)) NaN;", lines[0])

  def test_a_clean_step_prints_nothing(self):
    applied, lines = self._run(lambda *_: {})
    self.assertTrue(applied)
    self.assertEmpty(lines)

  def test_setting_must_be_a_bool(self):
    with self.assertRaisesRegex(TypeError, "`first_nonfinite_op`"):
      OverflowReport(first_nonfinite_op=1)


if __name__ == "__main__":
  tf.test.main()
