"""The fused finite check: every NaN and Inf is caught, in every dtype and form.

Each row of the table lists gradients and the verdict worked out by hand from
IEEE arithmetic: a NaN or Inf anywhere makes the step non-finite, including an
Inf and a -Inf that would cancel to NaN in a sum. Each row runs twice: with
fully known static shapes (the check groups same-shaped gradients and adds
them elementwise before reducing) and with unknown shapes (every gradient is
reduced on its own). Values are fed through placeholders, so the check runs at
step time and is not folded away when the graph is optimized.
"""

import dataclasses
from typing import Optional

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer.managers import finite

v1 = tf.compat.v1
T, F = True, False
NAN, INF = np.nan, np.inf
F32_MAX = float(np.finfo(np.float32).max)
F16_MAX = float(np.finfo(np.float16).max)


@dataclasses.dataclass(frozen=True)
class Grad:
  """One gradient of a row: its entries, dtype, and whether it is sparse."""
  values: np.ndarray
  dtype: str = "float32"
  sparse: bool = False


def dense(values, dtype="float32"):
  return Grad(np.asarray(values, np.float64), dtype)


def sparse(values, dtype="float32"):
  return Grad(np.asarray(values, np.float64), dtype, sparse=True)


def _ones_with(shape, index, value):
  out = np.ones(shape)
  out[index] = value
  return out


# Name, gradients, the verdict by hand.
ROWS = [
    ("empty_list", [], T),
    ("only_none", [None, None], T),
    ("finite", [dense([[1.0, -2.0], [3.5, 0.0]]), dense([0.25])], T),
    ("nan", [dense([1.0, NAN, 2.0])], F),
    ("plus_inf", [dense([1.0, INF])], F),
    ("minus_inf", [dense([-INF, 1.0])], F),
    ("inf_and_minus_inf_in_one_tensor", [dense([INF, 5.0, -INF])], F),
    ("inf_and_minus_inf_at_one_place_of_same_shaped_tensors",
     [dense([[INF, 1.0]]), dense([[-INF, 1.0]])], F),
    ("inf_and_minus_inf_in_differently_shaped_tensors",
     [dense([INF, 1.0]), dense([[-INF], [2.0]])], F),
    ("nan_beside_none", [None, dense([NAN]), None], F),
    ("nan_scalar", [dense(1.0), dense(NAN), dense(2.0)], F),
    ("empty_tensor_only", [dense(np.zeros((0, 3)))], T),
    ("empty_tensor_and_nan", [dense(np.zeros((0, 3))), dense([NAN])], F),
    ("nan_in_sparse_values", [sparse([[1.0, 2.0, 3.0], [4.0, NAN, 6.0]])], F),
    ("inf_in_sparse_values", [sparse([[1.0, -INF, 3.0]]), dense([1.0])], F),
    ("finite_sparse_and_dense",
     [sparse([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), dense([7.0])], T),
    ("one_nan_among_sixty_same_shaped",
     [dense(_ones_with((4, 4), (2, 3), NAN if i == 37 else 1.0))
      for i in range(60)], F),
    ("one_inf_in_a_tensor_too_large_to_group",
     [dense(_ones_with((300, 300), (299, 1), INF)), dense(np.ones((300, 300)))],
     F),
    ("largest_float32", [dense([F32_MAX, -F32_MAX, 1.0])], T),
    ("large_finite_values", [dense([1e37] * 30), dense([-1e37] * 30)], T),
    # Documented: finite values whose sum leaves float32's range count as
    # non-finite (the update would overflow too).
    ("float32_sum_overflows", [dense([F32_MAX, F32_MAX])], F),
    ("float32_same_place_overflows", [dense([F32_MAX]), dense([F32_MAX])], F),
    ("float16_largest_values_summed_in_float32",
     [dense([F16_MAX] * 64, "float16"), dense([F16_MAX] * 64, "float16")], T),
    ("float16_nan", [dense([1.0, NAN], "float16")], F),
    ("float16_inf", [dense([INF, 1.0], "float16")], F),
    ("float16_inf_and_minus_inf", [dense([INF], "float16"),
                                   dense([-INF], "float16")], F),
    ("float16_nan_in_sparse_values", [sparse([[NAN, 1.0]], "float16")], F),
    ("bfloat16_large_finite", [dense([1e38, 1e38], "bfloat16")], T),
    ("bfloat16_nan", [dense([NAN, 2.0], "bfloat16")], F),
    ("bfloat16_inf", [dense([-INF], "bfloat16"), dense([1.0])], F),
    ("float64_beyond_float32_range", [dense([1e300, -1e300, 1e300],
                                            "float64")], T),
    ("float64_nan", [dense([1.0, NAN], "float64")], F),
    ("float64_inf", [dense([INF], "float64")], F),
    ("float64_nan_beside_finite_float32",
     [dense([1.0]), dense([NAN], "float64")], F),
    ("float32_nan_beside_finite_float64",
     [dense([NAN]), dense([1e300], "float64")], F),
    ("every_dtype_finite",
     [dense([1.0]), dense([2.0], "float16"), dense([3.0], "bfloat16"),
      dense([4.0], "float64"), sparse([[5.0]], "float16")], T),
]


def _gradient(grad: Optional[Grad], static: bool, feed: dict):
  """Builds one gradient tensor fed from `grad.values`, or None."""
  if grad is None:
    return None
  shape = grad.values.shape if static else [None] * grad.values.ndim
  source = v1.placeholder(tf.float64, shape)
  feed[source] = grad.values
  values = tf.cast(source, grad.dtype)  # Exact for every value in ROWS.
  if not grad.sparse:
    return values
  rows = grad.values.shape[0]
  return tf.IndexedSlices(values, tf.range(rows),
                          tf.constant([rows + 5] + list(grad.values.shape[1:])))


def _cases():
  for name, grads, expected in ROWS:
    for static in (True, False):
      label = "static_shapes" if static else "unknown_shapes"
      yield (f"{name}_{label}", grads, static, expected)


class AllFiniteTest(parameterized.TestCase):

  @parameterized.named_parameters(*_cases())
  def test_verdict(self, grads, static, expected):
    with tf.Graph().as_default() as graph:
      feed = {}
      flag = managers.all_finite([_gradient(g, static, feed) for g in grads])
      self.assertEqual(flag.dtype, tf.bool)
      self.assertEqual(flag.shape.rank, 0)
      with v1.Session(graph=graph) as sess:
        self.assertIs(bool(sess.run(flag, feed)), expected)

  @parameterized.named_parameters(
      ("dense", lambda values: values),
      ("sparse", lambda values: tf.IndexedSlices(
          values, tf.range(values.shape[0]), tf.shape(values))))
  def test_every_single_bad_entry_is_caught(self, as_gradient):
    # Sweeps one NaN, Inf or -Inf over every position of every gradient.
    shapes = [(3, 2), (3, 2), (2,), (3, 2)]
    with tf.Graph().as_default() as graph:
      sources = [v1.placeholder(tf.float32, s) for s in shapes]
      grads = [as_gradient(s) for s in sources]
      flag = managers.all_finite(grads)
      with v1.Session(graph=graph) as sess:
        clean = {s: np.ones(s.shape, np.float32) for s in sources}
        self.assertTrue(sess.run(flag, clean))
        for bad in (NAN, INF, -INF):
          for target in sources:
            for index in np.ndindex(*target.shape):
              poisoned = dict(clean)
              poisoned[target] = _ones_with(target.shape, index,
                                            bad).astype(np.float32)
              self.assertFalse(sess.run(flag, poisoned),
                               f"{bad} at {index} of {target.name}")


class CheckSizeTest(parameterized.TestCase):
  """The check's ops grow with the number of distinct shapes, not variables."""

  @staticmethod
  def _ops_added(shapes) -> int:
    with tf.Graph().as_default() as graph:
      grads = [tf.ones(s) for s in shapes]
      before = len(graph.get_operations())
      managers.all_finite(grads)
      return len(graph.get_operations()) - before

  @parameterized.named_parameters(
      ("one_shape", [(64, 64)]),
      ("two_shapes", [(64, 64), (64,)]),
      ("scalars", [()]))
  def test_same_shaped_gradients_add_no_ops(self, shapes):
    self.assertEqual(self._ops_added(shapes * 10), self._ops_added(shapes * 80))

  def test_large_gradients_are_reduced_one_by_one(self):
    side = int(np.sqrt(finite.GROUP_MAX_ELEMENTS)) + 1
    self.assertGreater(self._ops_added([(side, side)] * 4),
                       self._ops_added([(side, side)] * 2))


if __name__ == "__main__":
  tf.test.main()
