"""One contender timed in several Sessions, each with its own copy of the graph.

Two Sessions of one graph, timed in the same interleaved rounds, can differ
by several percent on a step of a fraction of a millisecond, and keep that
difference through the run (docs/performance-history.md, "thirteenth": on
ten small variables, the floor's copies up to 6% apart, ours fixed up to
8%). The graph is the same; what differs is the Session (where its buffers
and variables landed, and so on): a ratio of two contenders built once
each carries that difference whole. `scaling.measure` can build each
contender `copies` times and take, in each round, the median of its
copies' times, so that one ratio compares graphs rather than two draws of
that placement.
"""

from typing import Dict, Iterable, List

import numpy as np

from benchmarks.scaling_report import Pool

# `floor.py`: a pool whose bare step is shorter than this builds each
# contender `SHORT_STEP_COPIES` times.
SHORT_STEP_MS = 1.0
SHORT_STEP_COPIES = 3


def copies_for(bare_ms: float) -> int:
  """Copies of each contender for a pool whose bare step takes `bare_ms`."""
  return SHORT_STEP_COPIES if bare_ms < SHORT_STEP_MS else 1


def instances(name: str, copies: int) -> List[str]:
  """The keys of a contender's copies: `name`, then `name@2`, `name@3`, ..."""
  if isinstance(copies, bool) or not isinstance(copies, int) or copies < 1:
    raise ValueError(f"`copies` must be a positive int, got {copies!r}.")
  return [name] + [f"{name}@{k}" for k in range(2, copies + 1)]


def combine(rounds: Dict[str, np.ndarray], names: Iterable[str],
            copies: int) -> Dict[str, np.ndarray]:
  """Per round, the median of each contender's copies' times.

  Args:
    rounds: Key -> one time per round, for every copy of every name
      (`timing.interleaved` over the keys of `instances`).
    names: The contenders to combine.
    copies: Copies of each.

  Returns:
    Name -> one time per round.
  """
  return {name: np.median(np.stack([rounds[key] for key in
                                    instances(name, copies)]), axis=0)
          for name in names}


def spread(rounds: Dict[str, np.ndarray], name: str,
           copies: int) -> List[float]:
  """Each copy's median time over rounds ÷ that of the combined times."""
  combined = float(np.median(combine(rounds, [name], copies)[name]))
  return [float(np.median(rounds[key])) / combined
          for key in instances(name, copies)]


def lines(pools: List[Pool], reference: str) -> str:
  """Per pool timed in several Sessions, each Session ÷ the median of them,
  for `reference` and for the contender whose Sessions ran farthest apart."""
  found = []
  for pool in pools:
    if pool.copies < 2:
      continue
    widest = max(pool.rows, key=lambda n: max(pool.rows[n].copies) -
                 min(pool.rows[n].copies))
    found.append(f"- {pool.family} {pool.size:,} {pool.inner}: " + "; ".join(
        pool.rows[n].label + " " + ", ".join(
            f"{c:.3f}" for c in sorted(pool.rows[n].copies))
        for n in dict.fromkeys([reference, widest])))
  return "\n".join(found) or (
      "(No pool ran its contenders in several Sessions.)")
