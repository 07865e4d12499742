"""One shape's pool: the steps timed side by side, and what is read off them.

A pool holds contenders, each a real step in its own graph and Session
(`benchmarks.steps`): implementations of `benchmarks.implementations`, its
floors. They are
timed in interleaved rounds (`benchmarks.timing`), so every contender sees
the same machine load; graph size and step memory are read afterwards
(`benchmarks.graph_cost`).
"""

import contextlib
import dataclasses
import statistics
from typing import Callable, ContextManager, List, Optional, Sequence

import tensorflow as tf

from benchmarks import graph_cost
from benchmarks import implementations as impls
from benchmarks import report
from benchmarks import shapes
from benchmarks import steps
from benchmarks import timing

# Step memory depends on the order the executor happens to run ops in; the
# median over a few traced steps is steadier than one.
TRACED_STEPS = 5


@dataclasses.dataclass(frozen=True)
class Settings:
  """What the command line asked for."""
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


def make_loss(shape: shapes.Shape, size: int) -> Callable[[], tf.Tensor]:
  """Builds `shape`'s loss at `size` in the default graph, when called."""
  return lambda: shape.build(size)


def contenders(shape: shapes.Shape, names: Sequence[str],
               config: Optional[tf.compat.v1.ConfigProto] = None,
               scope: Callable[[], ContextManager] = contextlib.nullcontext
               ) -> List[Contender]:
  """`names` of `impls.IMPLEMENTATIONS` or `impls.FLOORS`, built on `shape`.

  An implementation keeps its counterpart (TF's built-in doing the same
  kind of scaling), for the "vs TF" column of pools that time both.
  """
  out = []
  for name in names:
    if name in impls.FLOORS:
      label, make, counterpart = impls.FLOORS[name], impls.floor_of(name), None
    else:
      impl = impls.BY_NAME[name]
      label, make = impl.label, impls.train_op_of(impl)
      counterpart = impl.counterpart
    out.append(Contender(name, label, steps.build(
        make_loss(shape, shape.size), make, config, scope),
                         counterpart=counterpart))
  return out


def time_pool(pool: List[Contender], seconds: float,
              settings: Settings) -> report.Pool:
  """Times `pool` in interleaved rounds; one report row per contender."""
  rounds = timing.interleaved({c.name: c.step.run for c in pool},
                              seconds, min_rounds=settings.min_rounds)
  rows = {}
  for c in pool:
    timed_counterpart = c.counterpart if c.counterpart in rounds else None
    rows[c.name] = report.Row(
        name=c.name, label=c.label,
        step_ms=timing.step_seconds(rounds, c.name) * 1e3,
        vs_reference=timing.ratio(rounds, c.name, c.reference),
        reference=c.reference,
        vs_counterpart=(timing.ratio(rounds, c.name, timed_counterpart)
                        if timed_counterpart else None),
        all_applied=c.step.steps_applied() == c.step.runs)
  return report.Pool(rows=rows, rounds=len(next(iter(rounds.values()))))


def measure_graphs(pool: List[Contender]) -> None:
  """Fills in each contender's built and run ops and its step memory."""
  for c in pool:
    c.built_ops = graph_cost.built_ops(c.step.graph)
    c.run_ops = c.step.measure(graph_cost.run_ops)
    c.peak_bytes = int(statistics.median(
        c.step.measure(graph_cost.step_peak_bytes)
        for _ in range(TRACED_STEPS)))


def close(pool: List[Contender]) -> None:
  """Closes every contender's Session."""
  for c in pool:
    c.step.close()
