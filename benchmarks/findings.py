"""The whole BENCHMARKS.md: targets met or not, and what each idea gave.

Every verdict here is computed from the run's numbers, so a rerun on another
machine rewrites the conclusions along with the tables.
"""

from typing import List, Optional, Tuple

from benchmarks import implementations as impls
from benchmarks import report
from benchmarks import timing
from benchmarks import tried
from mp_optimizer.managers import finite

STEP_LIMITS = {"many_small": 1.05, "wide": 1.03, "embedding": 1.03}
OPS_PER_VARIABLE_LIMIT = 1.05  # "about 1 per trainable variable"
MEMORY_LIMIT = 1.05


def _verdict(met: bool, ratio: Optional[timing.Ratio] = None,
             limit: float = 0.0) -> str:
  """'yes', '**no**', or 'within noise' when the 95% interval reaches it."""
  if met:
    return "yes"
  if ratio is not None and ratio.ci_low <= limit:
    return f"within noise (95% CI {ratio.ci_low:.3f}-{ratio.ci_high:.3f})"
  return "**no**"


def targets(results: List[report.ShapeResult]) -> List[Tuple[str, str, str]]:
  """(target, measured, verdict) for every target of the issue."""
  out = []
  for result in results:
    name = result.shape.name
    rows = result.pool.rows
    limit = STEP_LIMITS[name]
    for ours in impls.OURS_DYNAMIC:
      ratio = rows[ours].vs_reference
      out.append((f"{name}: {impls.BY_NAME[ours].label} ÷ bare <= {limit}",
                  f"{ratio.median:.3f}",
                  _verdict(ratio.median <= limit, ratio, limit)))
    for ours in impls.OURS_DYNAMIC + ("ours_fixed_apply_all",):
      ratio = rows[ours].vs_counterpart
      tf_label = impls.BY_NAME[impls.BY_NAME[ours].counterpart].label
      out.append((f"{name}: {impls.BY_NAME[ours].label} ÷ {tf_label} <= 1",
                  f"{ratio.median:.3f}",
                  _verdict(ratio.median <= 1.0, ratio, 1.0)))
    for ours in impls.OURS_DYNAMIC:
      built = result.ops[ours][0]
      out.append((f"{name}: ops added by {impls.BY_NAME[ours].label} <= "
                  "about 1/var + constant (built)", str(built),
                  _verdict(built.per_variable <= OPS_PER_VARIABLE_LIMIT)))
  embedding = next(r for r in results if r.shape.name == "embedding")
  for ours in impls.OURS_DYNAMIC:
    ratio = embedding.peak_bytes[ours] / embedding.peak_bytes["bare"]
    out.append((f"embedding: step memory of {impls.BY_NAME[ours].label} "
                f"÷ bare <= {MEMORY_LIMIT}", f"{ratio:.3f}",
                _verdict(ratio <= MEMORY_LIMIT)))
  return out


def targets_table(results) -> str:
  return report.table(["target", "measured", "met"],
                      [list(row) for row in targets(results)])


def _skipped_steps(results, xla) -> str:
  pools = [r.pool for r in results] + list(xla.values())
  bad = sorted({row.label for pool in pools for row in pool.rows.values()
                if not row.all_applied})
  if not bad:
    return "Every contender applied every step it ran (checked on global_step)."
  return ("**Some steps were skipped** (global_step behind the steps run), "
          f"which makes these rows look cheaper: {', '.join(bad)}.")


def _notes(results: List[report.ShapeResult]) -> str:
  """What limits the targets that this run missed, in its own numbers."""
  by_shape = {r.shape.name: r for r in results}
  notes = []
  missed = [shape for shape, limit in STEP_LIMITS.items()
            if any(by_shape[shape].pool.rows[o].vs_reference.median > limit
                   for o in impls.OURS_DYNAMIC)]
  for shape in missed:
    rows = by_shape[shape].pool.rows
    floor = rows["ours_fixed_apply_all"].vs_reference.median
    parts = [f"unscaling alone {floor:.3f}×"]
    for name, what in (("gate_switch_waiting",
                        "held back until every gradient exists"),
                       ("gate_switch", "with the gate"),
                       ("ours_fixed", "with gate and check"),
                       ("ours_tf2", "with gate, check and dynamic update"),
                       ("previous", "the same with a tf.cond gate")):
      if name in rows:
        parts.append(f"{what} {rows[name].vs_reference.median:.3f}×")
    notes.append(f"- Step time on {shape}: " + "; ".join(parts) + ". See "
                 "\"The gate\" below.")
  for result in results:
    lines = [result.ops[o][0] for o in impls.OURS_DYNAMIC]
    if any(line.per_variable > OPS_PER_VARIABLE_LIMIT for line in lines):
      notes.append(
          f"- Ops on {result.shape.name}: every gradient gets its unscale "
          "multiply (so do TF's); a gradient of more than "
          f"{finite.GROUP_MAX_ELEMENTS:,} entries also gets its own "
          "`reduce_sum` (and, in the built graph, its axes constant), since "
          "adding it to others first costs more memory traffic than the op "
          "saves (see \"The finite check\": no size limit).")
  grown = [f"{r.shape.name} "
           f"{r.peak_bytes['ours_tf2'] / r.peak_bytes['bare']:.2f}×"
           for r in results]
  notes.append(
      "- Step memory: a step that may be skipped keeps every gradient until "
      "the check has seen all of them, where bare Adam frees each gradient "
      "once its variable is updated; TF's built-in does the same as ours. "
      f"Ours (TF2 dynamic) ÷ bare: {', '.join(grown)}. Sparse gradients add "
      "only their rows: nothing of the embedding's full shape is made "
      "(`tests/test_sparse_graph.py`).")
  return "\n".join(notes) + "\n"


def render(machine, results, distinct, xla, checks, updates) -> str:
  pools = {r.shape.name: r.pool for r in results}
  return "\n".join([
      report.header_text(machine),
      "## Results\n",
      report.main_table(results), "",
      _skipped_steps(results, xla), "",
      "## Targets\n", targets_table(results), "", _notes(results),
      "Ops added where no two variables share a shape (the worst case for the "
      "grouped check; counted, not timed):\n", report.distinct_table(distinct),
      "",
      "## What was tried, and what it gave\n",
      tried.checks_text(checks, pools), tried.gate_text(pools, updates),
      tried.ONE_OFF, tried.xla_text(xla),
      "## Method\n", report.method_text(results, len(results) + len(xla)),
  ])


def console_summary(results) -> str:
  return "\n\n".join([report.main_table(results), targets_table(results),
                      _notes(results)])
