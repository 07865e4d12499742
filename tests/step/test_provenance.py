"""The record of what the step built (`_internal.provenance`), read where
public behaviour cannot show it.

`compute_gradients` writes the scaled loss, the read of S behind it, the
unscaled gradients and the stacks of small ones; `apply_gradients` the
scale's sources; `allow_unscaled_gradients()` its open blocks. The finite
check reads a stack whole only if the record names it: an unrelated
`tf.unstack` in the same graph is checked slice by slice.
"""

from absl.testing import absltest
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from mp_optimizer._internal import provenance

v1 = tf.compat.v1
SMALL, BIG = [8, 8], [300, 300]  # BIG is above finite.GROUP_MAX_ELEMENTS.


def _model(graph):
  """Three small variables of one shape and a big one; their loss."""
  with graph.as_default():
    variables = [v1.get_variable(f"small_{i}", SMALL) for i in range(3)]
    variables.append(v1.get_variable("big", BIG))
    loss = tf.add_n([tf.reduce_sum(v * v) for v in variables])
  return variables, loss


def _optimizer():
  return mp_optimizer.LossScaleOptimizer(
      v1.train.GradientDescentOptimizer(0.1),
      managers.ExponentialUpdateLossScaleManager(2**10, 1000))


class ProvenanceTest(absltest.TestCase):

  def test_compute_gradients_records_what_it_built(self):
    graph = tf.Graph()
    _, loss = _model(graph)
    with graph.as_default():
      grads = [g for g, _ in _optimizer().compute_gradients(loss)]
    record = provenance.recorded(graph)
    scaled, multiplier = record.scaled_losses
    self.assertEqual(scaled.op.type, "Mul")
    self.assertIs(scaled.op.inputs[0], loss)
    self.assertIs(scaled.op.inputs[1], multiplier)
    read = record.multipliers[multiplier.ref()]
    self.assertEqual(list(record.multipliers), [multiplier.ref()])
    # Every gradient was unscaled with the read the loss was scaled with.
    self.assertEqual([record.unscaled[g.ref()] for g in grads], [read] * 4)
    # The three small ones are the slices of one stack, in order.
    stack, _ = record.stacks[grads[0].ref()]
    self.assertEqual([record.stacks[g.ref()] for g in grads[:3]],
                     [(stack, 0), (stack, 1), (stack, 2)])
    self.assertEqual(stack.slices, tuple(grads[:3]))
    self.assertEqual(stack.whole.shape.as_list(), [3] + SMALL)
    self.assertNotIn(grads[3].ref(), record.stacks)
    self.assertEqual((record.scale_sources, record.allowed), (set(), 0))

  def test_apply_gradients_records_the_scale_and_the_open_blocks(self):
    graph = tf.Graph()
    variables, loss = _model(graph)
    with graph.as_default():
      opt = _optimizer()
      grads = tf.gradients(loss, variables)
      with mp_optimizer.allow_unscaled_gradients():
        self.assertEqual(provenance.recorded(graph).allowed, 1)
        opt.apply_gradients(zip(grads, variables))
      self.assertEqual(provenance.recorded(graph).allowed, 0)
      scale = opt.loss_scale_manager.get_loss_scale()
    self.assertIn(id(scale.handle), provenance.recorded(graph).scale_sources)

  def test_each_graph_has_its_own_record(self):
    first, second = tf.Graph(), tf.Graph()
    _, loss = _model(first)
    with first.as_default():
      _optimizer().compute_gradients(loss)
    self.assertLen(provenance.recorded(first).scaled_losses, 2)
    self.assertEmpty(provenance.recorded(second).scaled_losses)

  def _finite_check(self, ours):
    """all_finite over the unscale's three stacked gradients (`ours`) or over
    the slices of a `tf.unstack` of the test's own, in one graph; returns
    (graph, the unscale's gradients, the placeholder the test's own slices
    come from, the flag, whether an op of the check reads the stacked
    tensor the checked slices came from)."""
    graph = tf.Graph()
    _, loss = _model(graph)
    with graph.as_default():
      grads = [g for g, _ in _optimizer().compute_gradients(loss)]
      source = v1.placeholder(tf.float32, [3] + SMALL)
      theirs = tf.unstack(source)  # A Pack/Unpack not made by the unscale.
      checked = grads[:3] if ours else theirs
      whole = checked[0].op.inputs[0]  # The Unpack's input.
      start = len(graph.get_operations())
      flag = managers.all_finite(checked)
      made = graph.get_operations()[start:]
    read = any(whole in list(op.inputs) for op in made)
    return graph, grads, source, flag, read

  def test_the_finite_check_reads_the_recorded_stack_whole(self):
    graph, grads, _, _, read = self._finite_check(ours=True)
    self.assertTrue(read)
    stack, _ = provenance.recorded(graph).stacks[grads[0].ref()]
    self.assertIs(stack.whole, grads[0].op.inputs[0])

  def test_an_unrelated_unstack_is_checked_slice_by_slice(self):
    graph, _, source, flag, read = self._finite_check(ours=False)
    self.assertFalse(read)
    clean = np.ones([3] + SMALL, np.float32)
    with v1.Session(graph=graph) as sess:
      self.assertTrue(sess.run(flag, {source: clean}))
      for index in range(3):
        poisoned = clean.copy()
        poisoned[index, 1, 2] = np.nan
        self.assertFalse(sess.run(flag, {source: poisoned}), f"slice {index}")
