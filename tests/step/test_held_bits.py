"""Held 16-bit gradients are checked on their own bits where S allows it.

With a manager whose least scale (`scale_floor`) keeps every finite 16-bit
value finite times 1/S (at least 2**-112 for float16, 1 for bfloat16), the
finite check reads the held 16-bit sources, not their float32 products:
`is_finite` of the source (float16 or bfloat16, at most
`_step.held_check.SMALL_BITS_MAX_ELEMENTS` entries, or above
`FLOAT16_SUM_MAX_ELEMENTS` for float16 and `managers.finite.GROUP_MAX_ELEMENTS`
for bfloat16: `held_check.reads_bits`), or a float32
sum of a float16 source in between. The verdict on those gradients is then the elementwise
one (contrib's), and a scale below that floor at run time counts as an
overflow. With a lower or unknown floor, or bfloat16 sources in between,
the products are summed, as for every other gradient.

Each gradient here is set by a `tf.custom_gradient`, whatever S is, so the
16-bit source and its product with 1/S are known exactly.
"""

import warnings

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from mp_optimizer.overflow import OverflowReport
from mp_optimizer.managers import finite
from mp_optimizer._step import held_check

v1 = tf.compat.v1
F16_MAX = 65504.0
SMALL = ("small", 2)
BETWEEN = ("between", held_check.SMALL_BITS_MAX_ELEMENTS + 2)
# One gradient too large to stack: float16 is summed, bfloat16 read on bits.
ABOVE_A_STACK = ("above_a_stack", finite.GROUP_MAX_ELEMENTS + 2)
LARGE = ("large", held_check.FLOAT16_SUM_MAX_ELEMENTS + 2)
SIZES = (SMALL, BETWEEN, ABOVE_A_STACK, LARGE)


class ConstantScale(managers.LossScaleManager):
  """A hand-written manager: says nothing of its least scale."""

  def __init__(self, scale):
    self._scale = scale

  def get_loss_scale(self):
    return tf.constant(self._scale, tf.float32)

  def update_loss_scale(self, finite_grads):
    del finite_grads
    return tf.no_op()


def _build(manager, dtype, gradient, report_path=None, reshaped=False):
  """(var, train_op) in the default graph: one SGD step of a variable whose
  gradient is `cast(gradient as dtype, float32)`, made as a reshape of a
  flat constant if `reshaped` (as a bias's gradient is a reshaped sum); a
  `report_path` gets the overflow report."""
  gradient = np.asarray(gradient, np.float32)
  var = v1.get_variable("v", initializer=np.zeros(gradient.shape, np.float32))

  def source(_):
    if not reshaped:
      return tf.constant(gradient, dtype, name="source")
    flat = tf.constant(gradient.reshape(-1), dtype, name="flat")
    return tf.reshape(flat, gradient.shape, name="source")

  @tf.custom_gradient
  def fixed_gradient(x):
    return tf.identity(x), source

  loss = tf.reduce_sum(tf.cast(fixed_gradient(tf.cast(var, dtype)),
                               tf.float32))
  report = report_path and OverflowReport(
      output_stream="file://" + report_path)
  opt = mp_optimizer.LossScaleOptimizer(
      v1.train.GradientDescentOptimizer(2.0**-110), manager,
      overflow_report=report or False)
  with warnings.catch_warnings():  # bfloat16 alone: "use NoLossScale".
    warnings.simplefilter("ignore", UserWarning)
    return var, opt.minimize(loss, var_list=[var])


def _run(manager, dtype, gradient, scale=None, report_path=None,
         reshaped=False):
  """(applied, variable after one SGD step, S after it).

  The step is `_build`'s; `scale`, if given, is assigned to the manager's
  scale variable before it.
  """
  with tf.Graph().as_default() as graph:
    var, train_op = _build(manager, dtype, gradient, report_path, reshaped)
    applied = mp_optimizer.step_applied()
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      if scale is not None:
        sess.run(manager.variables()[0].assign(scale))
      _, was_applied = sess.run([train_op, applied])
      return was_applied, sess.run(var), sess.run(manager.get_loss_scale())


def _one_entry(size, value, at=0):
  """`size` zeros but `value` at `at`."""
  gradient = np.zeros(size)
  gradient[at] = value
  return gradient


def _exponential(init, floor):
  return managers.ExponentialUpdateLossScaleManager(
      init, 1000, decr_every_n_nan_or_inf=1, min_loss_scale=floor)


class HeldBitsTest(parameterized.TestCase):

  @parameterized.named_parameters(*SIZES)
  def test_float16_products_adding_past_float32s_range_are_applied(
      self, size):
    # 65504 * 2**112 < float32's largest; two of them add up past it.
    applied, var, _ = _run(_exponential(2.0**-112, 2.0**-112), tf.float16,
                           np.full(size, F16_MAX))
    self.assertTrue(applied)
    want = np.float32(0) - np.float32(2.0**-110) * np.float32(
        np.float32(F16_MAX) * np.float32(2.0**112))
    np.testing.assert_array_equal(var, np.full(size, want))

  @parameterized.named_parameters(*SIZES)
  def test_a_manager_with_no_floor_keeps_the_summed_check(self, size):
    applied, var, _ = _run(ConstantScale(2.0**-112), tf.float16,
                           np.full(size, F16_MAX))
    self.assertFalse(applied)  # The sum of the products is Inf.
    np.testing.assert_array_equal(var, np.zeros(size))

  @parameterized.named_parameters(*SIZES)
  def test_a_float16_floor_below_2_112_checks_the_products(self, size):
    # 65504 * 2**113 overflows float32; the 16-bit value is finite.
    gradient = _one_entry(size, F16_MAX, at=-1)
    applied, var, _ = _run(_exponential(2.0**-113, 2.0**-120), tf.float16,
                           gradient)
    self.assertFalse(applied)
    np.testing.assert_array_equal(var, np.zeros(size))

  @parameterized.named_parameters(*SIZES)
  def test_a_scale_under_the_floor_at_run_time_counts_as_an_overflow(
      self, size):
    # The manager's floor is 1; its variable is set to 2**-113 by hand. The
    # gradient, one entry of 1 * 2**113, would be finite, but the check does
    # not read the products, so the step is skipped and the scale shrinks
    # to its floor.
    gradient = _one_entry(size, 1.0)
    path = self.create_tempdir().full_path + "/report.txt"
    applied, var, scale = _run(_exponential(2.0**10, 1.0), tf.float16,
                               gradient, scale=2.0**-113, report_path=path)
    self.assertFalse(applied)
    np.testing.assert_array_equal(var, np.zeros(size))
    self.assertEqual(scale, 1.0)
    with open(path, encoding="utf-8") as report:
      self.assertIn("none has a NaN/Inf entry here (their sum overflowed "
                    "float32, the scale is below 2**-112", report.read())

  @parameterized.named_parameters(*SIZES)
  def test_a_float16_floor_below_2_112_sums_the_products(self, size):
    # At S = 2**-112 each product is finite, but with the floor at 2**-120
    # the check sums the products, and two of them add up past float32.
    applied, var, _ = _run(_exponential(2.0**-112, 2.0**-120), tf.float16,
                           np.full(size, F16_MAX))
    self.assertFalse(applied)
    np.testing.assert_array_equal(var, np.zeros(size))

  @parameterized.named_parameters(*SIZES)
  def test_a_bfloat16_scale_under_1_at_run_time_counts_as_an_overflow(
      self, size):
    # Floor 1, scale set to 0.5 by hand: 3e38 times 2 overflows.
    gradient = _one_entry(size, 3e38)
    applied, _, scale = _run(_exponential(2.0, 1.0), tf.bfloat16, gradient,
                             scale=0.5)
    self.assertFalse(applied)
    self.assertEqual(scale, 1.0)

  @parameterized.named_parameters(*SIZES)
  def test_a_float16_scale_under_the_floor_but_in_range_is_trusted(
      self, size):
    # The flag is on the dtype's bound (2**-112), not on the floor (1).
    gradient = _one_entry(size, 1.0)
    applied, var, _ = _run(_exponential(2.0**10, 1.0), tf.float16, gradient,
                           scale=0.5)
    self.assertTrue(applied)
    self.assertEqual(var[0], np.float32(-(2.0**-110) * 2.0))

  @parameterized.named_parameters(*SIZES)
  def test_a_bfloat16_floor_below_1_checks_the_products(self, size):
    # bfloat16 reaches float32's range: 3e38 times 1/S = 2 overflows.
    gradient = _one_entry(size, 3e38)
    applied, _, _ = _run(_exponential(0.5, 0.25), tf.bfloat16, gradient)
    self.assertFalse(applied)

  @parameterized.named_parameters(SMALL, ABOVE_A_STACK, LARGE)
  def test_small_and_large_bfloat16_sources_are_checked_on_their_bits(
      self, size):
    # Products of 3e38 each, adding up past float32's range: applied.
    applied, _, _ = _run(managers.FixedLossScaleManager(1.0), tf.bfloat16,
                         np.full(size, 3e38))
    self.assertTrue(applied)

  def test_bfloat16_sources_in_between_keep_the_summed_check(self):
    applied, _, _ = _run(managers.FixedLossScaleManager(1.0), tf.bfloat16,
                         np.full(BETWEEN[1], 3e38))
    self.assertFalse(applied)  # Products of 3e38 add up to Inf.

  @parameterized.named_parameters(
      (*SMALL, ["IsFinite"]), (*BETWEEN, ["Sum"]), (*ABOVE_A_STACK, ["Sum"]),
      (*LARGE, ["IsFinite"]))
  def test_what_the_check_reads_of_a_float16_source(self, size, want):
    # The 16-bit source's own readers: `is_finite`, or a cast summed at once.
    with tf.Graph().as_default() as graph:
      _build(managers.FixedLossScaleManager(8.0), tf.float16, np.ones(size))
    source, = [op.outputs[0] for op in graph.get_operations()
               if op.name.endswith("/source")]
    readers = [op.type for op in source.consumers() if op.type != "Cast"]
    readers += [op.type for cast in source.consumers()
                if cast.type == "Cast" for op in cast.outputs[0].consumers()
                if op.type == "Sum"]
    self.assertEqual(readers, want)

  @parameterized.named_parameters(
      (*SMALL, True), (*BETWEEN, False), (*ABOVE_A_STACK, True),
      (*LARGE, True))
  def test_when_the_check_reads_a_bfloat16_sources_bits(self, size, bits):
    with tf.Graph().as_default() as graph:
      _build(managers.FixedLossScaleManager(8.0), tf.bfloat16, np.ones(size))
    source, = [op.outputs[0] for op in graph.get_operations()
               if op.name.endswith("/source")]
    readers = {op.type for op in source.consumers()}
    self.assertEqual("IsFinite" in readers, bits)

  def test_a_reshaped_source_is_read_before_its_reshape(self):
    # Grappler would move `is_finite` ahead of the reshape and reshape the
    # flags as well; the check reads the entries where they were made.
    with tf.Graph().as_default() as graph:
      _build(managers.FixedLossScaleManager(8.0), tf.float16,
             np.ones([2, SMALL[1]]), reshaped=True)
    read, = [op.inputs[0].op.name for op in graph.get_operations()
             if op.type == "IsFinite" and op.inputs[0].dtype == tf.float16]
    self.assertEqual(read.split("/")[-1], "flat")

  @parameterized.named_parameters(
      ("reference", lambda store: store.op.outputs[0]),
      ("snapshot", lambda store: store.value()),  # What tf.identity reads.
      ("snapshot_reshaped", lambda store: tf.reshape(store.value(), [2, 2])))
  def test_a_tf1_variable_passed_on_by_an_identity_is_read_by_it(self, read):
    # The identity reads the (TF1, reference) variable after an assign;
    # read past it, the variable could be read before the assign.
    with tf.Graph().as_default() as graph:
      store = v1.get_variable("store", initializer=np.ones(4, np.float16),
                              use_resource=False)
      assign = v1.assign(store, np.full(4, np.nan, np.float16))
      with tf.control_dependencies([assign]):
        passed = tf.reshape(tf.identity(read(store)), [4], name="passed")
      var = v1.get_variable("v", initializer=np.zeros(4, np.float32))

      @tf.custom_gradient
      def fixed_gradient(x):
        return tf.identity(x), lambda _: passed

      loss = tf.reduce_sum(tf.cast(fixed_gradient(tf.cast(var, tf.float16)),
                                   tf.float32))
      mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(1.0),
          managers.FixedLossScaleManager(8.0)).minimize(loss, var_list=[var])
    read_by_check, = [op.inputs[0].op.name for op in graph.get_operations()
                      if op.type == "IsFinite" and
                      op.inputs[0].dtype.base_dtype == tf.float16]
    self.assertEqual(read_by_check.split("/")[-1], "passed")

  @parameterized.product(entry=[float("inf"), float("nan"), 3.0],
                         dtype=[tf.float16, tf.bfloat16])
  def test_a_reshaped_source_is_applied_only_if_finite(self, entry, dtype):
    gradient = np.ones([2, 3])
    gradient[1, 2] = entry
    applied, var, _ = _run(managers.FixedLossScaleManager(8.0), dtype,
                           gradient, reshaped=True)
    self.assertEqual(applied, np.isfinite(entry))
    # The gradient is fixed whatever S is: the update is -lr * gradient / 8.
    want = (-np.float32(2.0**-110) * np.float32(gradient) / np.float32(8)
            if applied else np.zeros([2, 3], np.float32))
    np.testing.assert_array_equal(var, want)

  @parameterized.product(size=[size for _, size in SIZES],
                         bad=[float("inf"), float("-inf"), float("nan")],
                         dtype=[tf.float16, tf.bfloat16])
  def test_a_non_finite_16_bit_value_skips_the_step(self, size, bad, dtype):
    gradient = np.ones(size)
    gradient[size // 2] = bad
    applied, var, _ = _run(managers.FixedLossScaleManager(8.0), dtype,
                           gradient)
    self.assertFalse(applied)
    np.testing.assert_array_equal(var, np.zeros(size))


class ScaleFloorTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("fixed", lambda: managers.FixedLossScaleManager(8), 8.0),
      ("fixed_tf2", lambda: managers.FixedLossScale(4.0), 4.0),
      ("exponential", lambda: managers.ExponentialUpdateLossScaleManager(
          2.0**15, 10, min_loss_scale=0.5), 0.5),
      ("exponential_default", lambda: managers.ExponentialUpdateLossScaleManager(
          2.0**15, 10), 1.0),
      ("dynamic_tf2", lambda: managers.DynamicLossScale(
          min_loss_scale=2.0**-10), 2.0**-10),
      ("amax", lambda: managers.AmaxHistoryLossScaleManager(
          min_loss_scale=4.0), 4.0),
      ("no_loss_scale", managers.NoLossScale, 1.0),
      ("hand_written", lambda: ConstantScale(1.0), None))
  def test_each_manager_states_its_least_scale(self, make, want):
    self.assertEqual(make().scale_floor, want)


if __name__ == "__main__":
  tf.test.main()
