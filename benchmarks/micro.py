"""The dynamic scale's update timed alone, with and without its mutex.

A whole step on a shared machine varies by a few percent; a part that costs
1% of it is invisible there. Run alone, in interleaved rounds like the steps,
a part's own cost shows in microseconds.
"""

from typing import Callable, Dict

import numpy as np
import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer.managers import transition
from benchmarks import timing

v1 = tf.compat.v1


def _session_runner(build: Callable[[], object]) -> Callable[[], None]:
  graph = tf.Graph()
  with graph.as_default():
    fetch = build()
    init = v1.global_variables_initializer()
  session = v1.Session(graph=graph)
  session.run(init)
  return lambda: session.run(fetch)


def _above_nothing(contenders, seconds: float,
                   min_rounds: int) -> Dict[str, float]:
  """Microseconds of each contender above the one named "nothing"."""
  runners = {label: _session_runner(build)
             for label, build in contenders.items()}
  rounds = timing.interleaved(runners, seconds, min_rounds=min_rounds)
  return {label: float(np.median(rounds[label] - rounds["nothing"])) * 1e6
          for label in contenders if label != "nothing"}


def _contrib_update(locked: bool):
  """contrib's dynamic update on an always-finite flag, with or without lock.

  Locked is the manager's own `update_loss_scale`. Unlocked runs the same
  `transition.write_next_state`, with the same policy, on three variables
  of its own, with no mutex around it.
  """
  finite = v1.placeholder_with_default(True, [])
  if locked:
    manager = managers.ExponentialUpdateLossScaleManager(2**12, 2000)
    return manager.update_loss_scale(finite)
  variables = transition.Variables(tf.Variable(2.0**12, name="loss_scale"),
                                   tf.Variable(0, name="good_steps"),
                                   tf.Variable(0, name="bad_steps"))
  policy = transition.Policy(
      incr_every=2000, decr_every=2, incr_ratio=2.0, decr_ratio=0.8,
      shrink_by_dividing=False, min_scale=1.0, max_scale=None,
      hysteresis="contrib")
  return transition.write_next_state(policy, variables, finite)


def locked_updates(seconds: float,
                   min_rounds: int = timing.MIN_ROUNDS) -> Dict[str, float]:
  """Microseconds per update of contrib's dynamic scale, locked or not."""
  return _above_nothing({
      "nothing": tf.no_op,
      "without the mutex (the same transition)":
          lambda: _contrib_update(locked=False),
      "with the mutex (the library's)": lambda: _contrib_update(locked=True),
  }, seconds, min_rounds)
