"""The command line: finds the files, converts them, prints diffs and findings.

    mp-optimizer-migrate [--in-place] [--jobs N] [--precision P] PATH...
    python -m mp_optimizer.migrate [--in-place] [--jobs N] [--precision P] PATH...

A file that cannot refer to the legacy API is never parsed
(`mentions.might_use_legacy`); the rest are converted by up to `--jobs`
worker processes, and their output is printed in file order. Every run ends
with one summary line on stderr: files scanned, changed, findings, notices,
errors. Trees of more than 100 files show a progress line on a terminal's
stderr, redrawn in place and cleared before anything else is printed; in a
log there is none, so findings stay one a line.
"""

import argparse
import concurrent.futures
import multiprocessing
import os
import sys
from typing import List, Optional, Sequence, TextIO

from mp_optimizer.migrate import files
from mp_optimizer.migrate import selection

# Fewer files than this to convert are not worth starting workers for.
_PARALLEL_FROM = 4
PROGRESS_FROM = 101  # Trees of this many files or more show progress.


class _Progress:
  """`mp-optimizer-migrate: done/total files` on a terminal's stderr.

  Shown for big trees only, redrawn in place and cleared before any other
  message, so that it never shares a line with a finding.
  """

  def __init__(self, total: int, stream: TextIO):
    self._total, self._stream = total, stream
    self._tty = total >= PROGRESS_FROM and stream.isatty()

  def update(self, done: int) -> None:
    if self._tty:
      self._stream.write(
          f"\r\x1b[Kmp-optimizer-migrate: {done}/{self._total} files")
      self._stream.flush()

  def clear(self) -> None:
    if self._tty:
      self._stream.write("\r\x1b[K")


def _unreadable(path: str, error: OSError) -> files.Result:
  return files.Result(2, err=[f"{path}: cannot read: {error.strerror or error}"])


def _skip(path: str, options: files.Options) -> Optional[files.Result]:
  """The result for a file that needs no parsing, or None if it does."""
  try:
    data = files.read(path)
  except OSError as e:  # Gone, unreadable, a dangling link, a FIFO.
    return _unreadable(path, e)
  if b"\0" in data:  # UTF-16 or UTF-32: the filter cannot see through it.
    return files.not_text(path)
  return None if files.wanted(data, options) else files.Result()


def _convert(path: str, in_place: bool, options: files.Options) -> files.Result:
  try:
    data = files.read(path)
  except OSError as e:
    return _unreadable(path, e)
  return files.process(path, data, in_place, options)


def _print(result: files.Result, progress: _Progress) -> None:
  if result.err:
    progress.clear()
  for line in result.err:
    print(line, file=sys.stderr)
  if result.out:
    stdout = sys.stdout
    if hasattr(stdout, "buffer"):  # Bytes: a diff in the file's encoding.
      stdout.flush()
      stdout.buffer.write(result.out)
      stdout.buffer.flush()
    else:
      stdout.write(result.out.decode("utf-8", errors="replace"))


def _run(paths: List[str], in_place: bool, jobs: int,
         options: files.Options = files.Options()) -> List[files.Result]:
  progress = _Progress(len(paths), sys.stderr)
  ready = [_skip(path, options) for path in paths]
  todo = [path for path, result in zip(paths, ready) if result is None]
  results = []
  with _pool(jobs, len(todo)) as pool:
    pending = {path: pool.submit(_convert, path, in_place, options)
               for path in todo}
    for done, (path, result) in enumerate(zip(paths, ready), 1):
      if result is None:
        result = pending[path].result()
      _print(result, progress)
      results.append(result)
      progress.update(done)
  progress.clear()
  return results


def summary(results: List[files.Result], in_place: bool, errors: int,
            skipped: int = 0) -> str:
  """The run's last line: files scanned, changed, findings, notices, errors
  (and TensorFlow's own sources skipped, if any)."""
  changed = sum(r.changed for r in results)
  return (f"mp-optimizer-migrate: {len(results)} files scanned, {changed} "
          f"{'changed' if in_place else 'to change'}, "
          f"{sum(r.findings for r in results)} findings, "
          f"{sum(r.notices for r in results)} notices, "
          f"{errors + sum(r.status == 2 for r in results)} errors" +
          (f", {skipped} skipped" if skipped else ""))


def _pool(jobs: int, files_to_convert: int):
  """Worker processes, or `_Serial` when there is too little to share out.

  Workers come from a fork server (started clean, with the codemod already
  imported), never forked from this process, which may hold other threads'
  locks (a test run that imported TensorFlow).
  """
  if jobs < 2 or files_to_convert < _PARALLEL_FROM:
    return _Serial()
  context = multiprocessing.get_context("forkserver")
  context.set_forkserver_preload(["mp_optimizer.migrate.codemod"])
  return concurrent.futures.ProcessPoolExecutor(
      min(jobs, files_to_convert), mp_context=context)


class _Serial:
  """An executor that runs each call when its result is asked for."""

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    return False

  def submit(self, fn, *args):
    return _Call(fn, args)


class _Call:

  def __init__(self, fn, args):
    self._fn, self._args = fn, args

  def result(self):
    return self._fn(*self._args)


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
      epilog=("Exit status: 0 nothing left to do by hand (notices may be "
              "printed); 1 something needs a human (see the file:line: reason "
              "lines); 2 bad usage or a file that cannot be read, parsed or "
              "written."))
  parser.add_argument("paths", nargs="+", metavar="PATH",
                      help="a Python file or a directory to search for *.py")
  parser.add_argument("--in-place", action="store_true",
                      help="write the files instead of printing a diff")
  parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                      metavar="N", help="worker processes (default: one per "
                      "CPU; 1 converts in this process)")
  parser.add_argument("--horovod", action="store_true",
                      help="also map `import horovod.tensorflow as hvd` to "
                      "mp_optimizer.horovod and report what cannot be mapped")
  parser.add_argument("--precision", choices=("float16", "bfloat16"),
                      default="float16", help="bfloat16: also switch the "
                      "code to the bfloat16 mode (bfloat16 dtypes, "
                      "managers.NoLossScale(keep_state_of=<the manager>); "
                      "docs: bfloat16)")
  try:
    args = parser.parse_args(argv)
  except SystemExit as exit_:
    return 2 if exit_.code else 0
  if args.jobs < 1:
    print(f"mp-optimizer-migrate: --jobs must be >= 1, got {args.jobs}",
          file=sys.stderr)
    return 2
  errors: List[str] = []
  paths, vendored = selection.select(list(files.python_files(args.paths,
                                                              errors)))
  for root, count in vendored.items():
    print(f"{root}: TensorFlow's own sources ({count} files): skipped, not "
          "converted", file=sys.stderr)
  results = _run(paths, args.in_place, args.jobs,
                 files.Options(horovod=args.horovod, precision=args.precision))
  status = max([r.status for r in results] + [2 if errors else 0])
  for error in errors:
    print(error, file=sys.stderr)
  print(summary(results, args.in_place, len(errors), sum(vendored.values())),
        file=sys.stderr)
  return status
