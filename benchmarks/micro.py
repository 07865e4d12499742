"""Single parts timed alone: finite checks, the scale update and its mutex.

A whole step on a shared machine varies by a few percent; a part that costs
1% of it is invisible there. Run alone, in interleaved rounds like the steps,
a part's own cost shows in microseconds.
"""

from typing import Callable, Dict, List, Tuple

import numpy as np
import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer._internal import per_graph
from mp_optimizer.managers import transition
from benchmarks import timing
from benchmarks import variants

v1 = tf.compat.v1

# The gradients of each model shape: (shape, count, sparse).
GRADIENTS = {
    "many_small": [((64, 64), 100, False), ((64,), 100, False)],
    "wide": [((1024, 1024), 4, False), ((1024,), 4, False)],
    "embedding": [((256, 64), 1, True), ((64, 1), 1, False)],
}
CHECKS = {
    "TF's: is_finite + reduce_all per gradient":
        variants.per_gradient_is_finite,
    "one reduce_sum per gradient (before)": variants.per_gradient_sum,
    "one reduce_sum per gradient, shared axes constant":
        lambda grads: variants.per_gradient_sum(grads, shared_axes=True),
    "add_n per shape group, no size limit": variants.grouped_without_limit,
    "add_n per shape group up to 65,536 entries (now)": managers.all_finite,
}


def _gradients(shape_name: str) -> List:
  """Variable reads of the shape's gradient sizes (no copy, fresh each run)."""
  rng = np.random.RandomState(0)
  grads = []
  for shape, count, sparse in GRADIENTS[shape_name]:
    for _ in range(count):
      values = tf.Variable(rng.randn(*shape).astype(np.float32)).read_value()
      grads.append(tf.IndexedSlices(values, tf.range(shape[0]),
                                    tf.constant([50_000, shape[1]]))
                   if sparse else values)
  return grads


def _session_runner(build: Callable[[], object]) -> Callable[[], None]:
  graph = tf.Graph()
  with graph.as_default():
    fetch = build()
    init = v1.global_variables_initializer()
  session = v1.Session(graph=graph)
  session.run(init)
  return lambda: session.run(fetch)


def finite_checks(seconds: float,
                  min_rounds: int = timing.MIN_ROUNDS) -> Dict[str, Dict[str, float]]:
  """Microseconds per check, above a do-nothing run, per shape and check."""
  results = {}
  for shape_name in GRADIENTS:
    runners = {"nothing": _session_runner(tf.no_op)}
    for label, check in CHECKS.items():
      runners[label] = _session_runner(
          lambda check=check, shape_name=shape_name: check(
              _gradients(shape_name)))
    rounds = timing.interleaved(runners, seconds / len(GRADIENTS),
                                min_rounds=min_rounds)
    base = rounds["nothing"]
    results[shape_name] = {label: float(np.median(rounds[label] - base)) * 1e6
                           for label in CHECKS}
  return results


def _one_gradient_update(make_loss_scale) -> Tuple:
  gradient = v1.placeholder_with_default(1.0, [])
  update_op, _ = make_loss_scale().update([gradient])
  return update_op


def state_updates(seconds: float,
                  min_rounds: int = timing.MIN_ROUNDS) -> Dict[str, float]:
  """Microseconds per `update()` of a dynamic scale, one scalar gradient."""
  contenders = {
      "nothing": tf.no_op,
      "TF's DynamicLossScale (nested tf.cond)": lambda: _one_gradient_update(
          v1.mixed_precision.DynamicLossScale),
      "ours, DynamicLossScale (Switch-gated writes)":
          lambda: _one_gradient_update(managers.DynamicLossScale),
  }
  return _above_nothing(contenders, seconds, min_rounds)


def _above_nothing(contenders, seconds: float,
                   min_rounds: int) -> Dict[str, float]:
  """Microseconds of each contender above the one named "nothing"."""
  runners = {label: _session_runner(build)
             for label, build in contenders.items()}
  rounds = timing.interleaved(runners, seconds, min_rounds=min_rounds)
  return {label: float(np.median(rounds[label] - rounds["nothing"])) * 1e6
          for label in contenders if label != "nothing"}


def _contrib_update(locked: bool, whole_machine: bool = False):
  """contrib's dynamic update on an always-finite flag, with or without lock.

  Locked is the manager's own `update_loss_scale`. Unlocked runs the same
  `transition.write_next_state`, with the same policy, on three variables
  of its own, with no mutex around it. `whole_machine` is the update as it
  was before `transition.counting_only` (retired 2026-11-25): under the same
  kind of mutex, every variable read and `next_state` written back on every
  step.
  """
  finite = v1.placeholder_with_default(True, [])
  if locked and not whole_machine:
    manager = managers.ExponentialUpdateLossScaleManager(2**12, 2000)
    return manager.update_loss_scale(finite)
  variables = transition.Variables(tf.Variable(2.0**12, name="loss_scale"),
                                   tf.Variable(0, name="good_steps"),
                                   tf.Variable(0, name="bad_steps"))
  policy = transition.Policy(
      incr_every=2000, decr_every=2, incr_ratio=2.0, decr_ratio=0.8,
      shrink_by_dividing=False, min_scale=1.0, max_scale=None,
      hysteresis="contrib")
  if not whole_machine:
    return transition.write_next_state(policy, variables, finite)

  def whole():
    new = transition.next_state(policy, transition.State(
        variables.scale.read_value(), variables.good_steps.read_value(),
        variables.bad_steps.read_value()), finite)
    return [variables.scale.assign(new.scale, read_value=False),
            variables.good_steps.assign(new.good_steps, read_value=False),
            variables.bad_steps.assign(new.bad_steps, read_value=False)]
  return per_graph.Mutex("whole_machine_mutex", "").run(whole, after=[finite])


def locked_updates(seconds: float,
                   min_rounds: int = timing.MIN_ROUNDS) -> Dict[str, float]:
  """Microseconds per update of contrib's dynamic scale, locked or not."""
  return _above_nothing({
      "nothing": tf.no_op,
      "without the mutex (the same transition)":
          lambda: _contrib_update(locked=False),
      "with the mutex (the library's)": lambda: _contrib_update(locked=True),
      "with the mutex, the whole state machine on every step (retired)":
          lambda: _contrib_update(locked=True, whole_machine=True),
  }, seconds, min_rounds)
