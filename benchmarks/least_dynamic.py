"""What a dynamic scale costs at least, and what ours costs: a line a pool.

Two contenders of `benchmarks/floor.py` read S from a variable and count
clean steps, and do nothing else a dynamic scale does (`exact_skips`):
"scaled" on the floor's step (nothing held) and "ours_least" on the
library's (16-bit gradients held). Their distance to the floor is the least
any dynamic scale adds on that step, so a dynamic target below it cannot be
met by any design; what ours with contrib's dynamic scale costs beyond
"ours_least" is its growth and overflow logic. Every number and verdict is
computed from the pool's rows.
"""

from typing import List

from benchmarks.scaling_report import Pool

FLOOR_LEAST = "scaled"
OURS_LEAST = "ours_least"
DYNAMIC = "ours_contrib"
FIXED = "ours_fixed"


def _above(pool: Pool, name: str) -> float:
  return pool.rows[name].vs_other.median - 1


def line(pool: Pool, limit: float) -> str:
  """The pool's breakdown against the dynamic target `limit` (step ÷ floor
  - 1, at most), or '' if a contender it compares is missing."""
  if not all(name in pool.rows for name in
             (FLOOR_LEAST, OURS_LEAST, DYNAMIC, FIXED)):
    return ""
  least = _above(pool, FLOOR_LEAST)
  interval = pool.rows[FLOOR_LEAST].vs_other
  if least > limit and interval.ci_low > 1 + limit:
    reach = "above the dynamic target on its own"
  elif least > limit:
    reach = (f"above the dynamic target, within noise (95% CI "
             f"{interval.ci_low:.3f}-{interval.ci_high:.3f})")
  else:
    reach = f"{limit - least:.3f} below the dynamic target"
  fixed, ours_least, dynamic = (_above(pool, name)
                                for name in (FIXED, OURS_LEAST, DYNAMIC))
  return (f"- {pool.family} {pool.size:,} {pool.inner}: the least dynamic "
          f"scale on the floor's step {least:+.3f} ({reach}); on ours "
          f"{ours_least:+.3f}, {ours_least - fixed:+.3f} over ours fixed "
          f"({fixed:+.3f}); contrib's scale {dynamic:+.3f}, "
          f"{dynamic - ours_least:+.3f} over the least.")


def lines(pools: List[Pool], limit: float) -> str:
  """`line` of each pool that has the contenders, or a sentence saying none."""
  found = [text for text in (line(pool, limit) for pool in pools) if text]
  return "\n".join(found) if found else (
      "(No pool ran the least dynamic scale's contenders.)")
