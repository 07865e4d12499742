"""Every contender against the cheapest exact skip, and on realistic models.

    python benchmarks/floor.py [--shapes many_small,wide,embedding]
        [--sizes 10,100,1000] [--inners sgd,adam] [--seconds 15]
        [--models resnet20,bert_like,wide_and_deep] [--model-seconds 60]
        [--output BENCHMARKS.md] [--smoke]

The floor (`benchmarks.exact_skips`, "switch") is the cheapest exact skip
built here. For each shape family (`shapes.with_variables`), N and inner
optimizer, bare, TF's built-in (fixed, dynamic), ours (contrib and TF2
faces, fixed and dynamic), the floor, two memory prototypes and two
contenders with a dynamic scale's least (`least_dynamic`: on the floor,
and ours with `exact_skips.LeastDynamicManager`) are built in their own
graphs and Sessions and timed in interleaved rounds (`scaling.measure`);
each is compared with the floor in the same rounds. A pool whose bare
step is short builds each contender in several Sessions and takes, per
round, the median of their times (`sessions.copies_for`). Then each model
of `benchmarks.models` with Adam, the same contenders.
Kernels per step and step memory come from FULL_TRACE `RunMetadata`
(`graph_cost.trace_step`); the 1-minute load average is printed beside
every timing. Each part writes its section of the output file
(`floor_report`) after each pool; `--shapes ''` or `--models ''` skips one.
"""

import argparse
import os
import shlex
import sys
import time
from typing import Iterator, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import mp_optimizer  # After the sys.path line above, as all below.

from benchmarks import exact_skips
from benchmarks import floor_report
from benchmarks import implementations as impls
from benchmarks import models
from benchmarks import scaling
from benchmarks import scaling_report
from benchmarks import sections
from benchmarks import sessions
from benchmarks import shapes
from benchmarks import timing

CONTENDERS = {
    "bare": ("bare", scaling.wrapped(lambda opt: opt)),
    "tf_fixed": ("TF built-in, fixed (checks nothing)",
                 scaling.wrapped(impls.BY_NAME["tf_fixed"].wrap)),
    "tf_dynamic": ("TF built-in, dynamic",
                   scaling.wrapped(impls.BY_NAME["tf_dynamic"].wrap)),
    "ours_fixed": ("ours, contrib face, fixed",
                   scaling.wrapped(impls.BY_NAME["ours_fixed"].wrap)),
    "ours_contrib": ("ours, contrib face, dynamic",
                     scaling.wrapped(impls.BY_NAME["ours_contrib"].wrap)),
    "ours_tf2_fixed": ("ours, TF2 face, fixed", scaling.wrapped(
        lambda opt: mp_optimizer.MixedPrecisionLossScaleOptimizer(
            opt, impls.INITIAL_SCALE))),
    "ours_tf2": ("ours, TF2 face, dynamic",
                 scaling.wrapped(impls.BY_NAME["ours_tf2"].wrap)),
    "ours_least": ("ours, contrib face, the least dynamic manager",
                   scaling.wrapped(lambda opt: mp_optimizer.LossScaleOptimizer(
                       opt, exact_skips.LeastDynamicManager()))),
    **{design: (exact_skips.LABELS[design], exact_skips.maker(design))
       for design in exact_skips.LABELS},
}
# Every contender is also timed against the floor, in the same rounds.
REFERENCES = {name: "switch" for name in CONTENDERS if name != "switch"}


def _names(text: str) -> List[str]:
  return [name for name in text.split(",") if name]


def run_grid(args, min_rounds: int, traces: int) -> Iterator:
  """Yields the pool of each shape family, N and inner optimizer."""
  for family in _names(args.shapes):
    for size in map(int, _names(args.sizes)):
      for inner in _names(args.inners):
        yield scaling.measure(
            size, inner, args.seconds, _names(args.contenders), min_rounds,
            CONTENDERS, lambda n, f=family: shapes.with_variables(f, n),
            family, traces, REFERENCES, copies=sessions.copies_for)


def run_models(args, min_rounds: int, traces: int) -> Iterator:
  """Yields the pool of each model."""
  for name in _names(args.models):
    kwargs = models.SMOKE[name] if args.smoke else {}
    yield scaling.measure(
        0, "adam", args.model_seconds, _names(args.contenders), min_rounds,
        CONTENDERS, lambda _, n=name, k=kwargs: models.MODELS[n](**k), name,
        traces, REFERENCES)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--shapes", default="many_small,wide,embedding")
  parser.add_argument("--sizes", default="10,100,1000")
  parser.add_argument("--inners", default="sgd,adam")
  parser.add_argument("--contenders", default=",".join(CONTENDERS),
                      help="bare and switch (the floor) are always built")
  parser.add_argument("--seconds", type=float, default=15.0,
                      help="interleaved timing per shape, N and inner")
  parser.add_argument("--models", default=",".join(models.MODELS))
  parser.add_argument("--model-seconds", type=float, default=60.0,
                      help="interleaved timing per model")
  parser.add_argument("--output", default="BENCHMARKS.md",
                      help="Markdown file whose sections to rewrite, "
                           "relative to the repository root")
  parser.add_argument("--smoke", action="store_true",
                      help="one round per pool, one traced step, tiny models")
  args = parser.parse_args(argv)
  chosen = _names(args.contenders)
  args.contenders = ",".join(["bare", "switch"] + [
      name for name in chosen if name not in ("bare", "switch")])
  min_rounds, traces = (1, 1) if args.smoke else (timing.MIN_ROUNDS, 3)
  command = shlex.join(["python", "benchmarks/floor.py"] +
                       (sys.argv[1:] if argv is None else argv))
  path = os.path.join(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))), args.output)
  for run, render, begin, end in (
      (run_grid, floor_report.grid_section, sections.FLOOR_BEGIN,
       sections.FLOOR_END),
      (run_models, floor_report.models_section, sections.MODELS_BEGIN,
       sections.MODELS_END)):
    started = time.perf_counter()
    pools, text = [], None
    # The section is rewritten after each pool, so a run stopped part of
    # the way (a long grid on a shared machine) keeps what it measured.
    for pool in run(args, min_rounds, traces):
      pools.append(pool)
      text = render(pools, command, (time.perf_counter() - started) / 60)
      sections.replace(path, begin, end, text, scaling_report.BEGIN)
    if text is not None:
      print(text)
  print(f"\nWrote {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
