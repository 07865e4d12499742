"""The "Growth with the number of variables" section: table, plot, notes.

`benchmarks/scaling.py` measures; this turns its pools into Markdown and a
PNG, and puts the section into BENCHMARKS.md between its markers, leaving the
rest of the file (written by `benchmarks/overhead.py`) as it is.

The docs site includes BENCHMARKS.md from docs/ (`docs/benchmarks.md`), where
the plot's path differs; the file is therefore cut into two snippet sections
around the plot's line, which the docs page includes with its own image.
"""

import dataclasses
import datetime
import os
import platform
from typing import Dict, List, Optional, Tuple

from benchmarks import timing

BEGIN = "<!-- scaling: written by benchmarks/scaling.py -->"
# pymdownx.snippets section markers (docs/benchmarks.md includes both parts).
BEFORE_PLOT_END = "<!-- --8<-- [end:before_plot] -->"
AFTER_PLOT_START = "<!-- --8<-- [start:after_plot] -->"
AFTER_PLOT_END = "<!-- --8<-- [end:after_plot] -->"
TITLE = "## Growth with the number of variables"
# The targets for ours (contrib dynamic) at every N and inner.
KERNELS_ADDED_LIMIT = 30
ABOVE_FLOOR_LIMIT = 0.03


@dataclasses.dataclass(frozen=True)
class Row:
  """One contender at one size."""
  label: str
  kernels: int
  ops: int
  graph_mb: float
  build_s: float
  first_run_s: float
  first_run_load: float
  rss_mb: float
  step_ms: float
  vs_bare: timing.Ratio
  all_applied: bool
  peak_bytes: int = 0  # Step memory (`graph_cost.Trace`).
  at_peak: Optional[Dict[str, int]] = None  # Bytes held at it, by node.
  vs_other: Optional[timing.Ratio] = None  # ÷ a second reference.
  # Each copy's median step ÷ that of the combined steps (`sessions.spread`).
  copies: Tuple[float, ...] = (1.0,)


@dataclasses.dataclass(frozen=True)
class Pool:
  """Every contender at one size and inner optimizer, timed together."""
  size: int
  inner: str
  rows: Dict[str, Row]
  rounds: int
  load_start: float
  load_end: float
  family: str = "chain"
  parts: int = 1  # Timed in parts, each with bare (`scaling.measure`).
  copies: int = 1  # Sessions of each contender (`benchmarks.sessions`).


def rounds_text(pool: Pool) -> str:
  """The pool's rounds, its parts if it was timed in parts, and its copies
  if each contender ran in several Sessions."""
  text = f"{pool.rounds}" if pool.parts == 1 else (
      f"{pool.rounds} or more in each of {pool.parts} parts (each with "
      "bare and the references; too large for all at once)")
  if pool.copies > 1:
    text += f", each contender in {pool.copies} Sessions"
  return text


def _table(pools: List[Pool]) -> str:
  header = ["N", "inner", "contender", "step ms", "÷ bare (IQR)",
            "load, timing", "kernels/step (+ bare)", "ops", "GraphDef MB",
            "build s", "first run s", "load, first run", "RSS added MB"]
  lines = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
  for pool in pools:
    bare = pool.rows["bare"]
    for name, row in pool.rows.items():
      ratio = ("1" if name == "bare" else
               f"{row.vs_bare.median:.3f} ({row.vs_bare.low:.2f}-"
               f"{row.vs_bare.high:.2f})")
      added = "" if name == "bare" else f" (+{row.kernels - bare.kernels:,})"
      lines.append("| " + " | ".join([
          f"{pool.size:,}", pool.inner, row.label, f"{row.step_ms:.2f}", ratio,
          f"{pool.load_start:.2f}-{pool.load_end:.2f}",
          f"{row.kernels:,}{added}", f"{row.ops:,}", f"{row.graph_mb:.1f}",
          f"{row.build_s:.2f}", f"{row.first_run_s:.2f}",
          f"{row.first_run_load:.2f}", f"{row.rss_mb:.0f}"]) + " |")
  return "\n".join(lines)


def _yes_no(met: bool) -> str:
  return "yes" if met else "**no**"


def targets_table(pools: List[Pool]) -> str:
  """Ours against each target, per N and inner, each verdict computed."""
  header = ["N", "inner", f"kernels added <= {KERNELS_ADDED_LIMIT}",
            f"÷ bare, above the barrier floor <= +{ABOVE_FLOOR_LIMIT}",
            "÷ bare, below TF built-in", "first run, at most TF built-in's"]
  lines = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
  needed = ("bare", "ours", "tf", "floor_barrier")
  judged = [pool for pool in pools
            if all(name in pool.rows for name in needed)]
  if not judged:
    return ("(No verdicts: they need bare, ours, tf and floor_barrier among "
            "`--contenders`.)")
  for pool in judged:
    bare, ours = pool.rows["bare"], pool.rows["ours"]
    tf_row, floor = pool.rows["tf"], pool.rows["floor_barrier"]
    added = ours.kernels - bare.kernels
    above = ours.vs_bare.median - floor.vs_bare.median
    cells = [
        f"+{added}: {_yes_no(added <= KERNELS_ADDED_LIMIT)}",
        f"{above:+.3f}: {_yes_no(above <= ABOVE_FLOOR_LIMIT)}",
        f"{ours.vs_bare.median:.3f} / {tf_row.vs_bare.median:.3f}: "
        f"{_yes_no(ours.vs_bare.median < tf_row.vs_bare.median)}",
        f"{ours.first_run_s:.2f} s / {tf_row.first_run_s:.2f} s "
        f"({ours.first_run_s / bare.first_run_s:.2f}× bare): "
        f"{_yes_no(ours.first_run_s <= tf_row.first_run_s)}"]
    lines.append("| " + " | ".join([f"{pool.size:,}", pool.inner] + cells) +
                 " |")
  return "\n".join(lines)


def _skipped(pools: List[Pool]) -> str:
  bad = sorted({f"{row.label} at N={pool.size} ({pool.inner})"
                for pool in pools for row in pool.rows.values()
                if not row.all_applied})
  if not bad:
    return "Every contender applied every step it ran (checked on global_step)."
  return "**Some steps were skipped**, which flatters: " + ", ".join(bad) + "."


def section(pools: List[Pool], minutes: float, plot: str) -> str:
  """The section's Markdown, markers included."""
  when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
  rounds = ", ".join(f"N={p.size} {p.inner} {rounds_text(p)}" for p in pools)
  return f"""{BEGIN}
{TITLE}

Written by `python benchmarks/scaling.py` (`make bench` runs it after
`overhead.py`) on {when}: {platform.platform()}, {os.cpu_count()} cores,
{minutes:.1f} min. A chain of N layers of 32x32 (float16 compute, float32
variables, orthogonal kernels: no step overflows); each contender in its own
graph and Session, all of one N and inner optimizer in one process.

{_table(pools)}

{_skipped(pools)}

Ours (contrib dynamic) against the targets, from the table above:

{targets_table(pools)}

- kernels/step: nodes in the step stats of a FULL_TRACE `RunMetadata` (what
  the executor ran), not timed, so independent of load. ops: nodes of the
  GraphDef as built.
- ÷ bare: medians of per-round ratios in interleaved rounds (rounds:
  {rounds}); "load, timing" is the 1-minute load average at the start and
  end of those rounds, "load, first run" when the first `sess.run` started.
- first run: the first `sess.run` of the train op (Grappler, partitioning,
  the first execution); build: `minimize` (`compute_gradients` and
  `apply_gradients`).
- floor, unscale only: our `compute_gradients` with each gradient unscaled
  on its own, the inner apply, no check and no gate. floor, barrier only:
  our `compute_gradients`, then the inner apply behind our gate on a flag
  that waits for every gradient and checks nothing.
{BEFORE_PLOT_END}
![Step time ÷ bare and kernels added per step against the number of variables, for SGD and Adam](docs/scaling.png)
{AFTER_PLOT_START}
*The plot: `{plot}`, drawn by the same run.*
{AFTER_PLOT_END}
"""


def replace_section(path: str, text: str) -> None:
  """Puts `text` in place of the section in `path` (or at its end)."""
  old = ""
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      old = f.read()
  head = old.split(BEGIN)[0].rstrip("\n")
  with open(path, "w", encoding="utf-8") as f:
    f.write((head + "\n\n" if head else "") + text)


def saved_section(path: str) -> str:
  """The section as `path` has it now, or "" (for `overhead.py`)."""
  if not os.path.exists(path):
    return ""
  with open(path, encoding="utf-8") as f:
    old = f.read()
  return BEGIN + old.split(BEGIN, 1)[1] if BEGIN in old else ""


def draw(pools: List[Pool], path: str) -> None:
  """Step ratio and kernels added against N, one column per inner optimizer."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  from matplotlib import pyplot  # pylint: disable=import-outside-toplevel
  inners = sorted({p.inner for p in pools}, key=[p.inner for p in pools].index)
  figure, axes = pyplot.subplots(2, len(inners), figsize=(5 * len(inners), 7),
                                 squeeze=False)
  for column, inner in enumerate(inners):
    mine = sorted((p for p in pools if p.inner == inner), key=lambda p: p.size)
    sizes = [p.size for p in mine]
    for name, row in mine[0].rows.items():
      if name == "bare":
        continue
      axes[0][column].plot(sizes, [p.rows[name].vs_bare.median for p in mine],
                           marker="o", label=row.label)
      axes[1][column].plot(
          sizes, [max(p.rows[name].kernels - p.rows["bare"].kernels, 1)
                  for p in mine], marker="o", label=row.label)
    axes[0][column].set_title(f"{inner}: step time ÷ bare")
    axes[1][column].set_title(f"{inner}: kernels per step added to bare")
    for axis in axes[:, column]:
      axis.set_xscale("log")
      axis.set_xlabel("variables (32x32 each)")
      axis.grid(True, alpha=0.3)
    axes[1][column].set_yscale("log")
  axes[0][0].legend(fontsize=8)
  figure.tight_layout()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  figure.savefig(path, dpi=90)
  pyplot.close(figure)
