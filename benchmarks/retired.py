"""Tables of `overhead.py --retired`: the designs the library left behind.

Only numbers and what each row is; docs/performance-history.md tells why
each design was retired, with the figures of the run that decided it.
"""

from typing import Dict, Optional

from benchmarks import report

CHECK_ROWS = ["check_tf", "check_sum_each", "check_grouped_all", "ours_fixed"]
GATE_ROWS = ["ours_fixed_apply_all", "gate_cond", "gate_cond_tf1",
             "gate_switch", "gate_switch_waiting"]
UPDATE_ROWS = ["ours_fixed", "ours_contrib", "ours_tf2"]
GRAPPLER_ROWS = ["ours_tf2", "bare_no_grappler", "ours_tf2_no_grappler"]
COND_ROWS = ["ours_tf2", "previous"]


def text(checks: Dict[str, Dict[str, float]],
         updates: Optional[Dict[str, float]], pools) -> str:
  """The section: checks alone, then whole steps per retired part."""
  micro = report.table(["check, run alone"] + [f"{s} µs" for s in checks],
                       [[label] + [f"{checks[s][label]:.0f}" for s in checks]
                        for label in next(iter(checks.values()))])
  state = report.table(["update of a dynamic scale, run alone", "µs"],
                       [[label, f"{us:.0f}"]
                        for label, us in (updates or {}).items()])
  return f"""\
## Retired designs, measured again (`--retired`)

See docs/performance-history.md for what each of them was and why it went.

Finite checks, run alone:

{micro}

Whole steps with another finite check (single-Switch gate, fixed scale):

{report.pool_table(pools, CHECK_ROWS)}

Whole steps with another gate, or none:

{report.pool_table(pools, GATE_ROWS)}

The scale update, run alone, and whole steps with and without it:

{state}

{report.pool_table(pools, UPDATE_ROWS)}

Grappler off:

{report.pool_table(pools, GRAPPLER_ROWS)}

The whole step with the earlier `tf.cond` gate:

{report.pool_table(pools, COND_ROWS)}
"""
