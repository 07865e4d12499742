"""Interleaved timing: every contender runs in every round, step by step.

A shared machine speeds up and slows down within seconds. Each round
therefore cycles through all contenders a few times, one step each, in an
order shuffled per round, so that steps compared with each other run within
a fraction of a second. A contender's value in a round is its fastest step
there (other work on the machine can only add time to a step, never remove
it); ratios are taken within rounds, and the median over rounds is reported.
"""

import dataclasses
import time
from typing import Callable, Dict, List

import numpy as np

ROUND_SECONDS = 0.6  # Aim for rounds this long.
MAX_CYCLES = 8  # Steps per contender per round, at most.
MIN_ROUNDS = 8


BOOTSTRAP_SAMPLES = 2000


@dataclasses.dataclass(frozen=True)
class Ratio:
  """Per-round ratios of two contenders.

  Attributes:
    median: Median over rounds.
    low, high: Quartiles over rounds (the spread of single rounds).
    ci_low, ci_high: 95% bootstrap interval of the median (how well the
      median itself is known).
  """
  median: float
  low: float
  high: float
  ci_low: float
  ci_high: float


def _time_steps(run: Callable[[], None], steps: int) -> List[float]:
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    run()
    times.append(time.perf_counter() - start)
  return times


def interleaved(contenders: Dict[str, Callable[[], None]], seconds: float,
                seed: int = 0, warmup_steps: int = 5,
                min_rounds: int = MIN_ROUNDS) -> Dict[str, np.ndarray]:
  """Times `contenders` in interleaved rounds for about `seconds`.

  Args:
    contenders: Name -> a callable that runs one step.
    seconds: Time budget for the rounds (at least `min_rounds` are run).
    seed: Seeds the order of contenders within rounds.
    warmup_steps: Untimed steps per contender first (also sizes rounds).
    min_rounds: Rounds run even when `seconds` is up (a smoke run takes 1).

  Returns:
    Name -> array with one value per round: the contender's fastest step in
    that round, in seconds.
  """
  cycle = sum(min(_time_steps(run, warmup_steps))
              for run in contenders.values())
  cycles = int(np.clip(round(ROUND_SECONDS / max(cycle, 1e-6)), 2,
                       MAX_CYCLES))
  rng = np.random.RandomState(seed)
  names = sorted(contenders)
  rounds = {name: [] for name in names}
  deadline = time.perf_counter() + seconds
  while len(rounds[names[0]]) < min_rounds or time.perf_counter() < deadline:
    order = rng.permutation(names)
    best = dict.fromkeys(names, float("inf"))
    for _ in range(cycles):
      for name in order:
        best[name] = min(best[name], _time_steps(contenders[name], 1)[0])
    for name in names:
      rounds[name].append(best[name])
  return {name: np.array(values) for name, values in rounds.items()}


def ratio(rounds: Dict[str, np.ndarray], name: str, reference: str) -> Ratio:
  """Median and quartiles of per-round `name` / `reference` step times."""
  per_round = rounds[name] / rounds[reference]
  low, median, high = np.percentile(per_round, [25, 50, 75])
  resampled = np.random.RandomState(0).choice(
      per_round, size=(BOOTSTRAP_SAMPLES, per_round.size))
  ci_low, ci_high = np.percentile(np.median(resampled, axis=1), [2.5, 97.5])
  return Ratio(float(median), float(low), float(high), float(ci_low),
               float(ci_high))


def step_seconds(rounds: Dict[str, np.ndarray], name: str) -> float:
  """Median over rounds of the contender's fastest step in the round."""
  return float(np.median(rounds[name]))
