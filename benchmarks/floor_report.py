"""The floor's and the realistic models' sections of BENCHMARKS.md.

`benchmarks/floor.py` measures; this turns its pools (`scaling_report.Pool`,
one per shape, N and inner optimizer, or per model) into tables and
verdicts. Every verdict is computed from the numbers beside it.
"""

import collections
import datetime
import os
import platform
import re
from typing import Dict, List, Optional

from benchmarks import least_dynamic
from benchmarks import models
from benchmarks import scaling_report
from benchmarks import sections
from benchmarks import sessions
from benchmarks import shapes
from benchmarks import timing
from benchmarks.scaling_report import Pool

FLOOR = "switch"
# The targets against the floor: step ÷ floor - 1, at most.
ABOVE_FLOOR = {"ours_contrib": 0.05, "ours_tf2": 0.05, "ours_fixed": 0.03,
               "ours_tf2_fixed": 0.03}
COUNTERPARTS = {"ours_fixed": "tf_fixed", "ours_tf2_fixed": "tf_fixed",
                "ours_contrib": "tf_dynamic", "ours_tf2": "tf_dynamic"}
MODEL_STEP_LIMIT = 1.02
MODEL_MEMORY_LIMIT = 1.05
MEMORY_TARGET = 1.10  # Issue 38, item 3: ours ÷ bare on every shape, model.


def verdict(median: float, limit: float,
            ratio: Optional[timing.Ratio] = None) -> str:
  """'yes', 'within noise (95% CI ...)' when the interval reaches the
  limit, else '**no**'."""
  if median <= limit:
    return "yes"
  if ratio is not None and ratio.ci_low <= limit:
    return f"within noise (95% CI {ratio.ci_low:.3f}-{ratio.ci_high:.3f})"
  return "**no**"


def _ci(ratio: Optional[timing.Ratio]) -> str:
  if ratio is None:
    return ""
  return f"{ratio.median:.3f} [{ratio.ci_low:.3f}-{ratio.ci_high:.3f}]"


def _table(header: List[str], rows: List[List[str]]) -> str:
  return "\n".join(["| " + " | ".join(header) + " |",
                    "|" + "|".join("---" for _ in header) + "|"] +
                   ["| " + " | ".join(row) + " |" for row in rows])


def _where(pool: Pool) -> List[str]:
  return [pool.family] + ([f"{pool.size:,}", pool.inner]
                          if pool.size else [])


def results_table(pools: List[Pool], first_run: bool = False) -> str:
  """One row per contender: step, ÷ floor and ÷ bare, kernels, memory."""
  header = (["shape", "N", "inner"] if pools[0].size else ["model"]) + [
      "contender", "step ms", "÷ floor [95% CI]", "÷ bare [95% CI]",
      "load, timing", "kernels/step (+ bare)", "step memory MB (÷ bare)"]
  if first_run:
    header += ["first run s (load)"]
  rows = []
  for pool in pools:
    bare = pool.rows["bare"]
    for name, row in pool.rows.items():
      cells = _where(pool) + [
          row.label, f"{row.step_ms:.2f}",
          "1" if name == FLOOR else _ci(row.vs_other),
          "1" if name == "bare" else _ci(row.vs_bare),
          f"{pool.load_start:.2f}-{pool.load_end:.2f}",
          f"{row.kernels:,} ({row.kernels - bare.kernels:+,})",
          f"{row.peak_bytes / 2**20:.2f} "
          f"({row.peak_bytes / bare.peak_bytes:.2f})"]
      if first_run:
        cells.append(f"{row.first_run_s:.2f} ({row.first_run_load:.2f})")
      rows.append(cells)
  return _table(header, rows)


def floor_targets(pools: List[Pool]) -> str:
  """Ours against the floor and against TF's built-in, per pool."""
  rows = []
  for pool in pools:
    for name, limit in ABOVE_FLOOR.items():
      if name not in pool.rows:
        continue
      row = pool.rows[name]
      above = row.vs_other.median - 1
      tf_row = pool.rows.get(COUNTERPARTS[name])
      below_tf = "" if tf_row is None else (
          f"{row.vs_bare.median:.3f} / {tf_row.vs_bare.median:.3f}: " +
          ("yes" if row.vs_bare.median < tf_row.vs_bare.median
           else "**no**"))
      rows.append(_where(pool) + [
          row.label, f"{above:+.3f} (<= +{limit}): " +
          verdict(row.vs_other.median, 1 + limit, row.vs_other), below_tf])
  return _table(["shape", "N", "inner", "ours", "÷ floor − 1",
                 "÷ bare, below TF built-in of its kind"], rows)


def cheapest_exact(pools: List[Pool]) -> str:
  """Per pool, the fastest exact skip (the floor, prototypes, ours)."""
  lines = []
  for pool in pools:
    exact = {name: row for name, row in pool.rows.items()
             if name not in ("bare", "tf_fixed", "tf_dynamic")}
    name = min(exact, key=lambda n: 1.0 if n == FLOOR
               else exact[n].vs_other.median)
    ratio = "1" if name == FLOOR else _ci(exact[name].vs_other)
    lines.append(f"- {' '.join(_where(pool))}: {exact[name].label} "
                 f"(÷ floor {ratio})")
  return "\n".join(lines)


def model_targets(pools: List[Pool]) -> str:
  rows = []
  for pool in pools:
    bare = pool.rows["bare"]
    for name in ABOVE_FLOOR:
      if name not in pool.rows:
        continue
      row = pool.rows[name]
      memory = row.peak_bytes / bare.peak_bytes
      rows.append([pool.family, row.label,
                   f"{row.vs_bare.median:.3f}: " + verdict(
                       row.vs_bare.median, MODEL_STEP_LIMIT, row.vs_bare),
                   f"{memory:.3f}: " + verdict(memory, MODEL_MEMORY_LIMIT)])
  return _table(["model", "ours", f"step ÷ bare <= {MODEL_STEP_LIMIT}",
                 f"step memory ÷ bare <= {MODEL_MEMORY_LIMIT}"], rows)


def _op_kind(node: str) -> str:
  """A node name without its numbering: `gradients/Cast_9_grad/Cast` ->
  `gradients/Cast_grad/Cast`, so like nodes add up."""
  return re.sub(r"_\d+(?=/|_grad|$)", "", node)


def memory_table(pools: List[Pool], top: int = 3) -> str:
  """Step memory ÷ bare of each contender, and who holds ours' peak."""
  names = [n for n in pools[0].rows if n != "bare"]
  name = next((n for n in ABOVE_FLOOR if n in names), names[-1])
  rows = []
  for pool in pools:
    bare = pool.rows["bare"].peak_bytes
    held: Dict[str, int] = collections.Counter()
    for node, size in (pool.rows[name].at_peak or {}).items():
      held[_op_kind(node)] += size
    holders = "; ".join(f"{kind} {size / 2**20:.2f} MB"
                        for kind, size in held.most_common(top))
    rows.append(_where(pool) + [f"{bare / 2**20:.2f}"] + [
        f"{pool.rows[n].peak_bytes / bare:.2f}" for n in names] + [holders])
  where = ["shape", "N", "inner"] if pools[0].size else ["model"]
  return _table(where + ["bare MB"] + [pools[0].rows[n].label for n in names] +
                [f"largest holders at the peak of "
                 f"{pools[0].rows[name].label}"], rows)


def memory_verdicts(pools: List[Pool]) -> str:
  """Which contenders stay within `MEMORY_TARGET` of bare everywhere."""
  names = [n for n in pools[0].rows if n != "bare"]
  worst = {n: max(p.rows[n].peak_bytes / p.rows["bare"].peak_bytes
                  for p in pools) for n in names}
  return "\n".join(
      f"- {pools[0].rows[n].label}: at most {worst[n]:.2f}× bare; within "
      f"{MEMORY_TARGET}× everywhere: "
      f"{'yes' if worst[n] <= MEMORY_TARGET else '**no**'}." for n in names)


def _head(title: str, command: str, minutes: float, pools: List[Pool]) -> str:
  when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
  rounds = ", ".join(f"{' '.join(_where(p))}: {scaling_report.rounds_text(p)}"
                     for p in pools)
  skipped = sorted({f"{row.label} ({' '.join(_where(p))})" for p in pools
                    for row in p.rows.values() if not row.all_applied})
  applied = ("Every contender applied every step it ran (checked on "
             "global_step)." if not skipped else
             "**Some steps were skipped**, which flatters: " +
             ", ".join(skipped) + ".")
  return (f"{title}\n\nWritten by `{command}` on {when}: "
          f"{platform.platform()}, {os.cpu_count()} cores, {minutes:.1f} min. "
          f"Interleaved rounds: {rounds}. {applied}\n")


def grid_section(pools: List[Pool], command: str, minutes: float) -> str:
  families = sorted({p.family for p in pools})
  shapes_text = "\n".join(f"- {f}: {shapes.FAMILY_LABELS[f]}."
                          for f in families)
  return f"""{sections.FLOOR_BEGIN}
{_head("## The floor: every contender against the cheapest exact skip",
       command, minutes, pools)}
The floor is {pools[0].rows[FLOOR].label!r} (`benchmarks/exact_skips.py`,
fixed scale). "÷ floor" and "÷ bare" are medians of per-round ratios with
the 95% bootstrap interval of the median; "load, timing" is the 1-minute
load average at the start and end of the rounds. Kernels and step memory
are counted (FULL_TRACE `RunMetadata`), not timed. Shapes at N variables:

{shapes_text}

{results_table(pools)}

Pools whose bare step is below {sessions.SHORT_STEP_MS:g} ms ran each
contender in {sessions.SHORT_STEP_COPIES} Sessions, each with its own copy
of the graph, and took per round the median of theirs
(`benchmarks/sessions.py`): one Session of a graph can run a few percent
apart from another of the same graph. Each Session's median step ÷ the
median of the combined steps, for the floor and for the contender
whose Sessions ran farthest apart:

{sessions.lines(pools, FLOOR)}

Targets (ours fixed within +0.03 of the floor, dynamic within +0.05, and
below TF's built-in of the same kind), from the table above:

{floor_targets(pools)}

The least a dynamic scale adds (`benchmarks/least_dynamic.py`: S read from
a variable and clean steps counted, nothing else), against the floor:

{least_dynamic.lines(pools, ABOVE_FLOOR["ours_contrib"])}

The fastest exact skip of each pool (medians; a prototype below 1 is a
cheaper floor than the one built first):

{cheapest_exact(pools)}

### Step memory ÷ bare

{memory_table(pools)}

{memory_verdicts(pools)}
{sections.FLOOR_END}"""


def models_section(pools: List[Pool], command: str, minutes: float) -> str:
  labels = "\n".join(f"- {p.family}: {models.LABELS[p.family]}."
                     for p in pools)
  return f"""{sections.MODELS_BEGIN}
{_head("## Realistic models (Adam, float16 compute, float32 variables)",
       command, minutes, pools)}
{labels}

{results_table(pools, first_run=True)}

Targets, from the table above ("within noise": the 95% interval of the
median reaches the limit):

{model_targets(pools)}

### Step memory ÷ bare

{memory_table(pools)}

{memory_verdicts(pools)}
{sections.MODELS_END}"""
