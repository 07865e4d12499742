"""mp-optimizer-migrate's command line: files, output, exit status, speed.

Each test writes files into a fresh folder and runs `main()` (or, where the
process itself matters, a child interpreter). The command line
starts without TensorFlow (tests/test_migrate_startup.py).
"""

import contextlib
import io
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import tomllib

from absl.testing import parameterized

from mp_optimizer import migrate

ROOT = pathlib.Path(__file__).resolve().parents[2]
TF = "import tensorflow as tf\n"
_SCALE_OPT = ("opt = tf.contrib.mixed_precision.LossScaleOptimizer("
              "opt, manager)\n")
_LEGACY = TF + "\n" + _SCALE_OPT
_CONVERTED = TF + "import mp_optimizer\n\n" + (
    "opt = mp_optimizer.LossScaleOptimizer(opt, manager)\n")


def _env():
  """The environment for a child that must import this checkout."""
  return dict(os.environ, PYTHONPATH=os.pathsep.join(
      [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))


class _Terminal(io.StringIO):
  """stderr as a terminal: the progress line is drawn there."""

  def isatty(self):
    return True


class CommandLineTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir)

  def write(self, name, text, mode="w", **kwargs):
    path = os.path.join(self.dir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode, **kwargs) as f:
      f.write(text)
    return path

  def read(self, path):
    with open(path, newline="") as f:
      return f.read()

  def run_main(self, *argv, out_encoding="utf-8", err=None):
    """Runs main(argv); returns (status, stdout decoded, stderr).

    stderr's last line, the run's summary, is kept apart in `self.summary`.
    """
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8", newline="")
    err = io.StringIO() if err is None else err
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      status = migrate.main(list(argv))
    out.flush()
    self.raw_err = err.getvalue()
    text, _, self.summary = self.raw_err[:-1].rpartition("\n")
    if " files scanned, " not in self.summary:
      text, self.summary = err.getvalue(), None  # Bad usage: no summary.
    elif text:
      text += "\n"
    return status, raw.getvalue().decode(out_encoding), text

  def test_dangling_link_exit_2_and_the_others_are_processed(self):
    dangling = os.path.join(self.dir, "a.py")
    os.symlink(os.path.join(self.dir, "gone.py"), dangling)
    good = self.write("b.py", _LEGACY)
    status, _, err = self.run_main("--in-place", self.dir)
    self.assertEqual((status, err),
                     (2, f"{dangling}: cannot read: No such file or directory\n"))
    self.assertEqual(self.read(good), _CONVERTED)

  def test_prints_a_diff_and_leaves_the_file(self):
    path = self.write("train.py", _LEGACY)
    status, out, err = self.run_main(path)
    self.assertEqual((status, err), (0, ""))
    self.assertTrue(out.startswith(f"--- {path}\n+++ {path}\n@@ "), out)
    self.assertIn("\n+import mp_optimizer\n", out)
    self.assertIn("\n-" + _SCALE_OPT, out)
    self.assertIn("\n+opt = mp_optimizer.LossScaleOptimizer(opt, manager)\n",
                  out)
    self.assertEqual(self.read(path), _LEGACY)

  def test_in_place_then_nothing_left(self):
    path = self.write("train.py", _LEGACY)
    self.assertEqual(self.run_main("--in-place", path),
                     (0, f"rewrote {path}\n", ""))
    self.assertEqual(self.read(path), _CONVERTED)
    self.assertEqual(self.run_main(path), (0, "", ""))

  def test_findings_exit_1_and_the_rest_is_converted(self):
    path = self.write("train.py", _LEGACY + "m = opt._loss_scale_manager\n")
    status, _, err = self.run_main("--in-place", path)
    self.assertEqual(status, 1)
    self.assertEqual(err.splitlines(), [
        f"{path}:4: `opt._loss_scale_manager` is private to the legacy class "
        "and the replacement has no such attribute; use `.loss_scale_manager`"])
    self.assertEqual(self.read(path),
                     _CONVERTED + "m = opt._loss_scale_manager\n")

  @parameterized.named_parameters(
      # Python's own line and message; libcst's parser names other lines.
      ("bracket_never_closed", "x = 1\nopt = (\n\n\n", 2,
       "'(' was never closed"),
      ("bad_indent", "def f():\n  x = 1\n    y = 2\n\n", 3,
       "unexpected indent"))
  def test_unparsable_file_exit_2_and_the_others_are_processed(
      self, text, line, message):
    bad = self.write("bad.py", "import tensorflow.contrib.mixed_precision\n" +
                     text)
    good = self.write("good.py", _LEGACY)
    status, _, err = self.run_main("--in-place", bad, good)
    self.assertEqual((status, err),
                     (2, f"{bad}:{line + 1}: cannot parse: {message}\n"))
    self.assertEqual(self.read(good), _CONVERTED)

  def test_a_file_that_names_no_legacy_api_is_not_parsed(self):
    # Bytes that are not valid Python, nor valid UTF-8: never looked at.
    path = self.write("model.py", b"def f(:\n  return '\xff'\n", "wb")
    self.assertEqual(self.run_main("--in-place", path), (0, "", ""))

  @parameterized.named_parameters(("fifo", os.mkfifo), ("device", None))
  def test_non_regular_files_are_skipped_with_a_message(self, make):
    if make is None:
      path = os.path.join(self.dir, "null.py")
      os.symlink(os.devnull, path)
    else:
      path = os.path.join(self.dir, "pipe.py")
      make(path)
    good = self.write("good.py", _LEGACY)
    status, _, err = self.run_main("--in-place", self.dir)
    kind = "p" if make else "c"
    self.assertEqual((status, err), (2, f"{path}: cannot read: not a regular "
                                         f"file ({kind}): skipped\n"))
    self.assertEqual(self.read(good), _CONVERTED)

  def test_failed_write_leaves_the_file_whole(self):
    # The converted file is longer than the legacy one; a file-size limit
    # between the two makes the write fail half-way.
    path = self.write("train.py", _LEGACY)
    limit = len(_LEGACY.encode()) + 1
    self.assertGreater(len(_CONVERTED.encode()), limit)
    code = ("import resource, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
            "from mp_optimizer.migrate import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    run = subprocess.run([sys.executable, "-c", code, "--in-place", path],
                         env=_env(), capture_output=True, text=True,
                         timeout=300, check=False)
    self.assertEqual((run.returncode, run.stdout, run.stderr),
                     (2, "", f"{path}: cannot write: File too large\n"
                      "mp-optimizer-migrate: 1 files scanned, 0 changed, "
                      "0 findings, 0 notices, 1 errors\n"))
    self.assertEqual(self.read(path), _LEGACY)
    self.assertEqual(os.listdir(self.dir), ["train.py"])  # No temporary left.

  def test_in_place_keeps_permissions_and_links(self):
    real = self.write("real/train.py", _LEGACY)
    os.chmod(real, 0o750)
    link = os.path.join(self.dir, "train.py")
    os.symlink(real, link)
    self.assertEqual(self.run_main("--in-place", link)[0], 0)
    self.assertTrue(os.path.islink(link))
    self.assertEqual(self.read(real), _CONVERTED)
    self.assertEqual(os.stat(real).st_mode & 0o777, 0o750)

  @parameterized.named_parameters(
      ("no_path", []), ("unknown_option", ["--fast", "x.py"]))
  def test_bad_usage_exit_2(self, argv):
    status, _, err = self.run_main(*argv)
    self.assertEqual(status, 2)
    self.assertIn("usage: mp-optimizer-migrate", err)

  def test_missing_path_exit_2_and_the_others_are_processed(self):
    good = self.write("good.py", _LEGACY)
    missing = os.path.join(self.dir, "missing.py")
    status, _, err = self.run_main("--in-place", missing, good)
    self.assertEqual((status, err), (2, f"{missing}: no such file or directory\n"))
    self.assertEqual(self.read(good), _CONVERTED)

  def test_directories_are_searched_but_not_hidden_or_installed_code(self):
    top = self.write("a.py", _LEGACY)
    nested = self.write("pkg/b.py", _LEGACY)
    untouched = [self.write(".git/c.py", _LEGACY),
                 self.write("pkg/notes.txt", _LEGACY),
                 self.write("env/lib/site-packages/tf.py", _LEGACY),
                 self.write("venv/lib/d.py", _LEGACY)]
    self.write("venv/pyvenv.cfg", "home = /usr/bin\n")
    status, out, _ = self.run_main("--in-place", self.dir)
    self.assertEqual((status, out), (0, f"rewrote {top}\nrewrote {nested}\n"))
    self.assertEqual([self.read(p) for p in [top, nested] + untouched],
                     [_CONVERTED] * 2 + [_LEGACY] * 4)

  def test_diff_of_a_latin_1_file_is_in_latin_1(self):
    legacy = "# -*- coding: latin-1 -*-\n# r\xe9sum\xe9\n" + _LEGACY
    path = self.write("latin.py", legacy, "w", encoding="latin-1")
    status, out, err = self.run_main(path, out_encoding="latin-1")
    self.assertEqual((status, err), (0, ""))
    self.assertIn(" # r\xe9sum\xe9\n import tensorflow as tf\n"
                  "+import mp_optimizer\n", out)
    patched = subprocess.run(["patch", "-p0", "--dry-run"], input=out.encode(
        "latin-1"), cwd="/", capture_output=True, check=False)
    self.assertEqual(patched.returncode, 0, patched.stderr)

  @parameterized.named_parameters(("jobs_1", "1"), ("jobs_2", "2"))
  def test_output_in_file_order_whatever_the_jobs(self, jobs):
    paths = [self.write(f"m{i}/train.py", _LEGACY) for i in range(6)]
    status, out, _ = self.run_main("--jobs", jobs, self.dir)
    self.assertEqual(status, 0)
    headers = [line[4:] for line in out.splitlines() if line.startswith("+++")]
    self.assertEqual(headers, paths)

  @parameterized.named_parameters(
      ("one_hundred_files", 100, ""),
      ("one_hundred_and_one", 101,
       "\r\x1b[Kmp-optimizer-migrate: 1/101 files"))
  def test_progress_on_a_terminal_for_big_trees(self, count, first):
    for i in range(count):
      self.write(f"zoo/m{i:03d}.py", "import numpy as np\n")
    status, _, _ = self.run_main(self.dir, err=_Terminal())
    self.assertEqual(status, 0)
    self.assertTrue(self.raw_err.startswith(first), self.raw_err[:80])
    if first:  # Cleared before the summary, never left on its line.
      self.assertIn(f"{count}/{count} files\r\x1b[Kmp-optimizer-migrate: "
                    f"{count} files scanned", self.raw_err)

  def test_no_progress_in_a_log_and_findings_one_a_line(self):
    for i in range(150):
      self.write(f"zoo/m{i:03d}.py", "import numpy as np\n")
    self.write("zoo/m075.py", TF + "\nx = opt._loss_scale_manager\n"
               "m = tf.contrib.mixed_precision.FixedLossScaleManager(8)\n")
    status, _, err = self.run_main(self.dir)
    self.assertEqual(status, 1)
    self.assertEqual(len(err.splitlines()), 1)
    self.assertIn("m075.py:3: `opt._loss_scale_manager` is private", err)
    self.assertEqual(self.summary, "mp-optimizer-migrate: 150 files scanned, "
                     "1 to change, 1 findings, 0 notices, 0 errors")

  @parameterized.named_parameters(("diff", [], "to change"),
                                  ("in_place", ["--in-place"], "changed"))
  def test_every_run_ends_with_a_summary(self, argv, changed):
    self.write("a.py", _LEGACY)
    self.write("b.py", "import numpy as np\n")
    self.write("c.py", TF + "tf.train.experimental.FixedLossScale(8)\n")
    self.write("d.py", TF + "x = tf.contrib.mixed_precision.(\n")
    status, _, _ = self.run_main(*argv, self.dir, os.path.join(self.dir, "e"))
    self.assertEqual(status, 2)
    self.assertEqual(self.summary, "mp-optimizer-migrate: 4 files scanned, "
                     f"2 {changed}, 0 findings, 1 notices, 2 errors")

  def test_bad_jobs_exit_2(self):
    self.assertEqual(self.run_main("--jobs", "0", self.dir),
                     (2, "", "mp-optimizer-migrate: --jobs must be >= 1, got 0\n"))

  def test_encoding_and_line_endings_are_kept(self):
    legacy = "# -*- coding: latin-1 -*-\n# r\xe9sum\xe9\n" + _LEGACY
    path = self.write("latin.py", legacy.replace("\n", "\r\n"), "w",
                      encoding="latin-1", newline="")
    self.assertEqual(self.run_main("--in-place", path)[0], 0)
    with open(path, "rb") as f:
      written = f.read()
    expected = "# -*- coding: latin-1 -*-\n# r\xe9sum\xe9\n" + _CONVERTED
    self.assertEqual(written, expected.replace("\n", "\r\n").encode("latin-1"))

  def test_console_script_is_declared(self):
    with open(ROOT / "pyproject.toml", "rb") as f:
      project = tomllib.load(f)["project"]
    self.assertEqual(project["scripts"],
                     {"mp-optimizer-migrate": "mp_optimizer.migrate:main"})
    libcst, = [r for r in project["dependencies"] if r.startswith("libcst")]
    self.assertEqual(set(libcst[len("libcst"):].split(",")), {">=1.1", "<2"})
