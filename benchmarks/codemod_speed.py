"""How fast `mp-optimizer-migrate` goes through big files and whole trees.

    python benchmarks/codemod_speed.py [--repeat 1] [--jobs N] [--only CASE]
        [--scale 1]

It writes its own inputs (`benchmarks/zoo.py`) into a temporary folder (no
network) and times the command line in a fresh interpreter, as a user runs
it (diff mode, stdout thrown away), reporting wall time, peak memory (the
largest process), and the CPU time of the same work in one process
(`--jobs 1`; what a busy machine does not inflate):

* `file`: one 50,000-line module that uses no legacy API (a long generated
  model file: layers, configs, input pipelines), target < 1 s;
* `big`: one 5 MB module that does use it: the same code with, every 100
  blocks, a function that builds its optimizer through
  `tf.contrib.mixed_precision` or the TF graph rewrite, and a subclass of
  contrib's manager; target < 10 s and < 500 MiB;
* `tree`: 10,000 files in the shape of the public GPU/NPU model zoos: many
  models, each with model, data, utility, training and launcher files;
  half start with an NPU toolkit's star import, one in 30 builds its
  optimizer through the legacy API (2-3 % of files in the zoos measured),
  one in 50 sets NVIDIA's `TF_ENABLE_AUTO_MIXED_PRECISION`, one in 40 has a
  hand-written float32 getter; target < 120 s on 2 cores.

Targets are printed next to the numbers; nothing here fails a build.
`--scale` multiplies every case's size (a smoke run uses 0.001).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Run as a script, this file's folder is on sys.path, not the repository
# root that holds the `benchmarks` package.
sys.path.insert(0, ROOT)

from benchmarks import zoo  # pylint: disable=g-import-not-at-top


def _env():
  return dict(os.environ, PYTHONPATH=os.pathsep.join(
      [ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))


def time_command(paths: List[str],
                 extra: List[str]) -> Tuple[float, float, float, int]:
  """Runs the command line on `paths`.

  Returns:
    (wall seconds, CPU seconds of the command and its workers, peak MiB of
    the largest of them, exit status).
  """
  env = _env()
  code = ("import resource, subprocess, sys\n"
          "run = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL,\n"
          "                     stderr=subprocess.DEVNULL)\n"
          "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
          "print(run.returncode, usage.ru_maxrss,\n"
          "      usage.ru_utime + usage.ru_stime)\n")
  argv = [sys.executable, "-m", "mp_optimizer.migrate", *extra, *paths]
  start = time.perf_counter()
  out = subprocess.run([sys.executable, "-c", code, *argv], env=env,
                       capture_output=True, text=True, check=True).stdout
  seconds = time.perf_counter() - start
  status, peak_kib, cpu = out.split()
  return seconds, float(cpu), int(peak_kib) / 1024, int(status)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--repeat", type=int, default=1,
                      help="runs per case; the fastest is reported")
  parser.add_argument("--jobs", type=int, default=None,
                      help="passed on as --jobs (default: the command's own)")
  parser.add_argument("--only", choices=["file", "big", "tree"],
                      default=None, help="run one of the cases")
  parser.add_argument("--scale", type=float, default=1.0,
                      help="multiplies the cases' sizes (targets are for 1)")
  args = parser.parse_args(argv)
  scale = args.scale
  extra = [] if args.jobs is None else ["--jobs", str(args.jobs)]
  folder = tempfile.mkdtemp()
  try:
    cases = []
    if args.only in (None, "file"):
      big, big_lines = zoo.write_big_file(folder,
                                          max(1, int(50_000 * scale)))
      cases.append((f"one file, {big_lines:,} lines, no legacy API", [big],
                    1.0))
    if args.only in (None, "big"):
      legacy, legacy_lines, uses = zoo.write_big_legacy_file(
          folder, max(1, int(5_000_000 * scale)))
      size = os.path.getsize(legacy) / 1e6
      cases.append((f"one file, {size:.1f} MB, {legacy_lines:,} lines, {uses} "
                    "definitions using the legacy API", [legacy], 10.0))
    if args.only in (None, "tree"):
      files = max(1, int(10_000 * scale))
      tree, tree_lines, legacy_files = zoo.write_zoo(
          folder, files, max(files, int(2_000_000 * scale)))
      cases.append((f"tree, {files:,} files, {tree_lines:,} lines, "
                    f"{legacy_files} with legacy API", [tree], 120.0))
    print(f"mp-optimizer-migrate speed ({os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]})")
    # Workers' CPU time is lost with the fork server that reaps them, so CPU
    # is measured on a second run in one process where the command has jobs.
    serial = ["--jobs", "1"] if "--jobs" in subprocess.run(
        [sys.executable, "-m", "mp_optimizer.migrate", "--help"], env=_env(),
        capture_output=True, text=True, check=False).stdout else []
    for label, paths, target in cases:
      runs = [time_command(paths, extra) for _ in range(args.repeat)]
      seconds, cpu, peak, status = min(runs)
      if serial:
        _, cpu, _, _ = min(time_command(paths, serial)
                           for _ in range(args.repeat))
      print(f"  {label}: {seconds:.2f} s wall, {cpu:.2f} s CPU in one "
            f"process, peak {peak:.0f} MiB, exit {status} "
            f"(target < {target:g} s wall)")
  finally:
    shutil.rmtree(folder)


if __name__ == "__main__":
  main()
