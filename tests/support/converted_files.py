"""Legacy files converted by the command line, for tests that then run them.

`ConvertedFilesTest` copies `NAMES` from `SOURCE` into a temporary folder
once per class and runs `python -m mp_optimizer.migrate --in-place` on it;
`run` starts a program with this checkout importable, `load` imports a
converted file.
"""

import importlib.util
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Iterable, Tuple

from absl.testing import parameterized

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(argv, timeout: float = 900) -> Tuple[int, str, str]:
  """Runs `argv` with this checkout importable; kills its process group if it
  outlives `timeout` seconds. Returns (status, stdout, stderr)."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONDONTWRITEBYTECODE="1",
             PYTHONPATH=os.pathsep.join(
                 [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
  proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env=env, start_new_session=True)
  try:
    out, err = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    raise AssertionError(f"{argv} still running after {timeout} s; killed")
  return proc.returncode, out, err


def load(path: pathlib.Path, name: str):
  """Imports the file at `path` as a module called `name`."""
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


class ConvertedFilesTest(parameterized.TestCase):
  """Base class: `dir` holds the converted copies, `migrate` the run's
  (status, stdout, stderr but its last line), `summary` that line."""

  SOURCE: pathlib.Path
  NAMES: Iterable[str] = ()

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dir = pathlib.Path(tempfile.mkdtemp())
    for name in cls.NAMES:
      shutil.copy(cls.SOURCE / name, cls.dir)
    status, out, err = run([sys.executable, "-m", "mp_optimizer.migrate",
                            "--in-place", str(cls.dir)])
    # The run's last line is its summary; the findings come before it.
    err, _, cls.summary = err.rstrip("\n").rpartition("\n")
    cls.migrate = (status, out, err + "\n" if err else "")

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.dir)
    super().tearDownClass()

  def converted(self, name: str):
    """Imports the converted copy of `name`."""
    return load(self.dir / name, "converted_" + name[:-3])
