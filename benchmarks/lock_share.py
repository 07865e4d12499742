"""The share of a training step that the dynamic scale's mutex takes.

One training step (a chain of 10 float16 layers, float32 variables, SGD or
Adam, contrib's dynamic scale with a growth due once in 2,000 steps) is
built three times, with three updates of the same state machine:

- "no mutex": `transition.write_next_state` with no lock (not safe under
  concurrency; the reference);
- "mutex every step (before)": the same writes inside the state's mutex,
  as the update was built before the lock-free count;
- "lock-free count (now)": `ExponentialUpdateLossScaleManager` as the
  library builds it (`managers.fast_path`).

The three run in interleaved rounds (`benchmarks.timing`); each ratio is
per round, against "no mutex", with the load average before and after.

Usage: python benchmarks/lock_share.py [--seconds 60] [--smoke]
"""

import argparse
import os
import pathlib
import sys
from typing import Callable, Dict, List

import tensorflow as tf

if __package__ in (None, ""):  # Run as a script: the repository root.
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

# pylint: disable=wrong-import-position
import mp_optimizer
from mp_optimizer import managers
from mp_optimizer._internal import per_graph
from mp_optimizer.managers import transition
from benchmarks import shapes
from benchmarks import timing

v1 = tf.compat.v1
VARIABLES = 10
PERIOD = 2000
POLICY = transition.Policy(
    incr_every=PERIOD, decr_every=2, incr_ratio=2.0, decr_ratio=0.8,
    shrink_by_dividing=False, min_scale=1.0, max_scale=None,
    hysteresis="contrib")
INNERS = {"sgd": lambda: v1.train.GradientDescentOptimizer(1e-3),
          "adam": lambda: v1.train.AdamOptimizer(1e-3)}
UPDATES = ("no mutex", "mutex every step (before)", "lock-free count (now)")


class _SameTransition(managers.LossScaleManager):
  """contrib's dynamic scale: `write_next_state`, with or without the mutex."""

  def __init__(self, locked: bool):
    self._locked = locked
    self._variables = transition.Variables(
        tf.Variable(2.0**12, name="loss_scale", trainable=False),
        tf.Variable(0, name="good_steps", trainable=False),
        tf.Variable(0, name="bad_steps", trainable=False))

  @property
  def dynamic(self) -> bool:
    return True

  def get_loss_scale(self) -> tf.Variable:
    return self._variables.scale

  def variables(self) -> List[tf.Variable]:
    return list(vars(self._variables).values())

  def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
    if not self._locked:
      return transition.write_next_state(POLICY, self._variables,
                                         finite_grads)
    return per_graph.Mutex("loss_scale_mutex", "").run(
        lambda: [transition.write_next_state(POLICY, self._variables,
                                             finite_grads)],
        after=[finite_grads])


MANAGERS: Dict[str, Callable[[], managers.LossScaleManager]] = {
    UPDATES[0]: lambda: _SameTransition(locked=False),
    UPDATES[1]: lambda: _SameTransition(locked=True),
    UPDATES[2]: lambda: managers.ExponentialUpdateLossScaleManager(
        2.0**12, PERIOD),
}


def _runner(inner: str, update: str) -> Callable[[], None]:
  """One step of the 10-variable chain in its own graph and Session."""
  graph = tf.Graph()
  with graph.as_default():
    loss = shapes.chain(VARIABLES)
    train_op = mp_optimizer.LossScaleOptimizer(
        INNERS[inner](), MANAGERS[update]()).minimize(
            loss, global_step=v1.train.get_or_create_global_step())
    init = v1.global_variables_initializer()
  session = v1.Session(graph=graph)
  session.run(init)
  return lambda: session.run(train_op)


def measure(seconds: float, smoke: bool) -> List[List[str]]:
  """Times the three updates per inner optimizer; returns the table rows."""
  rows = []
  for inner in INNERS:
    load_start = os.getloadavg()[0]
    rounds = timing.interleaved(
        {update: _runner(inner, update) for update in UPDATES},
        seconds / len(INNERS), min_rounds=1 if smoke else timing.MIN_ROUNDS)
    load_end = os.getloadavg()[0]
    base_ms = timing.step_seconds(rounds, UPDATES[0]) * 1e3
    for update in UPDATES[1:]:
      r = timing.ratio(rounds, update, UPDATES[0])
      rows.append([inner, update, f"{r.median:.3f}",
                   f"{r.ci_low:.3f}-{r.ci_high:.3f}",
                   f"{len(rounds[update])}", f"{base_ms:.3f}",
                   f"{load_start:.1f} / {load_end:.1f}"])
  return rows


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seconds", type=float, default=60.0,
                      help="time budget for the rounds, both optimizers")
  parser.add_argument("--smoke", action="store_true",
                      help="one round each (for the tests)")
  args = parser.parse_args()
  tf.compat.v1.disable_eager_execution()
  rows = measure(args.seconds, args.smoke)
  header = ["inner", "update", "step ÷ no mutex", "95% CI", "rounds",
            "no-mutex step (ms)", "load avg start / end"]
  print("| " + " | ".join(header) + " |")
  print("|" + "---|" * len(header))
  for row in rows:
    print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
  main()
