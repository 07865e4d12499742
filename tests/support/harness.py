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


def _case_name(value) -> str:
  """A readable test-name part for one parameter value."""
  if isinstance(value, bool):
    return str(value).lower()
  if isinstance(value, (int, float, np.floating)):
    return f"{value:g}".replace("+", "").replace("-", "minus")
  if isinstance(value, str):
    return value
  if isinstance(value, (tuple, list)):
    return "_to_".join(_case_name(v) for v in value)
  if isinstance(value, dict):
    return "_".join(f"{k}_{_case_name(v)}" for k, v in value.items())
  return getattr(value, "__name__", type(value).__name__).strip("_")


def named_product(**axes) -> List[dict]:
  """`parameterized.product`, with each case named by its values.

  For `@parameterized.named_parameters(named_product(a=[1, 2], b=["x"]))`
  the cases are `a_1_b_x` and `a_2_b_x`, so a failure names what broke.
  """
  cases = [{}]
  for axis, values in axes.items():
    cases = [{**case, axis: value} for case in cases for value in values]
  return [dict(testcase_name="_".join(f"{axis}_{_case_name(value)}"
                                      for axis, value in case.items()),
               **case) for case in cases]
