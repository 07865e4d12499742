"""The "what was tried" sections of BENCHMARKS.md, from the run's numbers."""

from typing import Dict

from benchmarks import implementations as impls
from benchmarks import report


def _median(pools: Dict[str, report.Pool], shape: str, name: str) -> float:
  return pools[shape].rows[name].vs_reference.median


def _compare(now: float, before: float) -> str:
  """'faster' or 'slower' beyond 10% and 5 µs, else 'same within noise'."""
  if abs(now - before) <= max(5.0, 0.1 * before):
    return "same within noise"
  return "faster" if now < before else "slower"


def checks_text(checks: Dict[str, Dict[str, float]], pools) -> str:
  labels = list(next(iter(checks.values())))
  now, before = labels[-1], labels[1]
  micro = report.table(["check, run alone"] + [f"{s} µs" for s in checks],
                       [[label] + [f"{checks[s][label]:.0f}" for s in checks]
                        for label in labels])
  gains = "; ".join(
      f"{shape}: {checks[shape][before]:.0f} -> {checks[shape][now]:.0f} µs "
      f"({_compare(checks[shape][now], checks[shape][before])})"
      for shape in checks)
  slower = [s for s in checks
            if _compare(checks[s][now], checks[s][before]) == "slower"]
  verdict = ("Grouping is kept: nowhere slower, faster where many gradients "
             "share a shape." if not slower else
             "Grouping was slower than one sum per gradient on "
             f"{', '.join(slower)} in this run.")
  steps = report.pool_table(pools, ["check_tf", "check_sum_each",
                                    "check_grouped_all", "ours_fixed"])
  return f"""\
### The finite check

{micro}

Whole steps (the optimizer's single-Switch gate, fixed scale; "ours, fixed"
is the grouped check):

{steps}

Per-gradient sums to grouped sums, run alone: {gains}. {verdict}

A separate constant for the reduction axes of every `reduce_sum` costs
nothing at run time: Grappler merges identical constants (compare "ops
added, built" with "run" above), so sharing one per rank would only make the
built graph smaller. Every NaN and Inf is still caught, including Inf +
(-Inf) within a tensor or across tensors added by `add_n`, and NaN in sparse
values (`tests/test_finite.py`; compiled by XLA in `tests/test_xla.py`).
"""


def gate_text(pools, updates: Dict[str, float]) -> str:
  gates = report.pool_table(pools, ["ours_fixed_apply_all", "gate_cond",
                                    "gate_cond_tf1", "gate_switch",
                                    "gate_switch_waiting"])
  cond = _median(pools, "many_small", "gate_cond")
  switch = _median(pools, "many_small", "gate_switch")
  waiting = _median(pools, "many_small", "gate_switch_waiting")
  floor = _median(pools, "many_small", "ours_fixed_apply_all")
  state = report.table(["update of a dynamic scale, run alone", "µs"],
                       [[label, f"{us:.0f}"] for label, us in updates.items()])
  state_steps = report.pool_table(pools, ["ours_fixed", "ours_contrib",
                                          "ours_tf2"])
  grappler = report.pool_table(pools, ["ours_tf2", "bare_no_grappler",
                                       "ours_tf2_no_grappler"])
  previous = report.pool_table(pools, ["ours_tf2", "previous"])
  return f"""\
### The gate

The optimizer gates the inner update with one Switch on the flag
(`mp_optimizer.gating`): every op of the apply hangs off the Switch's true
side through a control edge, so a skipped step runs none of them, and no
input is switched. It used to be `tf.cond`, which captures every input of
the apply (each gradient, each variable and slot handle); each capture
becomes a Switch when the cond is lowered: about four executed ops per
variable for Adam.

{gates}

On many_small, unscaling alone costs {floor:.3f}× bare; with `tf.cond` as
the gate, {cond:.3f}×; with the single Switch, {switch:.3f}×. Any design
that skips a whole step must also hold every update back until the last
gradient is known to be finite, where bare Adam updates each variable as
soon as its gradient exists; the single Switch with a flag that only waits
for all gradients shows that floor: {waiting:.3f}×.

### The scale update

{state}

Whole steps: a fixed scale (no update) against both dynamic faces:

{state_steps}

### Grappler

{grappler}

### The whole step with the earlier tf.cond gate

The optimizer as it is (grouped check, single-Switch gate, TF2 dynamic
update after the gate) next to the same step gated by `tf.cond`:

{previous}
"""


ONE_OFF = """\
### Also tried, in separate runs (not repeated by this script)

On a 2-core AMD EPYC VM (TensorFlow 2.21, shared, load average 3 to 5),
200 s of interleaved rounds each, many_small:

- Adding same-shaped gradients in chunks of at most 2**16 or 2**14 entries,
  so that the last `add_n` waits for fewer gradients, instead of one `add_n`
  per shape: 1.060× and 1.064× bare against 1.064× (single-Switch gate), no
  difference; the simpler grouping stays.
- Running the dynamic scale's update beside the apply instead of after it
  (TF's built-in runs it beside): 1.113× against 1.113× with the
  single-Switch gate, 1.185× against 1.185× with tf.cond; no difference, so
  the documented order (update after the apply) stays.
"""


def xla_text(xla: Dict[str, report.Pool]) -> str:
  names = ["tf_dynamic", "ours_contrib", "ours_tf2"]
  rows = []
  for name in names:
    rows.append([impls.BY_NAME[name].label] + [
        f"{report.ratio_text(pool.rows[name].vs_reference)} / "
        f"{report.ratio_text(pool.rows[name].vs_counterpart) or '-'}"
        for pool in xla.values()])
  bare = [f"{pool.rows['bare'].step_ms:.2f} ms" for pool in xla.values()]
  return f"""\
## Under XLA (`tf.xla.experimental.jit_scope` around model and optimizer)

Each cell: ÷ bare Adam under XLA / ÷ TF's built-in under XLA (IQR). Bare
Adam's step under XLA: {", ".join(f"{s} {b}" for s, b in zip(xla, bare))}.

{report.table(["implementation"] + list(xla), rows)}
"""
