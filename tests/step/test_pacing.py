"""Behind the gate, the held products are made a bounded number at a time.

`_step.pacing` orders the casts of the products made behind the gate (a
chain of casts, each also waiting for the updates of the products that
leave its window), so that at most `IN_FLIGHT` times the largest product's
bytes of them are alive. These tests read the order off the graph, measure
the live bytes of those products in a traced step run by one executor
thread, check that the update is still contrib's bit for bit, and that no
edge is added where it could make a reader wait for itself or a cast wait
for a reader that does not run.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from benchmarks import shapes
import mp_optimizer
from mp_optimizer import managers
from mp_optimizer._step import pacing

v1 = tf.compat.v1
SCALE = 2.0**10
# 40 layers of 64x64 in float16: 8 stacks of 5 kernels (80 KiB of float32
# each) and 8 of 5 biases, 646 KiB of products in all.
LAYERS = 40
LARGEST = 5 * 64 * 64 * 4
ONE_THREAD = v1.ConfigProto(inter_op_parallelism_threads=1,
                            intra_op_parallelism_threads=1,
                            use_per_session_threads=True)


def _ours(inner):
  return mp_optimizer.LossScaleOptimizer(
      inner, managers.FixedLossScaleManager(SCALE))


def _behind_gate_casts(graph):
  """The casts of held stacks to float32 built behind the gate (under the
  gate's pivot, an Identity of a Switch), in the order built."""
  return [op for op in graph.get_operations()
          if op.type == "Cast" and op.inputs[0].op.type == "Pack" and any(
              c.type == "Identity" and c.inputs[0].op.type == "Switch"
              for c in op.control_inputs)]


def _chained(graph):
  """The behind-gate casts that wait for another cast."""
  return [op for op in _behind_gate_casts(graph)
          if any(c.type == "Cast" for c in op.control_inputs)]


def _build(make_inner, layers=LAYERS, wrap=_ours):
  graph = tf.Graph()
  with graph.as_default():
    loss = shapes.many_small(layers)
    train_op = wrap(make_inner()).minimize(
        loss, global_step=v1.train.get_or_create_global_step())
    init = v1.global_variables_initializer()
  return graph, train_op, init


def _product_peak(graph, train_op, init):
  """Peak live bytes of the paced products in one traced step."""
  names = set()
  for cast in _behind_gate_casts(graph):
    names.add(cast.name)
    names.update(consumer.name for consumer in cast.outputs[0].consumers())
  with v1.Session(graph=graph, config=ONE_THREAD) as session:
    session.run(init)
    session.run(train_op)
    metadata = v1.RunMetadata()
    session.run(train_op, options=v1.RunOptions(
        trace_level=v1.RunOptions.FULL_TRACE), run_metadata=metadata)
  records = sorted((record.alloc_micros, record.alloc_bytes)
                   for device in metadata.step_stats.dev_stats
                   for node in device.node_stats if node.node_name in names
                   for memory in node.memory
                   for record in memory.allocation_records)
  live = peak = 0
  for _, change in records:
    live += change
    peak = max(peak, live)
  return peak, bool(records)


class WindowTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("two_fit", [4, 4, 4, 4], 8, [0, 0, 1, 2]),
      ("all_fit", [4, 4, 4], 12, [0, 0, 0]),
      ("larger_than_budget", [10, 1, 1], 8, [0, 1, 1]))
  def test_window_starts(self, sizes, budget, expected):
    self.assertEqual(pacing._window_starts(sizes, budget), expected)


class PacingTest(parameterized.TestCase):

  def test_casts_are_chained_and_wait_for_updates(self):
    graph, _, _ = _build(lambda: v1.train.GradientDescentOptimizer(0.1))
    casts = _behind_gate_casts(graph)
    self.assertLen(casts, 16)  # 8 kernel stacks, 8 bias stacks.
    self.assertEqual(_chained(graph), casts[1:])
    for before, after in zip(casts, casts[1:]):
      self.assertIn(before, after.control_inputs)
    waits_for_update = [op for op in casts if any(
        c.type == "ResourceApplyGradientDescent" for c in op.control_inputs)]
    self.assertNotEmpty(waits_for_update)

  @parameterized.named_parameters(
      ("sgd", lambda: v1.train.GradientDescentOptimizer(0.1)),
      ("adam", lambda: v1.train.AdamOptimizer(1e-3)))
  def test_products_alive_at_once_stay_within_the_budget(self, make_inner):
    peak, traced = _product_peak(*_build(make_inner))
    self.assertTrue(traced)
    # The window's products (the multiply by 1/S reuses the cast's buffer).
    # Unordered, Adam's step made 244 KiB of them at once.
    self.assertLessEqual(peak, pacing.IN_FLIGHT * LARGEST)
    self.assertGreaterEqual(peak, LARGEST)

  def test_paced_update_is_contribs_bit_for_bit(self):
    values = []
    for wrap in (_ours, None):
      graph = tf.Graph()
      with graph.as_default():
        loss = shapes.many_small(LAYERS)
        variables = v1.trainable_variables()
        inner = v1.train.AdamOptimizer(1e-3)
        if wrap is None:  # contrib: g * (1/S) in float32, then the update.
          grads = tf.gradients(loss * SCALE, variables)
          inverse = tf.math.reciprocal(tf.constant(SCALE))
          train_op = inner.apply_gradients(
              [(g * inverse, v) for g, v in zip(grads, variables)])
        else:
          train_op = wrap(inner).minimize(loss)
          self.assertNotEmpty(_chained(graph))
        with v1.Session(graph=graph) as session:
          session.run(v1.global_variables_initializer())
          for _ in range(3):
            session.run(train_op)
          values.append(session.run(variables))
    for ours, contrib in zip(*values):
      self.assertEqual(ours.tobytes(), contrib.tobytes())

  def test_small_products_are_left_unordered(self):
    # 5 layers: 82 KiB of products, under pacing.MIN_BYTES.
    graph, _, _ = _build(lambda: v1.train.AdamOptimizer(1e-3), layers=5)
    self.assertEmpty(_chained(graph))


class GlobalNormInside(v1.train.GradientDescentOptimizer):
  """Reads every gradient in one op (their global norm) before updating."""

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    grads, variables = zip(*grads_and_vars)
    clipped, _ = tf.clip_by_global_norm(grads, 1.0)
    return super().apply_gradients(list(zip(clipped, variables)),
                                   global_step, name)


class CondInside(v1.train.GradientDescentOptimizer):
  """Updates behind a tf.cond of its own."""

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    def update():
      with tf.control_dependencies([super(CondInside, self).apply_gradients(
          grads_and_vars, global_step, name)]):
        return tf.constant(1)

    return tf.cond(tf.constant(True), update, lambda: tf.constant(0)).op


class SoundnessTest(parameterized.TestCase):

  @parameterized.named_parameters(("global_norm", GlobalNormInside),
                                  ("cond", CondInside))
  def test_no_edge_where_a_reader_could_wait_for_itself_or_not_run(
      self, inner_class):
    graph, train_op, init = _build(lambda: inner_class(0.1))
    self.assertEmpty(_chained(graph))
    with graph.as_default():
      first = v1.trainable_variables()[0]
    with v1.Session(graph=graph) as session:
      session.run(init)
      before = session.run(first)
      session.run(train_op)
      self.assertFalse(np.array_equal(before, session.run(first)))

  def test_replicas_order_only_readers_on_their_own_device(self):
    # Under MirroredStrategy each product is read by a sum of both
    # replicas' on the first device: the first replica's casts are ordered
    # after those sums, the second's (on the other device) are not.
    devices = ["/cpu:0", "/cpu:1"]
    graph = tf.Graph()
    with graph.as_default():
      strategy = tf.distribute.MirroredStrategy(devices)
      with strategy.scope():
        optimizer = _ours(v1.train.GradientDescentOptimizer(0.1))
        train_op = strategy.group(strategy.run(
            lambda: optimizer.minimize(shapes.many_small(LAYERS))))
      init = v1.global_variables_initializer()
      first = v1.trainable_variables()[0]
    casts = _chained(graph)
    self.assertLen(casts, 15)  # The first replica's, after its first.
    for cast in casts:
      self.assertEqual(tf.DeviceSpec.from_string(cast.device).device_index, 0)
      for control in cast.control_inputs:
        if control.type != "Identity":  # The gate's pivot.
          self.assertEqual(control.device, cast.device, control.name)
    config = v1.ConfigProto(device_count={"CPU": len(devices)})
    with v1.Session(graph=graph, config=config) as session:
      session.run(init)
      before = session.run(first)
      session.run(train_op)
      after = [session.run(value) for value in
               strategy.experimental_local_results(first)]
    self.assertFalse(np.array_equal(before, after[0]))
    self.assertEqual(after[0].tobytes(), after[1].tobytes())


if __name__ == "__main__":
  tf.test.main()
