"""mp-optimizer-migrate never loses a user's edit, nor a file's owner or mode.

Each test makes real files (owners and modes set as root, the user that
runs the suite; uid 12345 stands for another user), runs the real command
line, in a child interpreter where the process itself matters, and looks
at the files afterwards.
"""

import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tempfile

from absl.testing import parameterized

ROOT = pathlib.Path(__file__).resolve().parents[2]
_LEGACY = ("import tensorflow as tf\n\n"
           "opt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, manager)\n")
_CONVERTED = ("import tensorflow as tf\nimport mp_optimizer\n\n"
              "opt = mp_optimizer.LossScaleOptimizer(opt, manager)\n")
_OTHER_USER = 12345
# The command line, in a child (as another user: its effective ids); an
# audit hook may act on the file when the
# codemod makes its temporary file, i.e. after reading and converting the
# file and before writing it: a user's edit made during the run.
_CHILD = """import os, sys
edit, user = sys.argv.pop(1), sys.argv.pop(1)
if user:  # Everything loaded first: the interpreter may be in root's home.
  import mp_optimizer.migrate.codemod, mp_optimizer.migrate.files
  os.setegid(int(user))
  os.seteuid(int(user))
done = []
def hook(event, args):
  if event == "tempfile.mkstemp" and edit and not done:
    done.append(1)
    with open(sys.argv[-1], "a") as f:
      f.write(edit)
sys.addaudithook(hook)
from mp_optimizer.migrate import main
sys.exit(main(sys.argv[1:]))
"""


def _summary(changed, errors, scanned=1, word="changed"):
  return (f"mp-optimizer-migrate: {scanned} files scanned, {changed} {word}, "
          f"0 findings, 0 notices, {errors} errors")


class WritesTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir)

  def need_root(self):
    if os.geteuid() != 0:
      self.skipTest("giving a file to another user needs root")

  def write(self, name, data):
    path = os.path.join(self.dir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
      f.write(data.encode() if isinstance(data, str) else data)
    return path

  def read(self, path):
    with open(path, "rb") as f:
      return f.read().decode()

  def run_cli(self, *argv, edit="", user=None, cwd=None):
    """Runs the command line in a child; returns (status, out, err lines)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-c", _CHILD, edit, str(user or ""), "--jobs", "1",
         *argv], env=env, capture_output=True, text=True, timeout=300,
        check=False, cwd=cwd)
    return run.returncode, run.stdout, run.stderr.splitlines()

  def test_an_edit_made_during_the_run_is_kept_and_reported(self):
    path = self.write("train.py", _LEGACY)
    edit = "print('edited while the codemod ran')\n"
    status, out, err = self.run_cli("--in-place", path, edit=edit)
    self.assertEqual((status, out), (2, ""))
    self.assertEqual(err, [
        f"{path}: changed since it was read: not written; run again",
        _summary(0, 1)])
    self.assertEqual(self.read(path), _LEGACY + edit)
    self.assertEqual(os.listdir(self.dir), ["train.py"])  # No temporary left.

  @parameterized.named_parameters(
      ("read_only_refused", 0o444, 2, "", [
          "{}: read-only (-r--r--r--): not written; make it writable to "
          "convert it", _summary(0, 1)], _LEGACY),
      ("writable_converted", 0o664, 0, "rewrote {}\n", [_summary(1, 0)],
       _CONVERTED))
  def test_file_of_another_user_keeps_owner_and_mode(self, mode, status, out,
                                                     err, text):
    self.need_root()
    path = self.write("train.py", _LEGACY)
    os.chown(path, _OTHER_USER, _OTHER_USER)
    os.chmod(path, mode)
    self.assertEqual(self.run_cli("--in-place", path),
                     (status, out.format(path), [e.format(path) for e in err]))
    self.assertEqual(self.read(path), text)
    info = os.stat(path)
    self.assertEqual((info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)),
                     (_OTHER_USER, _OTHER_USER, mode))

  def test_owner_that_cannot_be_kept_is_refused(self):
    self.need_root()
    # Run as another user, on a file anyone may write: the new file would
    # belong to the runner, so it is not written. The folder sits in /tmp,
    # which every user may enter (a TMPDIR made by `mktemp -d` is root's
    # alone, and the other user could not reach the file).
    self.dir = tempfile.mkdtemp(dir="/tmp")
    self.addCleanup(shutil.rmtree, self.dir)
    os.chmod(self.dir, 0o777)
    path = self.write("train.py", _LEGACY)
    os.chmod(path, 0o666)
    status, _, err = self.run_cli("--in-place", path, user=_OTHER_USER)
    self.assertEqual((status, err), (2, [
        f"{path}: cannot keep its owner (uid 0, gid 0): not written; run as "
        "its owner (or root) to convert it", _summary(0, 1)]))
    self.assertEqual(self.read(path), _LEGACY)
    self.assertEqual(os.stat(path).st_uid, 0)
    self.assertEqual(os.listdir(self.dir), ["train.py"])

  def test_a_link_and_its_target_give_one_diff_that_patch_applies(self):
    real = self.write("pkg/train.py", _LEGACY)
    os.symlink(os.path.join("pkg", "train.py"),
               os.path.join(self.dir, "alias.py"))
    status, out, err = self.run_cli(".", cwd=self.dir)
    self.assertEqual((status, err), (0, [_summary(1, 0, word="to change")]))
    self.assertEqual([line for line in out.splitlines()
                      if line.startswith("+++ ")], ["+++ ./pkg/train.py"])
    patched = subprocess.run(["patch", "-p0"], input=out, text=True,
                             cwd=self.dir, capture_output=True, check=False)
    self.assertEqual(patched.returncode, 0, patched.stdout + patched.stderr)
    self.assertEqual(self.read(real), _CONVERTED)
    self.assertTrue(os.path.islink(os.path.join(self.dir, "alias.py")))

  @parameterized.named_parameters(("utf_8", b""),
                                  ("utf_8_with_a_byte_order_mark", b"\xef\xbb\xbf"))
  def test_decode_error_names_the_line_of_the_bad_byte(self, mark):
    path = self.write("train.py", mark + _LEGACY.encode() +
                      b"name = 'r\xe9sum\xe9'\n")
    status, _, err = self.run_cli(path)
    self.assertEqual((status, err), (2, [
        f"{path}:4: cannot read: byte 0xe9 is not valid utf-8 (invalid "
        "continuation byte)", _summary(0, 1, word="to change")]))

  @parameterized.named_parameters(("utf_16", "utf-16"),
                                  ("utf_16_le_no_mark", "utf-16-le"),
                                  ("utf_32", "utf-32"))
  def test_text_python_cannot_read_is_reported(self, encoding):
    path = self.write("train.py", _LEGACY.encode(encoding))
    status, _, err = self.run_cli("--in-place", path)
    self.assertEqual((status, err), (2, [
        f"{path}: cannot read: NUL bytes (UTF-16 or UTF-32 text?), which "
        "Python source cannot hold: save it as UTF-8, then run again",
        _summary(0, 1)]))
    self.assertEqual(self.read_bytes(path), _LEGACY.encode(encoding))

  def read_bytes(self, path):
    with open(path, "rb") as f:
      return f.read()
