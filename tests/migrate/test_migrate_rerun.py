"""mp-optimizer-migrate run again on code it converted reports what remains.

Findings come from the code as it is: a second run over converted files
reports, at their new lines, everything the first run reported that is still
there, and nothing it rewrote; notices, which describe what the conversion
changed, are given once.
"""

import contextlib
import io
import os
import shutil
import tempfile

from absl.testing import parameterized

from mp_optimizer import migrate

LEGACY = '''import tensorflow as tf


def build(opt, loss):
  manager = tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(
      init_loss_scale=2**15, incr_every_n_steps=1000)
  opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(opt)
  opt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, manager)
  scale = tf.train.experimental.DynamicLossScale(increment_period=2.5)
  fixed = tf.train.experimental.FixedLossScale(128)
  reset = tf.assign(manager.get_loss_scale(), 4.0)
  print(opt._loss_scale_manager)
  return opt.minimize(loss), scale, fixed, reset
'''
_FINDINGS = [
    "{line}: `opt` is already wrapped for loss scaling (line {wrapped}) and "
    "is wrapped again here by `LossScaleOptimizer`: the replacement refuses "
    "to wrap twice (TensorFlow scaled the loss twice); keep one wrapper",
    "{line}: `increment_period=2.5` is not a whole number of steps (the "
    "counters are integers): write the int you mean",
    "{line}: `opt._loss_scale_manager` is private to the legacy class and the "
    "replacement has no such attribute; use `.loss_scale_manager`",
]


# TF 2.x-era model code: Keras's policy under a flag, TF's loss scale for a
# tf.compat.v1 optimizer in the same file.
KERAS = '''import tensorflow as tf


def build(loss, keras_policy):
  if keras_policy:
    tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
  loss_scale = tf.compat.v1.mixed_precision.DynamicLossScale()
  opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
      tf.compat.v1.train.AdamOptimizer(), loss_scale)
  return opt.minimize(loss)
'''
_KERAS = ("this file also uses Keras mixed precision: the loss scales "
          "converted here work with tf.compat.v1 optimizers only; check that "
          "none of them reaches a Keras optimizer")


def _expected(path, first_line):
  """The findings, their lines counted from the wrapped-twice one."""
  lines = [first_line, first_line + 1, first_line + 4]
  return [f"{path}:" + text.format(line=line, wrapped=first_line - 1)
          for text, line in zip(_FINDINGS, lines)]


class RerunTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir)
    self.path = os.path.join(self.dir, "train.py")
    with open(self.path, "w") as f:
      f.write(LEGACY)

  def run_main(self, *argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      status = migrate.main([*argv, self.path])
    return status, out.getvalue(), err.getvalue().splitlines()

  def test_each_run_reports_what_remains(self):
    status, _, first = self.run_main("--in-place")
    notice = [line for line in first if ": notice: " in line]
    self.assertEqual((status, len(notice)), (1, 1))
    self.assertEqual([line for line in first if line not in notice],
                     _expected(self.path, 8) + [first[-1]])
    self.assertEqual(first[-1], "mp-optimizer-migrate: 1 files scanned, "
                     "1 changed, 3 findings, 1 notices, 0 errors")
    for _ in range(2):  # The second run and any after it say the same.
      status, out, again = self.run_main("--in-place")
      self.assertEqual((status, out), (1, ""))
      self.assertEqual(again, _expected(self.path, 10) + [
          "mp-optimizer-migrate: 1 files scanned, 0 changed, 3 findings, "
          "0 notices, 0 errors"])

  def test_keras_mixed_precision_is_reported_on_every_run(self):
    with open(self.path, "w") as f:
      f.write(KERAS)
    for line, changed in ((6, 1), (8, 0), (8, 0)):  # Two imports added.
      self.assertEqual(self.run_main("--in-place")[::2], (1, [
          f"{self.path}:{line}: {_KERAS}",
          f"mp-optimizer-migrate: 1 files scanned, {changed} changed, "
          "1 findings, 0 notices, 0 errors"]))

  @parameterized.named_parameters(
      ("loss_scale_subclass",
       "class Halving(tf.train.experimental.LossScale):\n\n"
       "  def __call__(self):\n    return 1.0\n",
       ["subclass of `tf.train.experimental.LossScale`", "subclass of "
        "`managers.LossScale`"], ": the optimizer calls get_loss_scale() and "
       "update_loss_scale(finite), not __call__() and update(grads); "
       "implement those two"),
      ("type_check",
       "ok = isinstance(s, tf.compat.v1.mixed_precision.DynamicLossScale)\n",
       ["`tf.compat.v1.mixed_precision.DynamicLossScale` in a type check now "
        "means managers.DynamicLossScale", "`managers.DynamicLossScale` in a "
        "type check"], ": objects made by TensorFlow itself (or by files not "
       "converted yet) fail it"))
  def test_converted_tensorflow_names_are_reported_on_every_run(
      self, code, heads, tail):
    with open(self.path, "w") as f:
      f.write("import tensorflow as tf\n\n\n" + code)
    for line, head, changed in ((4, heads[0], 1), (5, heads[1], 0),
                                (5, heads[1], 0)):  # One import added.
      self.assertEqual(self.run_main("--in-place")[::2], (1, [
          f"{self.path}:{line}: {head}{tail}",
          f"mp-optimizer-migrate: 1 files scanned, {changed} changed, "
          "1 findings, 0 notices, 0 errors"]))

  def test_nothing_left_gives_a_clean_second_run(self):
    with open(self.path, "w") as f:
      f.write("import tensorflow as tf\n\n"
              "m = tf.contrib.mixed_precision.FixedLossScaleManager(8)\n")
    self.assertEqual(self.run_main("--in-place")[0], 0)
    self.assertEqual(self.run_main("--in-place"), (0, "", [
        "mp-optimizer-migrate: 1 files scanned, 0 changed, 0 findings, "
        "0 notices, 0 errors"]))
