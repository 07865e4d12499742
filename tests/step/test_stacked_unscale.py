"""Small gradients are unscaled together, to the same bits as one by one.

`unscale.unscale` stacks small gradients of one shape (in up to eight
stacks of consecutive gradients), multiplies each stack by 1/S and hands
each variable its slice; the finite check then reads the stacks whole. These tests compare the stacked unscale with the per-gradient
one bit for bit (float32, float16, float64, scalars, sparse values, values
near the ends of float32's range), count the ops, and poison every slice.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer.managers import finite
import mp_optimizer
from mp_optimizer._step import unscale

v1 = tf.compat.v1
NAN, INF = float("nan"), float("inf")
BIG = int(np.sqrt(finite.GROUP_MAX_ELEMENTS)) + 1  # A side above the limit.


def _extreme(rng, shape, dtype):
  """Random values with tiny, huge, negative and zero entries."""
  info = np.finfo(dtype)
  values = np.clip(rng.randn(*shape) * 10.0 ** rng.randint(-8, 8, size=shape),
                   -info.max / 2, info.max / 2)
  flat = values.reshape(-1)
  if flat.size >= 4:
    flat[:4] = [info.tiny, -info.max / 2, 0.0, info.tiny * 3]
  return values.astype(dtype)


GRADIENTS = (  # (shape, dtype, how many)
    ((32, 32), np.float32, 5),
    ((7,), np.float32, 3),
    ((), np.float32, 4),
    ((4, 4), np.float16, 3),
    ((3, 2), np.float64, 2),
    ((BIG, BIG), np.float32, 2),
    ((5, 5), np.float32, 1),
)


def _sources(rng):
  feeds, grads = {}, []
  for shape, dtype, count in GRADIENTS:
    for _ in range(count):
      source = v1.placeholder(dtype, shape)
      feeds[source] = _extreme(rng, shape, dtype)
      grads.append(source)
  rows = v1.placeholder(tf.float32, [3, 8])  # Sparse, values of known shape.
  feeds[rows] = _extreme(rng, (3, 8), np.float32)
  grads.append(tf.IndexedSlices(rows, tf.constant([0, 2, 5]),
                                tf.constant([10, 8])))
  unknown = v1.placeholder(tf.float32, [None, 8])  # Sparse, unknown rows.
  feeds[unknown] = _extreme(rng, (2, 8), np.float32)
  grads.append(tf.IndexedSlices(unknown, tf.constant([1, 4]),
                                tf.constant([10, 8])))
  grads.append(None)
  return feeds, grads


def _bits(array):
  array = np.asarray(array)
  return array.view(f"u{array.dtype.itemsize}") if array.dtype.kind == "f" \
      else array


class StackedUnscaleTest(parameterized.TestCase):

  @parameterized.named_parameters(("scale_2_12", 2.0**12),
                                  ("scale_3", 3.0),
                                  ("scale_2_minus_20", 2.0**-20),
                                  ("scale_2_127_overflows", 2.0**127))
  def test_stacked_and_one_by_one_give_the_same_bits(self, scale):
    with tf.Graph().as_default() as graph:
      feeds, grads = _sources(np.random.RandomState(0))
      loss_scale = v1.placeholder_with_default(np.float32(scale), [])
      stacked = unscale.unscale(grads, loss_scale)
      alone = unscale.unscale(grads, loss_scale, stack=False)
      self.assertIsNone(stacked[-1])
      for got, want in zip(stacked[:-1], alone[:-1]):
        self.assertIsInstance(got, type(want))
      fetch = lambda gs: [tf.convert_to_tensor(
          g.values if isinstance(g, tf.IndexedSlices) else g)
                          for g in gs[:-1]]
      with v1.Session(graph=graph) as sess:
        got, want = sess.run((fetch(stacked), fetch(alone)), feeds)
    for index, (a, b) in enumerate(zip(got, want)):
      self.assertEqual(a.dtype, b.dtype)
      np.testing.assert_array_equal(_bits(a), _bits(b), f"gradient {index}")

  def test_stacks_of_small_gradients_two_or_more_each(self):
    with tf.Graph().as_default() as graph:
      _, grads = _sources(np.random.RandomState(0))
      start = len(graph.get_operations())
      result = unscale.unscale(grads, tf.constant(2.0**12))
      made = graph.get_operations()[start:]
    packs = [op for op in made if op.type == "Pack"]
    # (32, 32) x5 in stacks of 2 and 3, (7,) x3 in one, () x4 in two of 2,
    # (4, 4) float16 x3 and (3, 2) float64 x2 in one each; the sparse values
    # of known shape join no other group.
    self.assertEqual(sorted(len(op.inputs) for op in packs),
                     [2, 2, 2, 2, 3, 3, 3])
    self.assertLen([op for op in made if op.type == "Unpack"], 7)
    big = [g for g in result if g is not None and not isinstance(
        g, tf.IndexedSlices) and g.shape == (BIG, BIG)]
    self.assertLen(big, 2)
    for grad in big:  # Above the limit: multiplied on its own, no copy.
      self.assertEqual(grad.op.type, "Mul")
    sparse = [g for g in result if isinstance(g, tf.IndexedSlices)]
    self.assertLen(sparse, 2)

  def test_the_optimizer_stacks_only_when_the_step_can_be_skipped(self):
    for skips, packs in ((True, 1), (False, 0)):
      with tf.Graph().as_default() as graph:
        variables = [v1.get_variable(f"v{i}", [8, 8]) for i in range(3)]
        loss = tf.add_n([tf.reduce_sum(v * v) for v in variables])
        opt = mp_optimizer.LossScaleOptimizer(
            v1.train.GradientDescentOptimizer(0.1),
            managers.FixedLossScaleManager(
                2**10, skip_nonfinite_steps=skips))
        opt.compute_gradients(loss)
        self.assertLen([op for op in graph.get_operations()
                        if op.type == "Pack"], packs)


  @parameterized.named_parameters(("forty", 40, [5] * 8),
                                  ("nine", 9, [2, 2, 2, 3]),
                                  ("five", 5, [2, 3]),
                                  ("two", 2, [2]))
  def test_a_group_is_cut_into_at_most_eight_runs_of_consecutive_gradients(
      self, count, sizes):
    with tf.Graph().as_default():
      grads = [v1.placeholder(tf.float32, [4]) for _ in range(count)]
      result = unscale.unscale(grads, tf.constant(2.0**12))
    packs = {}  # Each Pack -> the indices of the gradients it stacked.
    for index, grad in enumerate(result):
      self.assertEqual(grad.op.type, "Unpack")
      pack = grad.op.inputs[0].op.inputs[0].op  # Unpack <- Mul <- Pack.
      self.assertIs(pack.inputs[grad.value_index], grads[index])
      packs.setdefault(pack.name, []).append(index)
    runs = sorted(packs.values())
    self.assertEqual([len(run) for run in runs], sizes)
    self.assertEqual([index for run in runs for index in run],
                     list(range(count)))


class StackedCheckTest(parameterized.TestCase):

  def _check(self, count, keep, unscaled=True):
    """all_finite over `keep` of `count` slices: of the stack `unscale` made
    (at S = 1), or of a `tf.unstack` of the test's own; (graph, feed, flag,
    the ops all_finite made)."""
    graph = tf.Graph()
    with graph.as_default():
      source = v1.placeholder(tf.float32, [count, 4, 4])
      slices = tf.unstack(source)
      if unscaled:
        slices = unscale.unscale(slices, tf.constant(1.0))
      start = len(graph.get_operations())
      flag = managers.all_finite(slices[:keep])
      made = graph.get_operations()[start:]
    return graph, source, flag, made

  @parameterized.named_parameters(
      # Six slices: three stacks of two, one sum each, added.
      ("of_the_unscale_s_stacks_one_sum_each", True,
       ["Sum", "Sum", "Sum", "AddN"]),
      ("of_an_unstack_of_its_own_slice_by_slice", False, ["AddN", "Sum"]))
  def test_all_slices_checked(self, unscaled, reductions):
    graph, source, flag, made = self._check(6, 6, unscaled)
    self.assertEqual([op.type for op in made if op.type in ("AddN", "Sum")],
                     reductions)
    with v1.Session(graph=graph) as sess:
      clean = np.ones((6, 4, 4), np.float32)
      self.assertTrue(sess.run(flag, {source: clean}))
      for bad in (NAN, INF, -INF):
        for index in range(6):
          poisoned = clean.copy()
          poisoned[index, 3, 1] = bad
          self.assertFalse(sess.run(flag, {source: poisoned}),
                           f"{bad} in slice {index}")

  def test_a_partial_unstack_checks_only_the_slices_it_gets(self):
    graph, source, flag, _ = self._check(6, 4)
    with v1.Session(graph=graph) as sess:
      poisoned = np.ones((6, 4, 4), np.float32)
      poisoned[5, 0, 0] = NAN  # Not among the checked slices.
      self.assertTrue(sess.run(flag, {source: poisoned}))
      poisoned[3, 0, 0] = NAN
      self.assertFalse(sess.run(flag, {source: poisoned}))

  def test_no_add_n_takes_more_than_the_limit(self):
    count = 2 * finite.ADD_N_MAX_INPUTS + 3
    with tf.Graph().as_default() as graph:
      sources = [v1.placeholder(tf.float32, [2]) for _ in range(count)]
      flag = managers.all_finite(sources)
      widest = max(len(op.inputs) for op in graph.get_operations()
                   if op.type == "AddN")
      self.assertLessEqual(widest, finite.ADD_N_MAX_INPUTS)
      clean = {s: np.ones(2, np.float32) for s in sources}
      with v1.Session(graph=graph) as sess:
        self.assertTrue(sess.run(flag, clean))
        for target in (sources[0], sources[-1]):
          poisoned = dict(clean)
          poisoned[target] = np.array([1.0, NAN], np.float32)
          self.assertFalse(sess.run(flag, poisoned))


if __name__ == "__main__":
  tf.test.main()
