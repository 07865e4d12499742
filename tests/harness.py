"""Helpers shared by the tests: build a fresh graph, run it, read state back.

Only public API is used: managers are read through `get_loss_scale()` and
`variables()`.
"""

from typing import Callable, Dict, List, Sequence

import numpy as np
import tensorflow as tf


def run_manager(make_manager: Callable, finite_steps: Sequence[bool]):
  """Feeds `finite_steps` to a fresh manager; returns per-step states.

  Returns:
    A list with one dict per step, taken after the step: "scale" plus every
    state variable by its name without the ":0".
  """
  with tf.Graph().as_default() as graph:
    manager = make_manager()
    flag = tf.compat.v1.placeholder(tf.bool, [])
    update = manager.update_loss_scale(flag)
    scale = manager.get_loss_scale()
    state = {v.op.name: v for v in manager.variables()}
    with tf.compat.v1.Session(graph=graph) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      out = []
      for finite in finite_steps:
        sess.run(update, {flag: finite})
        values = sess.run({"scale": scale, **state})
        out.append(values)
      return out


def snapshot(sess: tf.compat.v1.Session,
             variables: List[tf.Variable]) -> Dict[str, np.ndarray]:
  """Reads every variable; values are copied so later steps cannot alter them."""
  return {v.op.name: np.array(value, copy=True)
          for v, value in zip(variables, sess.run(variables))}


def assert_bit_identical(testcase, before: Dict[str, np.ndarray],
                         after: Dict[str, np.ndarray]) -> None:
  """Asserts two snapshots hold exactly the same bits (NaN == NaN)."""
  testcase.assertEqual(sorted(before), sorted(after))
  for name in before:
    a, b = before[name], after[name]
    testcase.assertEqual(a.dtype, b.dtype, name)
    testcase.assertEqual(a.tobytes(), b.tobytes(), f"{name} changed")
