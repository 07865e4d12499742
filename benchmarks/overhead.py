"""Loss-scaling overhead, side by side in one run; writes BENCHMARKS.md.

    python benchmarks/overhead.py [--minutes 8] [--output BENCHMARKS.md]
        [--smoke]

For each model shape, bare Adam, TF's built-in wrapper, ours and the two
floors (`implementations.FLOORS`) are built in their own graphs and Sessions
and timed in interleaved rounds, as one pool (`benchmarks.pools`). Then
graph size and step memory (`benchmarks.graph_cost`), the first shape again
with one inter-op thread (what the barrier floor costs without a second
thread to overlap updates with backprop), the same steps under XLA, and the
dynamic scale's update with and without its mutex (`benchmarks.micro`).
The report goes to stdout and to the file; the section
`benchmarks/scaling.py` writes there is kept.

The designs the library left behind are not built here any more;
docs/performance-history.md keeps what each showed when it was retired.
`--smoke` builds every shape at a tiny size and times one round of each
pool, to check that the benchmark runs.
"""

import argparse
import os
import shlex
import sys
import time
from typing import Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Run as a script (`make bench`), this file's folder is on sys.path, not the
# repository root that holds the `benchmarks` package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # After the sys.path line above, as all below.

from benchmarks import graph_cost
from benchmarks import implementations as impls
from benchmarks import micro
from benchmarks import pools
from benchmarks import report
from benchmarks import scaling_report
from benchmarks import sections
from benchmarks import shapes
from benchmarks import steps
from benchmarks import targets
from benchmarks import timing

# Share of the timing budget per part; graph building and counting come on top.
# They add up to 0.89: a default run takes as long as it did when the other
# 0.11 timed designs since retired (docs/performance-history.md).
SHARES = {"many_small": 0.30, "wide": 0.18, "embedding": 0.14, "xla": 0.18,
          "one_thread": 0.06, "micro": 0.03}
XLA_IMPLEMENTATIONS = ("bare", "tf_dynamic", "ours_contrib", "ours_tf2")
# Timed again with one inter-op thread, on the first shape: with no second
# thread to run updates during backprop, holding them back loses no overlap.
ONE_THREAD = ("bare", "floor_barrier", "ours_contrib")


def _log(message: str) -> None:
  print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _ops_lines(shape: shapes.Shape, measured: Dict[str, pools.Contender]):
  """Per implementation: lines of built and run ops added vs. variables."""
  other = {}
  for impl in impls.IMPLEMENTATIONS:
    step = steps.build(pools.make_loss(shape, shape.other_size),
                       impls.train_op_of(impl))
    other[impl.name] = (graph_cost.built_ops(step.graph),
                        step.measure(graph_cost.run_ops),
                        step.trainable_variables)
    step.close()
  here = {name: (c.built_ops, c.run_ops, c.step.trainable_variables)
          for name, c in measured.items()}
  lines = {}
  for name in other:
    if name == "bare":
      continue
    fits = []
    for which in (0, 1):  # built, run
      fits.append(graph_cost.fit_line(
          other[name][which] - other["bare"][which], other[name][2],
          here[name][which] - here["bare"][which], here[name][2]))
    lines[name] = tuple(fits)
  return lines


def run_shape(shape: shapes.Shape, seconds: float,
              settings: pools.Settings) -> report.ShapeResult:
  _log(f"{shape.name}: building {shape.label}")
  main = pools.contenders(shape, [i.name for i in impls.IMPLEMENTATIONS])
  extra = pools.contenders(shape, list(impls.FLOORS))
  _log(f"{shape.name}: timing {len(main) + len(extra)} steps, {seconds:.0f}s")
  pool = pools.time_pool(main + extra, seconds, settings)
  pools.measure_graphs(main)
  pools.close(main + extra)
  by_name = {c.name: c for c in main}
  lines = _ops_lines(shape, by_name)
  return report.ShapeResult(
      shape=shape, pool=pool, ops=lines,
      peak_bytes={c.name: c.peak_bytes for c in main},
      variables=by_name["bare"].step.trainable_variables)


def count_distinct(shape: shapes.Shape) -> Dict[str, tuple]:
  """Ops-added lines on the family where no two variables share a shape."""
  _log("distinct shapes: counting ops")
  measured = {}
  for impl in impls.IMPLEMENTATIONS:
    step = steps.build(pools.make_loss(shape, shape.size),
                       impls.train_op_of(impl))
    measured[impl.name] = pools.Contender(
        impl.name, impl.label, step, built_ops=graph_cost.built_ops(step.graph),
        run_ops=step.measure(graph_cost.run_ops))
    step.close()
  return _ops_lines(shape, measured)


def run_xla(family: List[shapes.Shape], seconds: float,
            settings: pools.Settings) -> Dict[str, report.Pool]:
  timed = {}
  for shape in family:
    _log(f"XLA: building and compiling {shape.name}")
    pool = pools.contenders(shape, XLA_IMPLEMENTATIONS,
                            scope=tf.xla.experimental.jit_scope)
    for c in pool:
      c.step.run()  # Compiles.
    _log(f"XLA: timing {shape.name} for {seconds:.0f}s")
    timed[shape.name] = pools.time_pool(pool, seconds, settings)
    pools.close(pool)
  return timed


def run_one_thread(shape: shapes.Shape, seconds: float,
                   settings: pools.Settings) -> report.Pool:
  """Times `ONE_THREAD` on `shape`, each Session with one inter-op thread."""
  _log(f"{shape.name}, one inter-op thread: timing {len(ONE_THREAD)} steps, "
       f"{seconds:.0f}s")
  config = steps.session_config()
  # Sessions share one process-wide pool, sized by the first Session made,
  # unless each asks for threads of its own.
  config.use_per_session_threads = True
  config.inter_op_parallelism_threads = 1
  pool = pools.contenders(shape, ONE_THREAD, config)
  timed = pools.time_pool(pool, seconds, settings)
  pools.close(pool)
  return timed


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--minutes", type=float, default=8.0,
                      help="time for timing rounds (graph building, "
                           "compiling and counting add about 3 minutes)")
  parser.add_argument("--output", default="BENCHMARKS.md",
                      help="Markdown file to write, relative to the "
                           "repository root")
  parser.add_argument("--smoke", action="store_true",
                      help="tiny models, one round per pool")
  args = parser.parse_args(argv)
  settings = pools.Settings(
      min_rounds=1 if args.smoke else timing.MIN_ROUNDS)
  family = list(shapes.SHAPES.values())
  distinct = shapes.DISTINCT
  if args.smoke:
    family = [shapes.smoke(shape) for shape in family]
    distinct = shapes.smoke(distinct)
  seconds = args.minutes * 60
  machine = report.machine_info(shlex.join(
      ["python", "benchmarks/overhead.py"] + (argv or sys.argv[1:])))
  started = time.perf_counter()
  results = [run_shape(shape, seconds * SHARES[shape.name], settings)
             for shape in family]
  one_thread = run_one_thread(family[0], seconds * SHARES["one_thread"],
                              settings)
  distinct_lines = count_distinct(distinct)
  xla = run_xla(family[:1] if args.smoke else family,
                seconds * SHARES["xla"] / len(family), settings)
  _log("single parts alone")
  locks = micro.locked_updates(seconds * SHARES["micro"],
                               settings.min_rounds)
  machine.finish(time.perf_counter() - started)
  text = targets.render(machine, results, distinct_lines, xla, locks,
                        one_thread)
  path = os.path.join(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))), args.output)
  kept = [sections.saved(path, sections.OPTIONS_BEGIN, sections.OPTIONS_END),
          sections.saved(path, sections.HOROVOD_BEGIN, sections.HOROVOD_END),
          sections.saved(path, sections.BFLOAT16_BEGIN, sections.BFLOAT16_END),
          sections.saved(path, sections.READINGS_BEGIN, sections.READINGS_END),
          sections.saved(path, sections.FLOOR_BEGIN, sections.FLOOR_END),
          sections.saved(path, sections.MODELS_BEGIN, sections.MODELS_END),
          scaling_report.saved_section(path)]
  with open(path, "w", encoding="utf-8") as out:
    out.write(text + "".join("\n" + part for part in kept if part))
  print(targets.console_summary(results))
  print(f"\nWrote {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
