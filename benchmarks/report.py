"""Results of one run, and their Markdown: machine, method, the main table."""

import dataclasses
import datetime
import os
import platform
from typing import Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from benchmarks import graph_cost
from benchmarks import implementations as impls
from benchmarks import shapes
from benchmarks import timing


@dataclasses.dataclass(frozen=True)
class Row:
  """One contender's timing in a pool."""
  name: str
  label: str
  step_ms: float
  vs_reference: timing.Ratio
  reference: str
  vs_counterpart: Optional[timing.Ratio]
  all_applied: bool


@dataclasses.dataclass(frozen=True)
class Pool:
  """Contenders timed together in interleaved rounds."""
  rows: Dict[str, Row]
  rounds: int


@dataclasses.dataclass(frozen=True)
class ShapeResult:
  """Everything measured on one model shape."""
  shape: shapes.Shape
  pool: Pool
  ops: Dict[str, Tuple[graph_cost.Line, graph_cost.Line]]  # built, run
  peak_bytes: Dict[str, int]
  variables: int


@dataclasses.dataclass
class Machine:
  """Where and when the run happened."""
  command: str
  cpu: str
  cores: int
  system: str
  versions: str
  date: str
  load_start: float
  load_end: float = float("nan")
  minutes: float = float("nan")

  def finish(self, seconds: float) -> None:
    self.load_end = os.getloadavg()[0]
    self.minutes = seconds / 60


def _cpu_model() -> str:
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
      for line in cpuinfo:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown CPU"


def machine_info(command: str) -> Machine:
  return Machine(
      command=command, cpu=_cpu_model(), cores=os.cpu_count() or 0,
      system=platform.platform(),
      versions=(f"TensorFlow {tf.__version__}, Python "
                f"{platform.python_version()}"),
      date=datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
      load_start=os.getloadavg()[0])


def ratio_text(ratio: Optional[timing.Ratio]) -> str:
  if ratio is None:
    return ""
  return f"{ratio.median:.3f} ({ratio.low:.2f}-{ratio.high:.2f})"


def table(header: Sequence[str], rows: List[Sequence[str]]) -> str:
  lines = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
  lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
  return "\n".join(lines)


def main_table(results: List[ShapeResult]) -> str:
  """Step-time ratios, ops added and step memory for every implementation."""
  rows = []
  for result in results:
    bare_bytes = result.peak_bytes["bare"]
    for impl in impls.IMPLEMENTATIONS:
      row = result.pool.rows[impl.name]
      built, run = result.ops.get(impl.name, ("", ""))
      peak = result.peak_bytes[impl.name]
      rows.append([
          result.shape.name, impl.label, f"{row.step_ms:.2f}",
          ratio_text(row.vs_reference) if impl.name != "bare" else "1",
          ratio_text(row.vs_counterpart), str(built), str(run),
          f"{peak / 2**20:.2f}", f"{peak / bare_bytes:.3f}"])
  return table(["shape", "implementation", "step ms", "÷ bare (IQR)",
                "÷ TF built-in (IQR)", "ops added, built", "ops added, run",
                "step memory MB", "÷ bare"], rows)


def distinct_table(lines) -> str:
  rows = [[impls.BY_NAME[name].label, str(built), str(run)]
          for name, (built, run) in lines.items()]
  return table(["implementation", "ops added, built", "ops added, run"], rows)


def method_text(results: List[ShapeResult], timed_pools: int) -> str:
  rounds = ", ".join(f"{r.shape.name} {r.pool.rounds}" for r in results)
  shape_lines = "\n".join(f"  - `{r.shape.name}`: {r.shape.label}, "
                          f"{r.variables} trainable variables"
                          for r in results)
  return f"""\
- Models (float32 variables, float16 compute, Adam 1e-4, fixed inputs):
{shape_lines}
- Contenders: bare Adam; TF's built-in
  `tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer` with a
  dynamic scale and with a fixed one; ours with a fixed scale (skipping
  NaN/Inf steps, the default, and applying every step as TF's fixed does),
  contrib's dynamic manager and TF2's dynamic face. Dynamic scales start at
  2**{impls.INITIAL_SCALE.bit_length() - 1} and grow every \
{impls.GROWTH_STEPS} steps; "Results" says whether any step was skipped.
- Timing: every contender has its own graph and Session (TensorFlow's
  default config: Grappler on, {os.cpu_count()} threads), and all contenders
  of a shape form one pool. Each round cycles a few times through the pool,
  one step per contender, in an order shuffled per round; a contender's value
  in a round is its fastest step there (other work on the machine only adds
  time). Ratios are per round against the reference in the same round; the
  tables give the median and, in brackets, the quartiles over rounds
  (rounds: {rounds}). {timed_pools} pools in all.
- "Targets" says "within noise" where a target was missed by the median but
  lies inside the 95% bootstrap interval of that median.
- "÷ TF built-in" compares ours with TF's wrapper of the same kind: dynamic
  with dynamic, fixed with fixed. Our default fixed scale checks for NaN/Inf
  and skips such steps; TF's fixed scale checks nothing, so that pair
  compares different work.
- Ops added: nodes of the graph minus those of bare Adam on the same model,
  at two model sizes ({", ".join(f"{r.shape.name} {r.shape.other_size} and "
                                   f"{r.shape.size}" for r in results)}),
  as `slope/var + constant` over trainable variables. The unscale multiply
  (one per gradient, in every implementation) is counted. On `embedding`
  the slope is over two extra tables; for TF's built-in it can be negative
  because Adam's sparse update, traced inside a tf.cond branch, reads its
  variables fewer times than at the top level of the graph (ours gates the
  update with one Switch and keeps it at the top level). "built" counts the
  GraphDef as Python built it, including function bodies (tf.cond branches);
  "run" counts the partition graphs the Session executed, after Grappler
  (constant folding, deduplication, pruning) and the lowering of tf.cond to
  Switch/Merge.
- Step memory: peak over one step of bytes allocated and not yet freed, from
  the allocation records of a FULL_TRACE `RunMetadata` (CPU allocator),
  median of 5 traced steps (it depends on the order ops happen to run in). It
  covers every tensor made during the step (gradients, checks, temporaries,
  Adam's new slot values), not the variables that exist between steps.
"""


def header_text(machine: Machine) -> str:
  return f"""\
<!-- --8<-- [start:before_plot] -->
# Benchmarks: what loss scaling costs per step

Written by `{machine.command}` (`make bench` runs it with its defaults);
rerun it rather than editing this file.

| | |
|---|---|
| date | {machine.date} |
| machine | {machine.cpu}, {machine.cores} cores; {machine.system} |
| software | {machine.versions} |
| load average (1 min), start / end | {machine.load_start:.2f} / \
{machine.load_end:.2f} |
| run time | {machine.minutes:.1f} min |
"""


def xla_text(xla: Dict[str, Pool]) -> str:
  names = ["tf_dynamic", "ours_contrib", "ours_tf2"]
  rows = []
  for name in names:
    rows.append([impls.BY_NAME[name].label] + [
        f"{ratio_text(pool.rows[name].vs_reference)} / "
        f"{ratio_text(pool.rows[name].vs_counterpart) or '-'}"
        for pool in xla.values()])
  bare = [f"{pool.rows['bare'].step_ms:.2f} ms" for pool in xla.values()]
  return f"""\
## Under XLA (`tf.xla.experimental.jit_scope` around model and optimizer)

Each cell: ÷ bare Adam under XLA / ÷ TF's built-in under XLA (IQR). Bare
Adam's step under XLA: {", ".join(f"{s} {b}" for s, b in zip(xla, bare))}.

{table(["implementation"] + list(xla), rows)}
"""
