"""Loss-scaling overhead, side by side in one run; writes BENCHMARKS.md.

    python benchmarks/overhead.py [--minutes 8] [--output BENCHMARKS.md]
        [--retired] [--smoke]

For each model shape, bare Adam, TF's built-in wrapper, ours and the two
floors (`implementations.FLOORS`) are built in their own graphs and Sessions
and timed in interleaved rounds (`benchmarks.timing`). Then graph size and
step memory (`benchmarks.graph_cost`), the first shape again with one
inter-op thread (what the barrier floor costs without a second thread to
overlap updates with backprop), the same steps under XLA, and the dynamic
scale's update with and without its mutex (`benchmarks.micro`). The report
goes to stdout and to the file; the section `benchmarks/scaling.py` writes
there is kept.

`--retired` also times the designs the library left behind
(`benchmarks.variants`: other finite checks and gates, rebuilt from public
parts) and the checks alone; docs/performance-history.md tells what each
showed when it was retired. `--smoke` builds every shape at a tiny size and
times one round of each pool, to check that the benchmark runs.
"""

import argparse
import contextlib
import dataclasses
import os
import statistics
import sys
import time
from typing import Dict, List, Optional, Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Run as a script (`make bench`), this file's folder is on sys.path, not the
# repository root that holds the `benchmarks` package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # After the sys.path line above, as all below.

from benchmarks import graph_cost
from benchmarks import implementations as impls
from benchmarks import micro
from benchmarks import report
from benchmarks import scaling_report
from benchmarks import sections
from benchmarks import shapes
from benchmarks import steps
from benchmarks import targets
from benchmarks import timing
from benchmarks import variants

# Share of the timing budget per part; graph building and counting come on top.
SHARES = {"many_small": 0.30, "wide": 0.18, "embedding": 0.14, "xla": 0.18,
          "one_thread": 0.06, "micro": 0.14}
XLA_IMPLEMENTATIONS = ("bare", "tf_dynamic", "ours_contrib", "ours_tf2")
# Timed again with one inter-op thread, on the first shape: with no second
# thread to run updates during backprop, holding them back loses no overlap.
ONE_THREAD = ("bare", "floor_barrier", "ours_contrib")
# Step memory depends on the order the executor happens to run ops in; the
# median over a few traced steps is steadier than one.
TRACED_STEPS = 5


@dataclasses.dataclass(frozen=True)
class Settings:
  """What the command line asked for."""
  retired: bool = False
  min_rounds: int = timing.MIN_ROUNDS


@dataclasses.dataclass
class Contender:
  """Something timed in a shape's pool, and what was measured about it."""
  name: str
  label: str
  step: steps.Step
  reference: str = "bare"
  counterpart: Optional[str] = None
  built_ops: int = 0
  run_ops: int = 0
  peak_bytes: int = 0


def _log(message: str) -> None:
  print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _make_loss(shape: shapes.Shape, size: int):
  return lambda: shape.build(size)


def _main_contenders(shape: shapes.Shape, scope=None) -> List[Contender]:
  names = (XLA_IMPLEMENTATIONS if scope else
           [impl.name for impl in impls.IMPLEMENTATIONS])
  out = []
  for name in names:
    impl = impls.BY_NAME[name]
    step = steps.build(_make_loss(shape, shape.size), impls.train_op_of(impl),
                       scope=scope or contextlib.nullcontext)
    out.append(Contender(name, impl.label, step, counterpart=impl.counterpart))
  return out


def _contenders(shape: shapes.Shape, names: Sequence[str],
                config: Optional[tf.compat.v1.ConfigProto] = None
                ) -> List[Contender]:
  """`names` of `impls.IMPLEMENTATIONS` or `impls.FLOORS`, built on `shape`."""
  out = []
  for name in names:
    if name in impls.FLOORS:
      label, make = impls.FLOORS[name], impls.floor_of(name)
    else:
      label, make = impls.BY_NAME[name].label, impls.train_op_of(
          impls.BY_NAME[name])
    out.append(Contender(name, label, steps.build(
        _make_loss(shape, shape.size), make, config)))
  return out


def _idea_contenders(shape: shapes.Shape, main: List[Contender],
                     settings: Settings) -> List[Contender]:
  steps_of = {c.name: c.step for c in main}
  out = []
  for idea in variants.IDEAS if settings.retired else ():
    if shape.name not in idea.shapes:
      continue
    config = steps.session_config(idea.grappler)
    if idea.same_graph_as:
      step = steps_of[idea.same_graph_as].in_new_session(config)
    else:
      step = steps.build(_make_loss(shape, shape.size), idea.make_train_op,
                         config, idea.scope)
    out.append(Contender(idea.name, idea.label, step, idea.reference))
  return out


def _time_pool(contenders: List[Contender], seconds: float,
               settings: Settings) -> report.Pool:
  rounds = timing.interleaved({c.name: c.step.run for c in contenders},
                              seconds, min_rounds=settings.min_rounds)
  rows = {}
  for c in contenders:
    rows[c.name] = report.Row(
        name=c.name, label=c.label,
        step_ms=timing.step_seconds(rounds, c.name) * 1e3,
        vs_reference=timing.ratio(rounds, c.name, c.reference),
        reference=c.reference,
        vs_counterpart=(timing.ratio(rounds, c.name, c.counterpart)
                        if c.counterpart else None),
        all_applied=c.step.steps_applied() == c.step.runs)
  return report.Pool(rows=rows, rounds=len(next(iter(rounds.values()))))


def _measure_graphs(contenders: List[Contender]) -> None:
  for c in contenders:
    c.built_ops = graph_cost.built_ops(c.step.graph)
    c.run_ops = c.step.measure(graph_cost.run_ops)
    c.peak_bytes = int(statistics.median(
        c.step.measure(graph_cost.step_peak_bytes)
        for _ in range(TRACED_STEPS)))


def _ops_lines(shape: shapes.Shape, measured: Dict[str, Contender]):
  """Per implementation: lines of built and run ops added vs. variables."""
  other = {}
  for impl in impls.IMPLEMENTATIONS:
    step = steps.build(_make_loss(shape, shape.other_size),
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
              settings: Settings) -> report.ShapeResult:
  _log(f"{shape.name}: building {shape.label}")
  main = _main_contenders(shape)
  extra = (_contenders(shape, list(impls.FLOORS)) +
           _idea_contenders(shape, main, settings))
  _log(f"{shape.name}: timing {len(main) + len(extra)} steps, {seconds:.0f}s")
  pool = _time_pool(main + extra, seconds, settings)
  _measure_graphs(main)
  for c in main + extra:
    c.step.close()
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
    step = steps.build(_make_loss(shape, shape.size), impls.train_op_of(impl))
    measured[impl.name] = Contender(impl.name, impl.label, step,
                                    built_ops=graph_cost.built_ops(step.graph),
                                    run_ops=step.measure(graph_cost.run_ops))
    step.close()
  return _ops_lines(shape, measured)


def run_xla(family: List[shapes.Shape], seconds: float,
            settings: Settings) -> Dict[str, report.Pool]:
  pools = {}
  for shape in family:
    _log(f"XLA: building and compiling {shape.name}")
    contenders = _main_contenders(shape, scope=tf.xla.experimental.jit_scope)
    for c in contenders:
      c.step.run()  # Compiles.
    _log(f"XLA: timing {shape.name} for {seconds:.0f}s")
    pools[shape.name] = _time_pool(contenders, seconds, settings)
    for c in contenders:
      c.step.close()
  return pools


def run_one_thread(shape: shapes.Shape, seconds: float,
                   settings: Settings) -> report.Pool:
  """Times `ONE_THREAD` on `shape`, each Session with one inter-op thread."""
  _log(f"{shape.name}, one inter-op thread: timing {len(ONE_THREAD)} steps, "
       f"{seconds:.0f}s")
  config = steps.session_config()
  # Sessions share one process-wide pool, sized by the first Session made,
  # unless each asks for threads of its own.
  config.use_per_session_threads = True
  config.inter_op_parallelism_threads = 1
  contenders = _contenders(shape, ONE_THREAD, config)
  pool = _time_pool(contenders, seconds, settings)
  for c in contenders:
    c.step.close()
  return pool


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--minutes", type=float, default=8.0,
                      help="time for timing rounds (graph building, "
                           "compiling and counting add about 3 minutes)")
  parser.add_argument("--output", default="BENCHMARKS.md",
                      help="Markdown file to write, relative to the "
                           "repository root")
  parser.add_argument("--retired", action="store_true",
                      help="also time the retired designs of "
                           "benchmarks/variants.py")
  parser.add_argument("--smoke", action="store_true",
                      help="tiny models, one round per pool")
  args = parser.parse_args(argv)
  settings = Settings(retired=args.retired,
                      min_rounds=1 if args.smoke else timing.MIN_ROUNDS)
  family = list(shapes.SHAPES.values())
  distinct = shapes.DISTINCT
  if args.smoke:
    family = [shapes.smoke(shape) for shape in family]
    distinct = shapes.smoke(distinct)
  seconds = args.minutes * 60
  machine = report.machine_info(" ".join(["python", "benchmarks/overhead.py"] +
                                         (argv or sys.argv[1:])))
  started = time.perf_counter()
  results = [run_shape(shape, seconds * SHARES[shape.name], settings)
             for shape in family]
  one_thread = run_one_thread(family[0], seconds * SHARES["one_thread"],
                              settings)
  distinct_lines = count_distinct(distinct)
  xla = run_xla(family[:1] if args.smoke else family,
                seconds * SHARES["xla"] / len(family), settings)
  _log("single parts alone")
  locks = micro.locked_updates(seconds * SHARES["micro"] * 0.2,
                               settings.min_rounds)
  checks = updates = None
  if args.retired:
    checks = micro.finite_checks(seconds * SHARES["micro"] * 0.6,
                                 settings.min_rounds)
    updates = micro.state_updates(seconds * SHARES["micro"] * 0.2,
                                  settings.min_rounds)
  machine.finish(time.perf_counter() - started)
  text = targets.render(machine, results, distinct_lines, xla, locks,
                        one_thread, checks, updates)
  path = os.path.join(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))), args.output)
  kept = [sections.saved(path, sections.OPTIONS_BEGIN, sections.OPTIONS_END),
          scaling_report.saved_section(path)]
  with open(path, "w", encoding="utf-8") as out:
    out.write(text + "".join("\n" + part for part in kept if part))
  print(targets.console_summary(results))
  print(f"\nWrote {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
