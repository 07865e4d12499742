"""Single parts timed alone: the finite check, and the scale's state update.

A whole step on a shared machine varies by a few percent; a part that costs
1% of it is invisible there. Run alone, in interleaved rounds like the steps,
a part's own cost shows in microseconds.
"""

from typing import Callable, Dict, List, Tuple

import numpy as np
import tensorflow as tf

from mp_optimizer import managers
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


def finite_checks(seconds: float) -> Dict[str, Dict[str, float]]:
  """Microseconds per check, above a do-nothing run, per shape and check."""
  results = {}
  for shape_name in GRADIENTS:
    runners = {"nothing": _session_runner(tf.no_op)}
    for label, check in CHECKS.items():
      runners[label] = _session_runner(
          lambda check=check, shape_name=shape_name: check(
              _gradients(shape_name)))
    rounds = timing.interleaved(runners, seconds / len(GRADIENTS))
    base = rounds["nothing"]
    results[shape_name] = {label: float(np.median(rounds[label] - base)) * 1e6
                           for label in CHECKS}
  return results


def _one_gradient_update(make_loss_scale) -> Tuple:
  gradient = v1.placeholder_with_default(1.0, [])
  update_op, _ = make_loss_scale().update([gradient])
  return update_op


def state_updates(seconds: float) -> Dict[str, float]:
  """Microseconds per `update()` of a dynamic scale, one scalar gradient."""
  contenders = {
      "nothing": tf.no_op,
      "TF's DynamicLossScale (nested tf.cond)": lambda: _one_gradient_update(
          v1.mixed_precision.DynamicLossScale),
      "ours, DynamicLossScale (Switch-gated writes)":
          lambda: _one_gradient_update(managers.DynamicLossScale),
  }
  runners = {label: _session_runner(build)
             for label, build in contenders.items()}
  rounds = timing.interleaved(runners, seconds)
  return {label: float(np.median(rounds[label] - rounds["nothing"])) * 1e6
          for label in contenders if label != "nothing"}
