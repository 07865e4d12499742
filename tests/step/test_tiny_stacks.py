"""Tiny held gradients of one shape are stacked; larger ones are not.

A held 16-bit gradient of a layer's bias is a few dozen entries. Read one by
one, each costs the check two kernels and the step two more behind the gate
(its cast and product); stacked, a group of them costs six in all, and a
copy of their few bytes. `unscale._chunks` stacks held gradients of one
shape, eight or fewer, in runs of about `unscale.HELD_STACK_ELEMENTS`
entries; a group with more entries than that per member (a layer's kernel)
stays unstacked, and one of more than `STACK_CHUNKS` members is cut into
that many runs, both as before. These tests count what
the rule makes, and check the stacked step against SGD on contrib's unscale bit
for bit and against one bias's non-finite gradient.
"""

import contextlib

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from mp_optimizer._step import unscale

v1 = tf.compat.v1
LAYERS, WIDTH, BATCH = 5, 64, 8
SCALE = 2.0**10


def _poisoned_read(bias, entries):
  """`bias` cast to float16, whose float16 gradient gets `entries` added."""

  @tf.custom_gradient
  def read(x):
    return tf.identity(x), lambda dy: dy + tf.constant(entries, tf.float16)

  return read(tf.cast(bias, tf.float16))


def _layers(poison=None):
  """`LAYERS` dense layers computed in float16 on float32 variables; a
  `poison` (a float) is added to one entry of the third bias's gradient."""
  rng = np.random.RandomState(0)
  hidden = tf.constant(rng.randn(BATCH, WIDTH), tf.float16)
  for i in range(LAYERS):
    kernel = v1.get_variable(f"kernel_{i}", initializer=(
        rng.randn(WIDTH, WIDTH) * 0.3).astype(np.float32))
    bias = v1.get_variable(f"bias_{i}", initializer=(
        rng.randn(WIDTH) * 0.1).astype(np.float32))
    bias16 = tf.cast(bias, tf.float16)
    if poison is not None and i == 2:
      entries = np.zeros(WIDTH)
      entries[7] = poison
      bias16 = _poisoned_read(bias, entries)
    hidden = tf.tanh(tf.matmul(hidden, tf.cast(kernel, tf.float16)) + bias16)
  return tf.reduce_mean(tf.square(tf.cast(hidden, tf.float32)))


def _step(make_loss, ours):
  """(graph, variables before, after one SGD step): ours with a fixed scale,
  or SGD on contrib's unscale of the same scaled loss, `g * (1/S)` in
  float32."""
  with tf.Graph().as_default() as graph:
    loss = make_loss()
    opt = v1.train.GradientDescentOptimizer(0.5)
    if ours:
      train_op = mp_optimizer.LossScaleOptimizer(
          opt, managers.FixedLossScaleManager(SCALE)).minimize(loss)
    else:
      variables = v1.trainable_variables()
      grads = tf.gradients(loss * SCALE, variables)
      inverse = tf.math.reciprocal(tf.constant(SCALE))
      train_op = opt.apply_gradients([(g * inverse, v)
                                      for g, v in zip(grads, variables)])
    with v1.Session(graph=graph) as session:
      session.run(v1.global_variables_initializer())
      before = session.run(v1.trainable_variables())
      session.run(train_op)
      return graph, before, session.run(v1.trainable_variables())


def _stacks(graph):
  """The unscale's stacks: their member counts and member shapes."""
  return sorted((len(op.inputs), tuple(op.inputs[0].shape.as_list()))
                for op in graph.get_operations()
                if op.type == "Pack" and "stacked_gradients" in op.name)


@contextlib.contextmanager
def _run_size(entries):
  """`unscale.HELD_STACK_ELEMENTS` set to `entries` inside the block."""
  original = unscale.HELD_STACK_ELEMENTS
  unscale.HELD_STACK_ELEMENTS = entries
  try:
    yield
  finally:
    unscale.HELD_STACK_ELEMENTS = original


def _kernels_run(run_size=None):
  """Kernels one traced step of ours on `_layers` ran, with
  `unscale.HELD_STACK_ELEMENTS` set to `run_size` (if given) while it is
  built."""
  with _run_size(run_size or unscale.HELD_STACK_ELEMENTS):
    with tf.Graph().as_default() as graph:
      train_op = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.5),
          managers.FixedLossScaleManager(SCALE)).minimize(_layers())
  with v1.Session(graph=graph) as session:
    session.run(v1.global_variables_initializer())
    metadata = v1.RunMetadata()
    session.run(train_op, options=v1.RunOptions(
        trace_level=v1.RunOptions.FULL_TRACE), run_metadata=metadata)
  return sum(len(device.node_stats)
             for device in metadata.step_stats.dev_stats)


class ChunksTest(parameterized.TestCase):

  @parameterized.named_parameters(
      # Five biases of 64 entries: 320 in all, one stack.
      ("five_biases", 5, 64, [5]),
      # Eight of 200 (1,600 entries): two runs of about 1,024.
      ("eight_of_200", 8, 200, [4, 4]),
      # Five kernels of 4,096: each above the run size, none stacked.
      ("five_kernels", 5, 4096, []),
      # A single tiny gradient has nothing to be stacked with.
      ("one_bias", 1, 64, []))
  def test_held_runs(self, members, size, lengths):
    runs = unscale._chunks(list(range(members)), True, size)
    self.assertEqual([len(run) for run in runs], lengths)
    self.assertEqual(sum(runs, []), sorted(sum(runs, [])))  # Consecutive.

  def test_a_stack_of_eight_or_fewer_stays_below_twice_the_run_size(self):
    limit = 2 * unscale.HELD_STACK_ELEMENTS
    for members in range(2, unscale.STACK_CHUNKS + 1):
      for size in (1, 7, 64, 100, 341, 512, 513, 700, 1024, 1025, 4096):
        for run in unscale._chunks(list(range(members)), True, size):
          self.assertLess(len(run) * size, limit, (members, size, run))

  @parameterized.named_parameters(("kernels", 4096), ("biases", 64))
  def test_more_than_eight_fill_every_run_as_before(self, size):
    runs = unscale._chunks(list(range(50)), True, size)
    self.assertLen(runs, unscale.STACK_CHUNKS)
    self.assertEqual(sum(runs, []), list(range(50)))
    self.assertEqual({len(run) for run in runs}, {6, 7})  # 50 / 8 = 6.25

  def test_runs_of_gradients_not_held_are_cut_as_before(self):
    # Two or more in each, at most `STACK_CHUNKS`, whatever their size.
    for size in (64, 4096):
      self.assertEqual([len(run) for run in unscale._chunks(
          list(range(5)), False, size)], [2, 3])


class TinyStacksTest(parameterized.TestCase):

  def test_the_biases_are_stacked_and_the_kernels_are_not(self):
    graph, _, _ = _step(_layers, ours=True)
    self.assertEqual(_stacks(graph), [(LAYERS, (WIDTH,))])
    # The biases' stack is read once by the check, in float16.
    reads = [op for op in graph.get_operations() if op.type == "IsFinite"
             and op.inputs[0].dtype == tf.float16]
    self.assertLen(reads, LAYERS + 1)

  def test_no_stack_with_the_run_size_of_one_entry(self):
    # The rule before tiny stacks: five of a shape stay unstacked.
    with _run_size(1):
      graph, _, _ = _step(_layers, ours=True)
    self.assertEqual(_stacks(graph), [])

  def test_a_stack_of_five_runs_six_kernels_where_five_alone_ran_twenty(self):
    # The check's IsFinite and All and, behind the gate, Cast and Mul per
    # bias; stacked: Pack, IsFinite, All, Cast, Mul and Unpack.
    self.assertEqual(_kernels_run(1) - _kernels_run(),
                     4 * LAYERS - 6)

  def test_each_variable_gets_contribs_bits(self):
    # The stack's cast and product are the bits of each one's.
    _, before, ours = _step(_layers, ours=True)
    _, _, bare = _step(_layers, ours=False)
    for got, want, start in zip(ours, bare, before):
      self.assertFalse(np.array_equal(got, start))  # It moved.
      np.testing.assert_array_equal(got, want)

  @parameterized.named_parameters(("inf", float("inf")),
                                  ("nan", float("nan")))
  def test_one_bias_not_finite_skips_the_step(self, poison):
    # Only the third bias's gradient has the Inf or NaN.
    graph, before, after = _step(lambda: _layers(poison), ours=True)
    self.assertEqual(_stacks(graph), [(LAYERS, (WIDTH,))])
    for got, want in zip(after, before):
      np.testing.assert_array_equal(got, want)
