"""mp-optimizer-migrate leaves TensorFlow's own sources in a tree alone.

A project may vendor TensorFlow's sources (`third_party/tensorflow/python/
...`) or hold a copy of an installed TensorFlow; those files define the
legacy API. The fixtures in tests/migrate/fixtures/vendored/ have their
shape; they are copied into a project next to its own legacy code, and the
real command line runs over the whole tree.
"""

import contextlib
import filecmp
import io
import os
import pathlib
import shutil
import tempfile

from absl.testing import parameterized

from mp_optimizer import migrate

VENDORED = pathlib.Path(__file__).resolve().parent / "fixtures" / "vendored"
_LEGACY = ("import tensorflow as tf\n\n"
           "opt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, manager)\n")
_CONVERTED = ("import tensorflow as tf\nimport mp_optimizer\n\n"
              "opt = mp_optimizer.LossScaleOptimizer(opt, manager)\n")


class VendoredTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, self.dir)
    shutil.copytree(VENDORED, self.dir, dirs_exist_ok=True)
    # The project's own code; `examples/tensorflow/` is a folder of
    # examples, not TensorFlow (no python/ or contrib/ below it, no package).
    for name in ("train.py", "examples/tensorflow/train.py"):
      (self.dir / name).parent.mkdir(parents=True, exist_ok=True)
      (self.dir / name).write_text(_LEGACY)

  def run_main(self, *argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      status = migrate.main([*argv, str(self.dir)])
    return status, out.getvalue(), err.getvalue().splitlines()

  def test_tensorflow_sources_are_skipped_and_said_to_be(self):
    status, out, err = self.run_main("--in-place")
    self.assertEqual(err, [
        f"{self.dir}/installed/tensorflow: TensorFlow's own sources (2 files): "
        "skipped, not converted",
        f"{self.dir}/third_party/tensorflow: TensorFlow's own sources (2 "
        "files): skipped, not converted",
        "mp-optimizer-migrate: 2 files scanned, 2 changed, 0 findings, "
        "0 notices, 0 errors, 4 skipped"])
    self.assertEqual((status, out), (0, (
        f"rewrote {self.dir}/train.py\n"
        f"rewrote {self.dir}/examples/tensorflow/train.py\n")))
    compared = filecmp.dircmp(VENDORED, self.dir)
    self.assertEqual(compared.left_only, [])
    for name in ("installed", "third_party"):
      self.assertEqual(_differences(compared.subdirs[name]), [])
    self.assertEqual((self.dir / "train.py").read_text(), _CONVERTED)
    self.assertEqual((self.dir / "examples/tensorflow/train.py").read_text(),
                     _CONVERTED)

  def test_a_file_named_inside_them_is_skipped_too(self):
    path = (self.dir / "third_party/tensorflow/python/training/experimental/"
            "loss_scale_optimizer.py")
    before = path.read_bytes()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      status = migrate.main([str(path)])
    self.assertEqual((status, out.getvalue()), (0, ""))
    self.assertEqual(err.getvalue().splitlines(), [
        f"{self.dir}/third_party/tensorflow: TensorFlow's own sources (1 "
        "files): skipped, not converted",
        "mp-optimizer-migrate: 0 files scanned, 0 to change, 0 findings, "
        "0 notices, 0 errors, 1 skipped"])
    self.assertEqual(path.read_bytes(), before)


def _differences(compared: filecmp.dircmp):
  """Files that differ, or exist on one side only, anywhere below."""
  found = compared.diff_files + compared.left_only + compared.right_only
  for sub in compared.subdirs.values():
    found += _differences(sub)
  return found
