"""Equal gradients of several variables are unscaled and checked once.

Embeddings added up get one tensor from backprop, cast and reshaped once
per table (`_step.equal_values`). The step then makes one product for all
of them and stacks none of them; each table is updated exactly as a
float32 step on the unscaled loss would update it; a non-finite entry still
skips the step; and the finite check reads a tensor given twice once.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from mp_optimizer._step import equal_values

v1 = tf.compat.v1
TABLES, ROWS, DIM, LOOKUPS = 9, 50, 8, 16
SCALE = 2.0**10


def _summed_embeddings(poison=None):
  """A loss over `TABLES` float32 tables, each looked up and cast to float16,
  the lookups added up; `poison` (a float) is added to the gradient of one
  entry of their sum."""
  rng = np.random.RandomState(0)
  lookups = []
  for i in range(TABLES):
    table = v1.get_variable(
        f"table_{i}", initializer=rng.randn(ROWS, DIM).astype(np.float32))
    ids = tf.constant(rng.randint(0, ROWS, size=LOOKUPS))
    lookups.append(tf.cast(tf.gather(table, ids), tf.float16))
  summed = tf.add_n(lookups)
  if poison is not None:  # In the tables' shared gradient alone.
    entries = np.zeros([LOOKUPS, DIM])
    entries[3, 5] = poison
    summed = _poisoned(summed, entries)
  head = v1.get_variable("head", initializer=rng.randn(DIM, 1).astype(
      np.float32))
  out = tf.cast(tf.matmul(summed, tf.cast(head, tf.float16)), tf.float32)
  return tf.reduce_mean(tf.square(out - 1.0))


def _poisoned(tensor, entries):
  """`tensor`, whose gradient gets `entries` (float16) added."""

  @tf.custom_gradient
  def poisoned(x):
    return tf.identity(x), lambda dy: dy + tf.constant(entries, tf.float16)

  return poisoned(tensor)


def _step(make_loss, scaled, rate=0.5):
  """(graph, variables before, after one SGD step of `make_loss()`): ours
  with a fixed scale, or bare."""
  with tf.Graph().as_default() as graph:
    loss = make_loss()
    opt = v1.train.GradientDescentOptimizer(rate)
    if scaled:
      opt = mp_optimizer.LossScaleOptimizer(
          opt, managers.FixedLossScaleManager(SCALE))
    train_op = opt.minimize(loss)
    with v1.Session(graph=graph) as session:
      session.run(v1.global_variables_initializer())
      before = session.run(v1.trainable_variables())
      session.run(train_op)
      return graph, before, session.run(v1.trainable_variables())


def _summed_biases(poison=None):
  """Three float32 biases read through casts and added to one float16
  tensor: backprop gives each the cast of one float16 tensor; `poison` is
  added to one entry of its gradient."""
  x = tf.constant(np.linspace(-1, 1, 8), tf.float16)
  biases = [v1.get_variable(f"b{i}", initializer=np.full(8, i, np.float32))
            for i in range(3)]
  total = x + tf.add_n([tf.cast(b, tf.float16) for b in biases])
  if poison is not None:
    entries = np.zeros(8)
    entries[2] = poison
    total = _poisoned(total, entries)
  return tf.reduce_sum(tf.cast(tf.square(total), tf.float32))


class EqualValuesTest(parameterized.TestCase):

  def test_the_same_casts_and_reshapes_of_one_tensor_are_equal(self):
    with tf.Graph().as_default():
      x = tf.ones([4, 6], tf.float16)
      one = tf.reshape(tf.cast(x, tf.float32), [24])
      two = tf.reshape(tf.cast(x, tf.float32), [24])
      self.assertEqual(equal_values.first_equal([one, two, one]), [0, 0, 0])

  @parameterized.named_parameters(
      ("another_shape", lambda x: tf.reshape(tf.cast(x, tf.float32), [6, 4])),
      ("another_dtype", lambda x: tf.reshape(tf.cast(x, tf.float64), [24])),
      ("another_op", lambda x: tf.reshape(tf.cast(-x, tf.float32), [24])),
      ("another_tensor", lambda x: tf.reshape(
          tf.cast(tf.ones([4, 6], tf.float16), tf.float32), [24])))
  def test_anything_else_is_distinct(self, other):
    with tf.Graph().as_default():
      x = tf.ones([4, 6], tf.float16)
      one = tf.reshape(tf.cast(x, tf.float32), [24])
      self.assertEqual(equal_values.first_equal([one, other(x), None]),
                       [0, 1, 2])

  def test_identities_of_a_tf1_variable_read_at_other_times_are_distinct(
      self):
    with tf.Graph().as_default():
      store = v1.get_variable("store", initializer=np.ones(4, np.float32),
                              use_resource=False)
      reads = []
      for value in (2.0, 3.0):
        with tf.control_dependencies([v1.assign(store, np.full(4, value))]):
          reads.append(tf.identity(store))
      self.assertEqual(equal_values.first_equal(reads), [0, 1])

  def test_a_shape_known_only_when_run_is_distinct(self):
    with tf.Graph().as_default():
      x = v1.placeholder(tf.float32, [None])
      self.assertEqual(equal_values.first_equal(
          [tf.identity(x), tf.identity(x)]), [0, 1])


class EqualGradientsTest(parameterized.TestCase):

  def test_each_table_gets_what_a_float32_step_gives(self):
    # 2**10 and its reciprocal are exact; no gradient here underflows.
    _, before, ours = _step(_summed_embeddings, scaled=True)
    _, _, bare = _step(_summed_embeddings, scaled=False)
    self.assertFalse(np.array_equal(ours[0], before[0]))  # It moved.
    for got, want in zip(ours, bare):
      np.testing.assert_array_equal(got, want)

  def test_one_product_for_the_tables_and_no_stack(self):
    graph, _, _ = _step(_summed_embeddings, scaled=True)
    ops = graph.get_operations()
    self.assertEmpty([op for op in ops if op.type == "Pack" and
                      "stacked_gradients" in op.name])
    # Gradients times 1/S: one for the nine tables, and the head's, held in
    # float16, made for the check's record and again behind the gate.
    products = [op for op in ops if op.type == "Mul" and any(
        "inverse_loss_scale" in t.name for t in op.inputs)]
    self.assertLen(products, 3)

  def test_a_non_finite_entry_still_skips_the_step(self):
    # Only the tables' one gradient has the Inf; the head's is finite.
    _, before, after = _step(lambda: _summed_embeddings(float("inf")),
                             scaled=True)
    for got, want in zip(after, before):
      np.testing.assert_array_equal(got, want)

  def test_the_check_reads_a_tensor_given_twice_once(self):
    # 2e38 + 2e38 overflows float32; each entry is finite.
    with tf.Graph().as_default():
      x = tf.constant([2e38, 1.0])
      with v1.Session() as session:
        self.assertTrue(session.run(managers.all_finite([x, x, None])))
        self.assertFalse(session.run(managers.all_finite(
            [x, x + tf.constant([float("nan"), 0.0])])))

  def test_a_held_gradient_of_several_variables_is_read_and_made_once(self):
    graph, before, ours = _step(_summed_biases, scaled=True, rate=0.25)
    _, _, bare = _step(_summed_biases, scaled=False, rate=0.25)
    for got, want in zip(ours, bare):
      np.testing.assert_array_equal(got, want)
    self.assertFalse(np.array_equal(ours[1], before[1]))  # It moved.
    reads = [op for op in graph.get_operations() if op.type == "IsFinite"
             and op.inputs[0].dtype == tf.float16]
    self.assertLen(reads, 1)
    _, before, skipped = _step(lambda: _summed_biases(float("nan")),
                               scaled=True)
    for got, want in zip(skipped, before):
      np.testing.assert_array_equal(got, want)
