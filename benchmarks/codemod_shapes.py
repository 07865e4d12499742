"""`mp-optimizer-migrate` on hostile shapes: linear, or refused in time.

    python benchmarks/codemod_shapes.py [--size 5000000] [--only SHAPE]

Each shape is a generated file of about `--size` characters that uses the
legacy API (so that it is converted, not filtered out), run through the
command line in a fresh interpreter (`--jobs 1`, diff mode, output thrown
away), as `benchmarks/codemod_speed.py` does. The table gives the shape, the
file's size, wall seconds, the peak memory of the command and the outcome:
`converted` (exit 0), or the first line the command printed to stderr, such
as a "too large/deep to convert safely" finding (exit 1). Target: every
shape at 5 MB in < 30 s and < 1 GiB.

* `function`: one function that wraps its optimizer with contrib's
  LossScaleOptimizer, followed by ordinary model code (`x = f(x)` again
  and again, with fresh names besides);
* `four_lines`: a file in four lines, the third a very long line of
  `;`-joined statements;
* `four_lines_legacy`: the same with a legacy call on the long line;
* `elif_chain`: a function with a legacy call and a long `elif` chain;
* `elif_chain_legacy`: the same with a legacy call in the last branch;
* `parentheses`: statements nested 150 parentheses deep (Python allows 200);
* `plus_chain`: `return x0 + x1 + ...` in a function with a legacy call,
  every term a legacy name (so it has to be parsed);
* `repeated`: `x = f(x)` again and again, `x` given to the legacy call.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import codemod_speed  # pylint: disable=g-import-not-at-top

_HEAD = "import tensorflow as tf\n\n\ndef build(opt, manager, x, flag):\n"
_WRAP = "  opt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, manager)\n"
_LEGACY_NAME = "tf.contrib.mixed_precision.FixedLossScaleManager"


def _repeat(head: str, line: Callable[[int], str], size: int,
            tail: str = "", join: str = "") -> str:
  """`head`, then `line(0)`, `line(1)`... joined by `join` up to `size`."""
  parts, total, index = [head], len(head) + len(tail), 0
  while total < size:
    part = line(index) + join
    parts.append(part)
    total += len(part)
    index += 1
  return "".join(parts) + tail


def function(size: int) -> str:
  return _repeat(_HEAD + _WRAP, lambda i: (
      f"  h{i} = tf.compat.v1.layers.dense(x, units={i % 97 + 1}, "
      f"name='dense_{i}')\n  x = tf.nn.relu(h{i}) + x * 0.5\n"), size,
                 "  return opt, x\n")


def four_lines(size: int, legacy: bool = False) -> str:
  head = ("import tensorflow as tf\n"
          "opt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, m)\n")
  first = f"s = {_LEGACY_NAME}(8); " if legacy else ""
  return _repeat(head + first, lambda i: (
      f"v{i} = tf.constant([{i}, {i + 1}], name='c{i}')"), size,
                 "v = 0\nprint(v)\n", join="; ")


def elif_chain(size: int, legacy: bool = False) -> str:
  last = f"  else:\n    y = {_LEGACY_NAME}(8)\n" if legacy else ""
  return _repeat(_HEAD + _WRAP + "  if flag == 0:\n    y = 0\n", lambda i: (
      f"  elif flag == {i + 1}:\n    y = {i + 1}\n"), size,
                 last + "  return opt, y\n")


def parentheses(size: int, depth: int = 150) -> str:
  return _repeat(_HEAD + _WRAP, lambda i: (
      f"  y{i} = " + "(" * depth + f"x + {i}" + ")" * depth + "\n"), size,
                 "  return opt\n")


def plus_chain(size: int) -> str:
  return _repeat(_HEAD + _WRAP + f"  return {_LEGACY_NAME}", lambda i: (
      f" + {_LEGACY_NAME}"), size, "\n")


def repeated(size: int) -> str:
  return _repeat(_HEAD, lambda i: (
      f"  x = tf.compat.v1.layers.dense(x, units={i % 97 + 1})\n"), size,
                 "  opt = tf.contrib.mixed_precision.LossScaleOptimizer("
                 "opt, manager, x)\n  return opt\n")


SHAPES: Dict[str, Callable[[int], str]] = {
    "function": function,
    "four_lines": four_lines,
    "four_lines_legacy": lambda size: four_lines(size, legacy=True),
    "elif_chain": elif_chain,
    "elif_chain_legacy": lambda size: elif_chain(size, legacy=True),
    "parentheses": parentheses,
    "plus_chain": plus_chain,
    "repeated": repeated,
}

# Runs the command line, then prints its exit status, peak KiB and the
# first line of its stderr.
_RUN = ("import resource, subprocess, sys\n"
        "run = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL,\n"
        "                     stderr=subprocess.PIPE, text=True)\n"
        "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(run.returncode, usage.ru_maxrss)\n"
        "print((run.stderr.splitlines() or [''])[0])\n")


def run(path: str) -> Tuple[float, float, int, str]:
  """Converts `path` in a child: (seconds, peak MiB, exit status, outcome)."""
  argv = [sys.executable, "-m", "mp_optimizer.migrate", "--jobs", "1", path]
  start = time.perf_counter()
  out = subprocess.run([sys.executable, "-c", _RUN, *argv],
                       env=codemod_speed._env(),  # pylint: disable=protected-access
                       capture_output=True, text=True, check=True).stdout
  seconds = time.perf_counter() - start
  numbers, _, first = out.partition("\n")
  status, peak_kib = (int(n) for n in numbers.split())
  first = first.strip()
  outcome = ("converted" if status == 0 else
             first.split(": ", 1)[-1] if first else f"exit {status}")
  return seconds, peak_kib / 1024, status, outcome


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--size", type=int, default=5_000_000,
                      help="characters per file (targets are for 5,000,000)")
  parser.add_argument("--only", choices=sorted(SHAPES), action="append",
                      help="run this shape (repeatable; default: all)")
  args = parser.parse_args(argv)
  folder = tempfile.mkdtemp()
  try:
    print(f"mp-optimizer-migrate on hostile shapes ({os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}; target < 30 s, < 1024 MiB)")
    print("| shape | size | seconds | peak MiB | outcome |")
    print("|---|---|---|---|---|")
    for name in args.only or SHAPES:
      path = os.path.join(folder, f"{name}.py")
      with open(path, "w", encoding="utf-8") as f:
        f.write(SHAPES[name](args.size))
      seconds, peak, status, outcome = run(path)
      size = os.path.getsize(path)
      print(f"| {name} | {size / 1e6:.2f} MB | {seconds:.1f} | {peak:.0f} | "
            f"exit {status}: {outcome[:90]} |", flush=True)
  finally:
    shutil.rmtree(folder)


if __name__ == "__main__":
  main()
