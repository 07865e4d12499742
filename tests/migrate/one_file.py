"""One file through the command line, as the tests of one option need it."""

import contextlib
import io
import os

from absl.testing import parameterized

from mp_optimizer import migrate


class OneFileTest(parameterized.TestCase):
  """Base class: `_migrate` converts one file in a fresh folder."""

  def _migrate(self, text, *options, name="model.py"):
    """Writes `text` to `name`, runs `--in-place` with `options` on it.

    Returns:
      (exit status, the file's new text, the stderr lines about the file
      without their `path:` prefix).
    """
    path = os.path.join(self.create_tempdir().full_path, name)
    with open(path, "w") as f:
      f.write(text)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), \
        contextlib.redirect_stderr(err):
      status = migrate.main(["--in-place", *options, path])
    with open(path) as f:
      converted = f.read()
    lines = [line.split(f"{path}:", 1)[1] for line in err.getvalue().splitlines()
             if line.startswith(path)]
    return status, converted, lines
