"""mp-optimizer-migrate starts without TensorFlow, from both entry points.

Checked in a fresh interpreter run with `-X importtime`, which lists every
module imported.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from absl.testing import parameterized

ROOT = pathlib.Path(__file__).resolve().parents[2]
_LEGACY = ("import tensorflow as tf\n\n"
           "opt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, manager)\n")


def _env():
  """The environment for a child that must import this checkout."""
  return dict(os.environ, PYTHONPATH=os.pathsep.join(
      [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))


# How each entry point starts the command line: `python -m`, and what the
# wrapper pip writes for the console script does.
ENTRY_POINTS = {
    "module": ["-m", "mp_optimizer.migrate"],
    "console_script": ["-c", "import sys; from mp_optimizer.migrate import "
                       "main; sys.exit(main())"],
}
# action -> (its arguments, text its stdout must contain, modules it must
# import: libcst only when a file needs parsing). Each runs in a directory
# that holds a legacy train.py.
ACTIONS = {
    "help": (["--help"], "usage: mp-optimizer-migrate",
             {"mp_optimizer.migrate.cli"}),
    "diff": (["train.py"], "\n+opt = mp_optimizer.LossScaleOptimizer(",
             {"mp_optimizer.migrate.cli", "libcst"}),
}
# Top-level packages that are TensorFlow or import it.
_WITH_TENSORFLOW = frozenset({"tensorflow", "keras", "tf_keras", "managers"})


def _env():
  """The environment for a child that must import this checkout."""
  return dict(os.environ, PYTHONPATH=os.pathsep.join(
      [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))


def _split_importtime(stderr):
  """Splits a `python -X importtime` stderr: (modules imported, other text)."""
  modules, other = set(), []
  for line in stderr.splitlines():
    if line.startswith("import time:"):
      modules.add(line.rpartition("|")[2].strip())
    else:
      other.append(line)
  return modules, "\n".join(other)


def _migrate(directory, entry_point, argv):
  """Runs the command line in `directory`: (its run, modules imported, the
  rest of its stderr)."""
  # The child starts no process of its own; on timeout run() kills it.
  run = subprocess.run(
      [sys.executable, "-X", "importtime", *ENTRY_POINTS[entry_point], *argv],
      cwd=directory, env=_env(), capture_output=True, text=True, timeout=300,
      check=False)
  return (run, *_split_importtime(run.stderr))


class NoTensorFlowTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("module_help", "module", "help"),
      ("module_diff", "module", "diff"),
      ("console_script_help", "console_script", "help"),
      ("console_script_diff", "console_script", "diff"))
  def test_command_line_does_not_import_tensorflow(self, entry_point, action):
    directory = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, directory)
    with open(os.path.join(directory, "train.py"), "w") as f:
      f.write(_LEGACY)
    argv, shown, needed = ACTIONS[action]
    run, imported, errors = _migrate(directory, entry_point, argv)
    self.assertEqual(run.returncode, 0, errors)
    self.assertIn(shown, run.stdout)
    self.assertContainsSubset(needed, imported)
    self.assertEmpty({m.split(".")[0] for m in imported} & _WITH_TENSORFLOW)
    # Nothing of the package but the codemod may load.
    self.assertEmpty([m for m in imported if m.startswith("mp_optimizer.") and
                      not m.startswith("mp_optimizer.migrate")])


class FilterTest(parameterized.TestCase):
  """A file the text filter turns away is never parsed: libcst never loads."""

  @parameterized.named_parameters(
      ("tensorflow", "import tensorflow as tf\n\nx = tf.constant(1.0)\n"),
      ("openseq2seq_without_loss_scaling",
       "from open_seq2seq.models import Text2Text\n\n"
       "base_params = {\"dtype\": \"float32\"}\n"))
  def test_a_file_with_nothing_to_convert_loads_no_libcst(self, source):
    directory = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, directory)
    with open(os.path.join(directory, "train.py"), "w") as f:
      f.write(source)
    run, imported, errors = _migrate(directory, "module", ["train.py"])
    self.assertEqual(run.returncode, 0, errors)
    self.assertEqual(run.stdout, "")
    # The filters ran (OpenSeq2Seq's among them), and parsed nothing.
    self.assertContainsSubset({"mp_optimizer.migrate.mentions",
                               "mp_optimizer.migrate.openseq2seq.api"},
                              imported)
    self.assertEmpty(sorted(m for m in imported if m.split(".")[0] == "libcst"))
