"""The installed wheel works on its own, away from the source tree.

`make test-package` copies this file into an empty temporary directory (as
`test_installed_package.py`) and runs it there with pytest, in a virtual environment where the project was installed
from its wheel (not editable). So every import below resolves to the installed
files: a module, `py.typed` marker or licence file missing from the wheel
fails here. The main suite, which runs against the source tree, does not
collect it: its name matches neither `test_*.py` nor `*_test.py`.
"""

import importlib.metadata
import pathlib
import shutil
import subprocess
import sys

from absl import flags
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers

DIST = importlib.metadata.distribution("mp_optimizer")
# absltest's temporary files read absl flags, which pytest never parses.
flags.FLAGS.mark_as_parsed()


class InstalledPackageTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("mp_optimizer", mp_optimizer),
      ("mp_optimizer_managers", managers),
  )
  def test_package_comes_from_site_packages_with_py_typed(self, module):
    folder = pathlib.Path(module.__file__).parent
    self.assertIn("site-packages", folder.parts)
    # This environment's own copy, not one it reads through a .pth file.
    self.assertTrue(folder.is_relative_to(sys.prefix), (folder, sys.prefix))
    self.assertTrue((folder / "py.typed").is_file(), folder)

  def test_managers_are_installed_inside_mp_optimizer_only(self):
    folder = pathlib.Path(managers.__file__).parent
    self.assertEqual(folder.parent, pathlib.Path(mp_optimizer.__file__).parent)
    self.assertEqual(DIST.read_text("top_level.txt").split(), ["mp_optimizer"])
    self.assertFalse(
        (folder.parent.parent / "managers").exists(),
        "a top-level `managers` package was installed into site-packages")

  def test_version_agrees_with_the_metadata(self):
    self.assertEqual(mp_optimizer.__version__, DIST.version)

  def test_licence_ships_and_is_declared(self):
    names = {pathlib.PurePath(str(f)).name for f in DIST.files}
    self.assertIn("LICENSE", names)
    self.assertEqual(DIST.metadata["License-Expression"], "Apache-2.0")
    licence = next(f for f in DIST.files if pathlib.PurePath(str(f)).name == "LICENSE")
    self.assertIn("Apache License", licence.read_text())

  def test_pip_show_displays_the_licence(self):
    shown = subprocess.run([sys.executable, "-m", "pip", "show", "mp_optimizer"],
                           capture_output=True, text=True, check=True).stdout
    self.assertRegex(shown, r"(?m)^License(-Expression)?: Apache-2\.0$")

  def test_long_description_has_no_relative_links(self):
    description = DIST.metadata.get_payload()
    self.assertIn("# mp_optimizer", description)
    self.assertNotIn("](BENCHMARKS.md)", description)
    self.assertNotIn("](docs/", description)

  def test_one_training_step_skips_and_one_applies(self):
    with tf.Graph().as_default() as graph:
      x = tf.compat.v1.placeholder(tf.float32, [2])
      w = tf.compat.v1.get_variable("w", initializer=[1.0, 2.0])
      loss = tf.reduce_sum(tf.cast(w, tf.float16) * tf.cast(x, tf.float16))
      opt = mp_optimizer.LossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(0.5),
          managers.ExponentialUpdateLossScaleManager(
              2.0**4, 1000, decr_every_n_nan_or_inf=1, decr_ratio=0.5))
      train_op = opt.minimize(loss)
      applied = mp_optimizer.step_applied()
      with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        _, was_applied = sess.run([train_op, applied], {x: [np.inf, 1.0]})
        self.assertFalse(was_applied)
        np.testing.assert_array_equal(sess.run(w), [1.0, 2.0])
        self.assertEqual(sess.run(opt.get_loss_scale()), 8.0)
        sess.run(train_op, {x: [1.0, 1.0]})
        # w -= 0.5 * dloss/dw, with dloss/dw = x worked by hand.
        np.testing.assert_allclose(sess.run(w), [0.5, 1.5])

  def test_console_script_converts_a_file(self):
    script = shutil.which("mp-optimizer-migrate",
                          path=str(pathlib.Path(sys.executable).parent))
    self.assertIsNotNone(script)
    legacy = self.create_tempfile(
        "legacy.py", "import tensorflow as tf\n"
        "m = tf.contrib.mixed_precision.FixedLossScaleManager(128)\n")
    result = subprocess.run([script, legacy.full_path], capture_output=True,
                            text=True, check=False)
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertIn("+m = managers.FixedLossScaleManager(128)", result.stdout)
