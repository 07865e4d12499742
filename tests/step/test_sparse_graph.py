"""Sparse gradients are never densified on the way through the optimizer.

An embedding's gradient is a `tf.IndexedSlices`; turning it into a dense
tensor would write the whole table every step. These tests walk the built
graph: nothing between the backprop and the update (the unscale, the finite
check, the gate) may produce a floating-point tensor of the table's full shape.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import harness
from tests.support import models

v1 = tf.compat.v1
TABLE_SHAPE = (1000, 8)
LOOKED_UP = [1, 3, 3, 7]

FACES = {
    "contrib": lambda inner: mp_optimizer.LossScaleOptimizer(
        inner, managers.ExponentialUpdateLossScaleManager(2**15, 2000)),
    "tf2": lambda inner: mp_optimizer.MixedPrecisionLossScaleOptimizer(
        inner, "dynamic"),
    "fixed": lambda inner: mp_optimizer.LossScaleOptimizer(
        inner, managers.FixedLossScaleManager(2**10)),
}


def _embedding_loss():
  """float16 lookups from a float32 table; returns (loss, table).

  Entries are small, so the scaled float16 loss stays finite at 2**15.
  """
  rng = np.random.RandomState(0)
  table = v1.get_variable(
      "table", initializer=0.01 * rng.randn(*TABLE_SHAPE).astype(np.float32))
  rows = tf.cast(tf.gather(table, tf.constant(LOOKED_UP)), tf.float16)
  return tf.cast(tf.reduce_sum(tf.square(rows)), tf.float32), table


def _is_full_shape(tensor: tf.Tensor) -> bool:
  return (tensor.dtype.is_floating and tensor.shape.rank is not None and
          tuple(tensor.shape.as_list()) == TABLE_SHAPE)


def _descendants(tensors):
  """Every op that consumes `tensors`, directly or through other ops' data."""
  seen, stack = set(), [op for t in tensors for op in t.consumers()]
  while stack:
    op = stack.pop()
    if op in seen:
      continue
    seen.add(op)
    stack.extend(c for out in op.outputs for c in out.consumers())
  return seen


def _ancestors(tensors):
  """Every op whose outputs flow into `tensors`."""
  seen, stack = set(), [t.op for t in tensors]
  while stack:
    op = stack.pop()
    if op in seen:
      continue
    seen.add(op)
    stack.extend(t.op for t in op.inputs)
  return seen


def _full_shape_outputs(ops):
  return sorted(t.name for op in ops for t in op.outputs if _is_full_shape(t))


def _table_gradient(opt, loss, table):
  grads = dict((v.ref(), g) for g, v in opt.compute_gradients(loss))
  return grads[table.ref()]


class NoDensificationTest(parameterized.TestCase):

  @parameterized.named_parameters(harness.named_product(face=sorted(FACES), optimizer=["sgd", "adam"]))
  def test_gradient_path_holds_no_table_shaped_tensor(self, face, optimizer):
    with tf.Graph().as_default() as graph:
      loss, table = _embedding_loss()
      opt = FACES[face](models.OPTIMIZERS[optimizer]())
      grad = _table_gradient(opt, loss, table)
      self.assertIsInstance(grad, tf.IndexedSlices)
      parts = [grad.values, grad.indices, grad.dense_shape]
      # Backprop and unscale: only the table itself may have its shape.
      upstream = [op for op in _ancestors(parts)
                  if op.type not in ("VarHandleOp", "ReadVariableOp")]
      self.assertEqual(_full_shape_outputs(upstream), [])
      train_op = opt.apply_gradients([(grad, table)])
      # Finite check and gate, everything downstream of the sparse values.
      downstream = _descendants([grad.values])
      self.assertIn("IsFinite", {op.type for op in downstream})
      self.assertEqual(_full_shape_outputs(downstream), [])
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        before = harness.snapshot(sess, [table])["table"]
        sess.run(train_op)
        after = harness.snapshot(sess, [table])["table"]
    untouched = np.setdiff1d(np.arange(TABLE_SHAPE[0]), LOOKED_UP)
    np.testing.assert_array_equal(after[untouched], before[untouched])
    self.assertFalse(np.array_equal(after[LOOKED_UP], before[LOOKED_UP]))

  def test_inspection_sees_a_densified_gradient(self):
    # The same walk on a gradient that is densified on purpose finds it, so
    # the tests above would fail if the optimizer densified.
    with tf.Graph().as_default():
      loss, table = _embedding_loss()
      opt = FACES["tf2"](models.OPTIMIZERS["sgd"]())
      grad = _table_gradient(opt, loss, table)
      densified = tf.convert_to_tensor(grad)
      managers.all_finite([densified])
      self.assertNotEqual(_full_shape_outputs(_descendants([grad.values])), [])


if __name__ == "__main__":
  tf.test.main()
