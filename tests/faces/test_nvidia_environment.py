"""`mp_optimizer.nvidia_environment`: NVIDIA's container variables honoured.

The fixture tests/migrate/fixtures/nvidia_runner.py is shaped like an NVIDIA
container's ResNet runner, which set TF_ENABLE_AUTO_MIXED_PRECISION_* under
an --amp flag and otherwise trained a float32 model with a plain optimizer.
Run unchanged under `python -m mp_optimizer.nvidia_environment`, it must
build the loss-scale variables, switch the rewrite on in its Session's
config, and train exactly as a hand-converted copy that calls
`mp_optimizer.enable_mixed_precision_graph_rewrite(opt, "dynamic")`.
"""

import os
import pathlib
import shutil
import sys
import tempfile

from absl.testing import parameterized
import pytest
import tensorflow as tf

import mp_optimizer
from mp_optimizer import nvidia_environment
from tests.support import converted_files

v1 = tf.compat.v1
RUNNER = (pathlib.Path(__file__).resolve().parents[1] / "migrate" / "fixtures" /
          "nvidia_runner.py")
_OPTIMIZER = "      opt = v1.train.MomentumOptimizer(learning_rate, momentum=0.9)\n"
_VARIABLES = ("TF_ENABLE_AUTO_MIXED_PRECISION",
              "TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE",
              "TF_ENABLE_AUTO_MIXED_PRECISION_LOSS_SCALING")


def _run(*argv):
  """Runs a Python command line; returns its stdout's lines."""
  assert not set(_VARIABLES) & set(os.environ), "set by a test and kept"
  status, out, err = converted_files.run([sys.executable, *argv])
  assert status == 0, err
  return out.splitlines()


class SettingsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("unset", {}, (False, False)),
      ("all", {"TF_ENABLE_AUTO_MIXED_PRECISION": "1"}, (True, True)),
      ("scaling_alone", {"TF_ENABLE_AUTO_MIXED_PRECISION": "1",
                         "TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE": "0"},
       (False, True)),
      ("rewrite_alone", {"TF_ENABLE_AUTO_MIXED_PRECISION": "true",
                         "TF_ENABLE_AUTO_MIXED_PRECISION_LOSS_SCALING": "0"},
       (True, False)),
      ("runner_shape", {"TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE": "1",
                        "TF_ENABLE_AUTO_MIXED_PRECISION_LOSS_SCALING": "1"},
       (True, True)),
      ("switched_off", {"TF_ENABLE_AUTO_MIXED_PRECISION": "0"}, (False, False)))
  def test_what_each_setting_asks_for(self, environ, expected):
    got = nvidia_environment.settings(environ)
    self.assertEqual((got.graph_rewrite, got.loss_scaling), expected)

  def test_bad_value_names_the_variable_and_the_value(self):
    with self.assertRaisesRegex(ValueError, "TF_ENABLE_AUTO_MIXED_PRECISION_"
                                "LOSS_SCALING must be 0 or 1.*'yes'"):
      nvidia_environment.settings(
          {"TF_ENABLE_AUTO_MIXED_PRECISION_LOSS_SCALING": "yes"})


@pytest.mark.long_run
class RunnerTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dir = pathlib.Path(tempfile.mkdtemp())
    text = RUNNER.read_text()
    assert _OPTIMIZER in text
    cls.hand = cls.dir / "hand_converted.py"
    cls.hand.write_text(text.replace("import tensorflow as tf\n", (
        "import tensorflow as tf\nimport mp_optimizer\n")).replace(
            _OPTIMIZER, _OPTIMIZER + "      if self.use_tf_amp:\n"
            "        opt = mp_optimizer.enable_mixed_precision_graph_rewrite(\n"
            "            opt, \"dynamic\")\n"))

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.dir)
    super().tearDownClass()

  def test_amp_runner_trains_as_the_hand_converted_script(self):
    honoured = _run("-m", "mp_optimizer.nvidia_environment", str(RUNNER),
                    "--amp")
    self.assertEqual(honoured, _run(str(self.hand), "--amp"))
    self.assertEqual(honoured[-2:], [
        "auto_mixed_precision 1",
        "scale variables ['current_loss_scale', 'good_steps']"])
    self.assertLen([l for l in honoured if l.startswith("loss ")], 20)

  def test_without_the_flag_nothing_changes(self):
    honoured = _run("-m", "mp_optimizer.nvidia_environment", str(RUNNER))
    self.assertEqual(honoured, _run(str(RUNNER)))
    self.assertEqual(honoured[-2:], ["auto_mixed_precision 0",
                                     "scale variables []"])

  def test_static_loss_scaling_keeps_the_rewrite_alone(self):
    honoured = _run("-m", "mp_optimizer.nvidia_environment", str(RUNNER),
                    "--amp", "--static-loss-scale")
    self.assertEqual(honoured[-2:], ["auto_mixed_precision 1",
                                     "scale variables []"])

  def test_usage_errors_exit_2_and_name_the_script(self):
    self.assertEqual(nvidia_environment.main([]), 2)
    self.assertEqual(nvidia_environment.main([str(self.dir / "gone.py")]), 2)


class InProcessTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    for name in _VARIABLES:
      if name in os.environ:
        self.addCleanup(os.environ.__setitem__, name, os.environ.pop(name))
    self.addCleanup(nvidia_environment.stop_honouring_nvidia_environment)
    self.addCleanup(v1.mixed_precision.disable_mixed_precision_graph_rewrite)

  def _build(self, make_opt):
    with tf.Graph().as_default() as graph:
      w = v1.get_variable("w", [2], initializer=v1.ones_initializer())
      loss = tf.reduce_sum(tf.square(w))
      make_opt().minimize(loss)
      return sorted(v.op.name for v in graph.get_collection("variables"))

  def test_loss_scaling_alone_for_an_unmodified_optimizer(self):
    nvidia_environment.honour_nvidia_environment()
    nvidia_environment.honour_nvidia_environment()  # Twice: no double wrap.
    os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"
    os.environ["TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE"] = "0"
    names = self._build(lambda: v1.train.GradientDescentOptimizer(0.1))
    self.assertIn("current_loss_scale", names)
    self.assertFalse(tf.config.optimizer.get_experimental_options().get(
        "auto_mixed_precision", False))

  def test_optimizers_that_scale_already_are_left_alone(self):
    nvidia_environment.honour_nvidia_environment()
    os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"
    names = self._build(lambda: mp_optimizer.MixedPrecisionLossScaleOptimizer(
        v1.train.GradientDescentOptimizer(0.1), 64))
    self.assertNotIn("current_loss_scale", names)

  def test_unset_or_stopped_does_nothing(self):
    nvidia_environment.honour_nvidia_environment()
    self.assertNotIn("current_loss_scale",
                     self._build(lambda: v1.train.AdamOptimizer(0.1)))
    nvidia_environment.stop_honouring_nvidia_environment()
    os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"
    self.assertNotIn("current_loss_scale",
                     self._build(lambda: v1.train.AdamOptimizer(0.1)))
