"""The command line: finds the files, converts them, prints diffs and findings.

    mp-optimizer-migrate [--in-place] PATH...
    python -m mp_optimizer.migrate [--in-place] PATH...
"""

import argparse
import difflib
import io
import os
import sys
import tokenize
from typing import Iterator, List, Optional, Sequence

import libcst as cst

from mp_optimizer.migrate.codemod import convert

_NOT_SEARCHED = ("__pycache__", "site-packages", "dist-packages")


def _searched(root: str, directory: str) -> bool:
  """Skips hidden and cache directories, virtualenvs and installed packages."""
  return not (directory.startswith(".") or directory in _NOT_SEARCHED or
              os.path.exists(os.path.join(root, directory, "pyvenv.cfg")))


def _python_files(paths: Sequence[str], errors: List[str]) -> Iterator[str]:
  for path in paths:
    if os.path.isdir(path):
      for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if _searched(root, d))
        for name in sorted(files):
          if name.endswith(".py"):
            yield os.path.join(root, name)
    elif os.path.isfile(path):
      yield path
    else:
      errors.append(f"{path}: no such file or directory")


def _process(path: str, in_place: bool) -> int:
  """Converts one file, prints its diff and findings; returns its status."""
  try:
    with open(path, "rb") as f:
      data = f.read()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    old = data.decode(encoding)
    new, findings = convert(old)
  except OSError as e:  # A dangling link, a file gone or not readable.
    print(f"{path}: cannot read: {e.strerror or e}", file=sys.stderr)
    return 2
  except (SyntaxError, UnicodeDecodeError) as e:
    print(f"{path}:{getattr(e, 'lineno', None) or 1}: cannot read: {e}",
          file=sys.stderr)
    return 2
  except cst.ParserSyntaxError as e:
    print(f"{path}:{e.editor_line}: cannot parse: {e.message}", file=sys.stderr)
    return 2
  for finding in findings:
    print(f"{path}:{finding.line}: {finding.reason}", file=sys.stderr)
  if new != old:
    if in_place:
      try:
        with open(path, "w", encoding=encoding, newline="") as f:
          f.write(new)
      except OSError as e:
        print(f"{path}: cannot write: {e.strerror or e}", file=sys.stderr)
        return 2
      print(f"rewrote {path}")
    else:
      diff = difflib.unified_diff(old.splitlines(keepends=True),
                                  new.splitlines(keepends=True), path, path)
      sys.stdout.writelines(
          line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
          for line in diff)
  return 1 if findings else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Runs the command line.

  Args:
    argv: The arguments after the program name; None reads `sys.argv`.

  Returns:
    The exit status: 0 when nothing is left to do by hand, 1 when something
    is, 2 for bad usage or a file that cannot be read, parsed or written.
  """
  parser = argparse.ArgumentParser(
      prog="mp-optimizer-migrate",
      description=("Rewrite tf.contrib.mixed_precision and TensorFlow's "
                   "LossScale / MixedPrecisionLossScaleOptimizer / graph-rewrite "
                   "names to mp_optimizer and managers."),
      epilog=("Exit status: 0 nothing left to do by hand; 1 something needs a "
              "human (see the file:line: reason lines); 2 bad usage or a file "
              "that cannot be read, parsed or written."))
  parser.add_argument("paths", nargs="+", metavar="PATH",
                      help="a Python file or a directory to search for *.py")
  parser.add_argument("--in-place", action="store_true",
                      help="write the files instead of printing a diff")
  try:
    args = parser.parse_args(argv)
  except SystemExit as exit_:
    return 2 if exit_.code else 0
  errors: List[str] = []
  status = 0
  for path in _python_files(args.paths, errors):
    status = max(status, _process(path, args.in_place))
  for error in errors:
    print(error, file=sys.stderr)
    status = 2
  return status

