"""Savers in converted files: `mp_optimizer.Saver`, and the Scaffold notices.

Where the codemod converts a file to loss scaling (or `--precision bfloat16`
switches one to the bfloat16 mode), TensorFlow's `Saver(...)` becomes
`mp_optimizer.Saver(...)`, which restores a float32 run's checkpoint into
the loss-scaled graph; a `MonitoredTrainingSession`, `EstimatorSpec` or
`Scaffold` that builds a default Saver gets a notice with the fix. The
fixtures are legacy scripts in the shape of public training scripts; the
expected text is `mp_optimizer.migrate.savers`'s table applied by hand.
"""

import os
import pathlib

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tests.migrate import one_file

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
TF = "import tensorflow as tf\n"
CONTRIB_OPTIMIZER = "opt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, m)\n"
SAVER_NOTICE = ("notice: `{spelling}(...)` -> `mp_optimizer.Saver(...)`: "
                "mp_optimizer.Saver saves the same keys and also restores a "
                "checkpoint without loss-scale state")


class SaverTest(one_file.OneFileTest):

  def _fixture(self, name, *options):
    return self._migrate((FIXTURES / name).read_text(), *options, name=name)

  def test_training_loop_fixture(self):
    status, converted, lines = self._fixture("saver_training_loop.py")
    self.assertIn("  restorer = mp_optimizer.Saver(v1.trainable_variables())\n",
                  converted)
    self.assertIn("  saver = mp_optimizer.Saver(max_to_keep=3)\n", converted)
    self.assertIn("  with v1.train.MonitoredTrainingSession("
                  "checkpoint_dir=checkpoint_dir,\n", converted)
    self.assertIn("  return tf.train.Saver(variables, False, True)\n",
                  converted)
    self.assertEqual(
        [line.split(":", 2)[:2] for line in lines
         if "Saver" in line or "scaffold" in line],
        [["28", " notice"], ["35", " notice"], ["48", " notice"],
         ["56", " `tf.train.Saver(...)` passes more than `var_list` by "
          "position"]])
    self.assertStartsWith(lines[0], "28: " + SAVER_NOTICE.format(
        spelling="tf.train.Saver"))
    self.assertIn(
        "48: notice: `v1.train.MonitoredTrainingSession(...)` has no "
        "`scaffold=`: the Saver it builds cannot restore a checkpoint without "
        "loss-scale state (a float32 run's); to continue one, pass "
        "`scaffold=tf.compat.v1.train.Scaffold(saver=mp_optimizer.Saver("
        "sharded=True))` (docs: Checkpoints)", lines)
    self.assertEqual(status, 1)  # The positional Saver is left to a human.

  def test_estimator_fixture(self):
    status, converted, lines = self._fixture("saver_estimator.py")
    original = (FIXTURES / "saver_estimator.py").read_text()
    self.assertEqual(converted.count("EstimatorSpec("),
                     original.count("EstimatorSpec("))  # None rewritten.
    notices = [line for line in lines if "Scaffold" in line]
    self.assertEqual([line.split(":", 1)[0] for line in notices],
                     ["22", "25"])
    self.assertIn("`tf.compat.v1.train.Scaffold(...)` has no `saver=`",
                  notices[0])
    self.assertIn(
        "`tf.estimator.EstimatorSpec(...)` has no `scaffold=`: the Saver it "
        "builds cannot restore a checkpoint without loss-scale state (a "
        "float32 run's); to continue one, pass `scaffold=tf.compat.v1.train."
        "Scaffold(saver=mp_optimizer.Saver(sharded=True, defer_build=True, "
        "save_relative_paths=True))` (docs: Checkpoints)", notices[1])
    self.assertEqual(status, 0)

  @parameterized.named_parameters(
      ("tf_train", TF, "s = tf.train.Saver()\n", "tf.train.Saver"),
      ("compat_v1", TF, "s = tf.compat.v1.train.Saver(var_list=v)\n",
       "tf.compat.v1.train.Saver"),
      ("module_alias", TF + "v1 = tf.compat.v1\n",
       "s = v1.train.Saver(sharded=True)\n", "v1.train.Saver"),
      ("import_alias", TF + "import tensorflow.compat.v1 as tf1\n",
       "s = tf1.train.Saver(v)\n", "tf1.train.Saver"),
      ("tensorflow_core", TF + "import tensorflow_core as tfc\n",
       "s = tfc.train.Saver()\n", "tfc.train.Saver"),
      ("in_a_scaffold", TF,
       "s = tf.train.Scaffold(saver=tf.train.Saver(sharded=True))\n",
       "tf.train.Saver"),
  )
  def test_each_spelling_becomes_ours(self, imports, line, spelling):
    status, converted, lines = self._migrate(imports + CONTRIB_OPTIMIZER +
                                             line)
    expected = line.replace(spelling, "mp_optimizer.Saver")
    self.assertTrue(converted.endswith("\n" + expected), converted)
    self.assertIn("\nimport mp_optimizer\n", converted)
    number = len((imports + CONTRIB_OPTIMIZER).splitlines()) + 1
    self.assertIn(f"{number}: " + SAVER_NOTICE.format(spelling=spelling),
                  [found[:len(f"{number}: ") + len(SAVER_NOTICE.format(
                      spelling=spelling))] for found in lines])
    self.assertEqual(status, 0)

  @parameterized.named_parameters(
      ("no_loss_scaling", TF + "# mixed_precision: later\n"
       "s = tf.train.Saver()\nsess = tf.train.MonitoredTrainingSession()\n"),
      ("converted_code", TF + "import mp_optimizer\n"
       "opt = mp_optimizer.LossScaleOptimizer(opt, m)\n"
       "s = tf.train.Saver()\nsess = tf.train.MonitoredTrainingSession()\n"),
      ("session_with_scaffold", TF + CONTRIB_OPTIMIZER +
       "sess = tf.train.MonitoredTrainingSession(scaffold=s)\n"
       "spec = tf.estimator.EstimatorSpec(mode, **kwargs)\n"),
      # PREDICT and EVAL specs build no optimizer, so no scale state.
      ("predict_and_eval_specs", TF + CONTRIB_OPTIMIZER +
       "spec = tf.estimator.EstimatorSpec(mode, predictions={'p': p})\n"
       "spec = tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=m)\n"),
  )
  def test_left_alone(self, text):
    status, converted, lines = self._migrate(text)
    self.assertFalse([line for line in lines if "Saver" in line or
                      "scaffold" in line], lines)
    self.assertEqual(converted.splitlines()[-2:], text.splitlines()[-2:])
    self.assertEqual(status, 0)

  @parameterized.named_parameters(
      ("keyword", "tf.estimator.EstimatorSpec(mode, loss=l, train_op=t)\n"),
      ("fourth_by_position", "tf.estimator.EstimatorSpec(mode, None, l, t)\n"),
      ("star_args", "tf.estimator.EstimatorSpec(*spec_args)\n"))
  def test_a_training_spec_gets_the_notice(self, line):
    status, _, lines = self._migrate(TF + CONTRIB_OPTIMIZER + "spec = " + line)
    self.assertLen([found for found in lines if "has no `scaffold=`" in found],
                   1, lines)
    self.assertEqual(status, 0)

  def test_bfloat16_switch_of_converted_code_writes_ours(self):
    text = (TF + "from mp_optimizer import managers\n"
            "m = managers.ExponentialUpdateLossScaleManager(8, 2)\n"
            "s = tf.compat.v1.train.Saver()\n")
    status, converted, lines = self._migrate(text, "--precision", "bfloat16")
    self.assertTrue(converted.endswith("\ns = mp_optimizer.Saver()\n"),
                    converted)
    self.assertIn("\nimport mp_optimizer\n", converted)
    self.assertLen([line for line in lines if "mp_optimizer.Saver" in line], 1)
    self.assertEqual(status, 0)

  def test_bfloat16_switch_of_legacy_code_notices_once(self):
    status, _, lines = self._fixture("saver_training_loop.py", "--precision",
                                     "bfloat16")
    self.assertLen([line for line in lines if "has no `scaffold=`" in line], 1)
    self.assertLen([line for line in lines if "-> `mp_optimizer.Saver" in line],
                   2)
    self.assertEqual(status, 1)

  def test_converted_script_continues_a_float32_checkpoint(self):
    """The converted Saver restores a float32 run's checkpoint, which the
    script's own TensorFlow Saver cannot."""
    script = TF + (
        "def build():\n"
        "  w = tf.compat.v1.get_variable('w', initializer=[1.0, 2.0])\n"
        "  loss = tf.reduce_sum(tf.square(w))\n"
        "  opt = tf.contrib.mixed_precision.LossScaleOptimizer(\n"
        "      tf.compat.v1.train.GradientDescentOptimizer(0.1),\n"
        "      tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(\n"
        "          2**15, 2000))\n"
        "  train_op = opt.minimize(loss)\n"
        "  return train_op, tf.compat.v1.train.Saver()\n")
    _, converted, _ = self._migrate(script)
    folder = self.create_tempdir().full_path
    with tf.Graph().as_default() as graph:
      w = tf.compat.v1.get_variable("w", initializer=[3.0, 4.0])
      with tf.compat.v1.Session(graph=graph) as session:
        session.run(w.initializer)
        path = tf.compat.v1.train.Saver().save(session,
                                               os.path.join(folder, "fp32"))
    namespace = {}
    exec(compile(converted, "train.py", "exec"), namespace)  # pylint: disable=exec-used
    with tf.Graph().as_default() as graph:
      train_op, saver = namespace["build"]()
      with tf.compat.v1.Session(graph=graph) as session:
        with self.assertRaises(tf.errors.NotFoundError):
          tf.compat.v1.train.Saver().restore(session, path)
        saver.restore(session, path)
        session.run(train_op)
        weight, = [v for v in tf.compat.v1.global_variables()
                   if v.op.name == "w"]
        np.testing.assert_allclose(session.run(weight), [2.4, 3.2])


if __name__ == "__main__":
  tf.test.main()
