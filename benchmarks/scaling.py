"""How the cost of loss scaling grows with the number of variables.

    python benchmarks/scaling.py [--sizes 10,100,1000,5000] [--inners sgd,adam]
        [--seconds 40] [--output BENCHMARKS.md] [--plot docs/scaling.png] [--smoke]

For each size N and inner optimizer, a chain of N layers of 32x32
(`shapes.chain`) is trained by every contender below, each in its own graph
and Session, all in one process:

* bare: the inner optimizer alone;
* TF built-in: `MixedPrecisionLossScaleOptimizer` with a dynamic scale;
* ours: `LossScaleOptimizer` with contrib's dynamic manager, and with a fixed
  scale (which still checks and skips);
* two floors, built from our own parts: "unscale only" (our
  `compute_gradients`, each gradient unscaled on its own, the inner apply
  with no check and no gate) and "barrier only" (our `compute_gradients`,
  then the inner apply behind our one-Switch gate on a flag that only waits
  for every gradient: the barrier any whole-step skip needs, and nothing
  else).

Counted (load-independent): kernels per step (nodes in the step stats of a
FULL_TRACE `RunMetadata`), ops and bytes of the GraphDef. Timed: building
the train op, the first `sess.run` (Grappler and the first execution), and
steps in interleaved rounds (`benchmarks.timing`), as ratios to bare; the
1-minute load average is recorded beside every timing. "RSS added" is the
growth of the process's resident memory while the contender was built and
run once.

The table and a plot (`docs/scaling.png`) replace the "Growth with the
number of variables" section of the output file (`scaling_report`).
"""

import argparse
import math
import os
import sys
import time
from typing import Callable, Dict, List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # After the sys.path line above, as all below.

from benchmarks import graph_cost
from benchmarks import implementations as impls
from benchmarks import process_memory
from benchmarks import scaling_report
from benchmarks import sessions
from benchmarks import shapes
from benchmarks import timing

v1 = tf.compat.v1
SIZES = (10, 100, 1000, 5000)
INNERS = ("sgd", "adam")
# Of the memory available after building bare, what a pool's contenders may
# hold at once (`measure`), at bare's resident size each.
MEMORY_SHARE = 0.6
# (loss, global_step, inner) -> train op.
MakeTrainOp = Callable[[tf.Tensor, tf.Variable, v1.train.Optimizer],
                       tf.Operation]


def _inner(name: str) -> v1.train.Optimizer:
  if name == "sgd":
    return v1.train.GradientDescentOptimizer(1e-4)
  return v1.train.AdamOptimizer(1e-4)


def wrapped(wrap) -> MakeTrainOp:
  return lambda loss, step, inner: wrap(inner).minimize(loss, global_step=step)


def _floor(name: str) -> MakeTrainOp:
  return lambda loss, step, inner: impls.floor_train_op(loss, step, inner,
                                                        name)


CONTENDERS: Dict[str, tuple] = {
    "bare": ("bare", wrapped(lambda opt: opt)),
    "tf": ("TF built-in, dynamic", wrapped(impls.BY_NAME["tf_dynamic"].wrap)),
    "ours": ("ours, contrib dynamic",
             wrapped(impls.BY_NAME["ours_contrib"].wrap)),
    "ours_fixed": ("ours, fixed (skips NaN/Inf steps)",
                   wrapped(impls.BY_NAME["ours_fixed"].wrap)),
    **{name: (label, _floor(name)) for name, label in impls.FLOORS.items()},
}


def _log(message: str) -> None:
  print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Built:
  """One contender's graph and Session, and what building it measured.

  `model(size)` builds the loss (a chain of `size` layers unless given); the
  train op runs after the model's `UPDATE_OPS` (batch norm's moving
  averages), as TF1 training scripts build it. `traces` FULL_TRACE steps
  give the kernels per step and, as their median, the step memory. `config`
  is the Session's (TensorFlow's defaults unless given).
  """

  def __init__(self, size: int, inner: str, make: MakeTrainOp,
               model: Callable[[int], tf.Tensor] = shapes.chain,
               traces: int = 1, config: v1.ConfigProto = None):
    rss = process_memory.rss_mb()
    self.graph = tf.Graph()
    with self.graph.as_default():
      loss = model(size)
      self.global_step = v1.train.get_or_create_global_step()
      started = time.perf_counter()
      with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
        self.train_op = make(loss, self.global_step, _inner(inner))
      self.build_s = time.perf_counter() - started
      init = v1.global_variables_initializer()
    graph_def = self.graph.as_graph_def()
    self.ops = len(graph_def.node)
    self.graph_mb = graph_def.ByteSize() / 2**20
    self.session = v1.Session(graph=self.graph, config=config)
    self.session.run(init)
    self.load = os.getloadavg()[0]
    started = time.perf_counter()
    self.session.run(self.train_op)
    self.first_run_s = time.perf_counter() - started
    self.rss_mb = process_memory.rss_mb() - rss
    traced = [graph_cost.trace_step(self.session, self.train_op)
              for _ in range(traces)]
    self.kernels = traced[0].kernels
    self.trace = sorted(traced, key=lambda t: t.peak_bytes)[traces // 2]
    self.runs = 1 + traces

  def run(self) -> None:
    self.session.run(self.train_op)
    self.runs += 1

  def all_applied(self) -> bool:
    return int(self.session.run(self.global_step)) == self.runs


def measure(size: int, inner: str, seconds: float, names: List[str],
            min_rounds: int = timing.MIN_ROUNDS,
            contenders: Dict[str, tuple] = None,
            model: Callable[[int], tf.Tensor] = shapes.chain,
            family: str = "chain", traces: int = 1,
            references: Dict[str, str] = None,
            alive: Optional[int] = None,
            copies: Callable[[float], int] = lambda bare_ms: 1
            ) -> scaling_report.Pool:
  """Builds every contender at `size`, then times them interleaved.

  When the contenders would not all fit in memory at once (more than
  `alive`, by default what `MEMORY_SHARE` of the available memory holds at
  bare's resident size, or fewer if the available memory falls below twice
  that size while they are built), they are built and timed in parts, and
  each part also times bare and the references again, so that every ratio
  still comes from rounds in which both of its contenders ran; a part's
  other contenders are closed before the next part is built.

  Args:
    contenders: Name -> (label, make train op); `CONTENDERS` by default.
    model, traces: As `Built` takes them; `family` names the model.
    references: Name -> another contender it is also compared with, in the
      same rounds (`Row.vs_other`).
    alive: Built graphs alive at once, at most, each copy counting (bare
      and the references count); None: from the memory available after
      building bare.
    copies: Bare's step in ms -> how many times to build each contender
      (`benchmarks.sessions`): each copy is timed on its own, and a round's
      time of the contender is the median of its copies'. Kernels and step
      memory are the first copy's.
  """
  contenders = contenders or CONTENDERS
  references = references or {}
  keep = ["bare"] + sorted({other for name, other in references.items()
                            if name in names and other in names} - {"bare"})
  built: Dict[str, Built] = {}
  count = 1

  def build(name: str) -> None:
    for key in sessions.instances(name, count):
      if key not in built:
        _log(f"{family} N={size} {inner}: building {key}")
        built[key] = Built(size, inner, contenders[name][1], model,
                           traces if key == name else 1)

  process_memory.trim_heap()
  build("bare")
  count = copies(1e3 * timing.step_seconds(timing.interleaved(
      {"bare": built["bare"].run}, 0.0, min_rounds=1), "bare"))
  build("bare")
  if alive is None:
    available = process_memory.available_mb()
    alive = len(names) * count if math.isnan(available) else int(
        available * MEMORY_SHARE / max(built["bare"].rss_mb, 1.0))
  others = [name for name in names if name not in keep]
  rows, rounds_per_part, load_start = {}, [], None
  for name in keep[1:]:
    build(name)
  while True:
    part = list(keep)
    while others and len(part) * count < max(alive, (len(keep) + 1) * count):
      # Another contender only with room for it and one more left.
      if (len(part) > len(keep) and process_memory.available_mb() <
          2 * count * built["bare"].rss_mb):
        break
      build(others[0])
      part.append(others.pop(0))
    load_start = os.getloadavg()[0] if load_start is None else load_start
    keys = [key for name in part for key in sessions.instances(name, count)]
    _log(f"{family} N={size} {inner}: timing {len(keys)} steps for "
         f"{seconds:.0f}s")
    rounds = timing.interleaved({key: built[key].run for key in keys},
                                seconds, min_rounds=min_rounds)
    combined = sessions.combine(rounds, part, count)
    rounds_per_part.append(len(rounds["bare"]))
    for name in part:
      rows.setdefault(name, _row(contenders[name][0], built, rounds,
                                 combined, name, references.get(name),
                                 count))
      if name not in keep:
        for key in sessions.instances(name, count):
          built.pop(key).session.close()
    process_memory.trim_heap()
    if not others:
      break
  for b in built.values():
    b.session.close()
  return scaling_report.Pool(size, inner, {n: rows[n] for n in names},
                             min(rounds_per_part), load_start,
                             os.getloadavg()[0], family,
                             parts=len(rounds_per_part), copies=count)


def _row(label: str, built: Dict[str, Built], raw, rounds, name: str,
         other: Optional[str], count: int) -> scaling_report.Row:
  """`rounds`: per name, combined over its copies; `raw`: per copy."""
  b = built[name]
  return scaling_report.Row(
      label=label, kernels=b.kernels, ops=b.ops, graph_mb=b.graph_mb,
      build_s=b.build_s, first_run_s=b.first_run_s, first_run_load=b.load,
      rss_mb=b.rss_mb, step_ms=timing.step_seconds(rounds, name) * 1e3,
      vs_bare=timing.ratio(rounds, name, "bare"),
      all_applied=all(built[key].all_applied()
                      for key in sessions.instances(name, count)),
      peak_bytes=b.trace.peak_bytes, at_peak=b.trace.at_peak,
      vs_other=(timing.ratio(rounds, name, other)
                if other in rounds else None),
      copies=tuple(sessions.spread(raw, name, count)))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
  parser.add_argument("--inners", default=",".join(INNERS))
  parser.add_argument("--contenders", default=",".join(CONTENDERS))
  parser.add_argument("--seconds", type=float, default=40.0,
                      help="interleaved timing per size and inner optimizer")
  parser.add_argument("--output", default="BENCHMARKS.md",
                      help="Markdown file whose section to rewrite, relative "
                           "to the repository root ('' to write none)")
  parser.add_argument("--plot", default="docs/scaling.png")
  parser.add_argument("--smoke", action="store_true",
                      help="one round per pool (with small --sizes)")
  args = parser.parse_args(argv)
  min_rounds = 1 if args.smoke else timing.MIN_ROUNDS
  names = args.contenders.split(",")
  if names[0] != "bare":
    names = ["bare"] + [n for n in names if n != "bare"]
  started = time.perf_counter()
  pools = [measure(int(size), inner, args.seconds, names, min_rounds)
           for size in args.sizes.split(",") for inner in args.inners.split(",")]
  minutes = (time.perf_counter() - started) / 60
  text = scaling_report.section(pools, minutes, args.plot)
  print(text)
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  if args.output:
    scaling_report.draw(pools, os.path.join(root, args.plot))
    scaling_report.replace_section(os.path.join(root, args.output), text)
    print(f"\nWrote {args.output} and {args.plot}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
