"""Where our TF2 door knowingly differs from TF's built-in, side by side.

Each test runs TensorFlow's `tf.compat.v1.mixed_precision` object and ours on
the same input and pins both behaviours, so the documented list of differences
stays true. (The fixed-scale skip is in `test_optimizer.py`.)
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import harness

v1 = tf.compat.v1
tf_mp = tf.compat.v1.mixed_precision
SGD = tf.compat.v1.train.GradientDescentOptimizer
TF_OPT = tf_mp.MixedPrecisionLossScaleOptimizer
OURS = mp_optimizer.MixedPrecisionLossScaleOptimizer


class FiniteCheckTest(parameterized.TestCase):

  @parameterized.named_parameters(("tf_applies", TF_OPT, False),
                                  ("ours_skips", OURS, True))
  def test_finite_gradients_summing_past_float32_max(self, wrapper, skipped):
    # Each gradient is finite; their sum (6e38) is not a float32.
    with tf.Graph().as_default() as graph:
      a = v1.get_variable("a", initializer=[0.0])
      b = v1.get_variable("b", initializer=[0.0])
      opt = wrapper(SGD(1e-30), tf_mp.DynamicLossScale(4, 100))
      train_op = opt.apply_gradients([(tf.constant([3e38]), a),
                                      (tf.constant([3e38]), b)])
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(train_op)
        self.assertEqual(sess.run(a)[0] == 0.0, skipped)


class CounterAtItsLimitTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("tf_wraps_and_never_grows", tf_mp.DynamicLossScale,
       [(8.0, -2**63), (8.0, -2**63 + 1)]),
      ("ours_grows", managers.DynamicLossScale, [(16.0, 0), (16.0, 1)]))
  def test_good_steps_restored_at_int64_max(self, make, expected):
    # Only a restored or edited checkpoint holds such a count.
    with tf.Graph().as_default() as graph:
      loss_scale = make(8, 5)
      update = loss_scale.update([tf.constant([1.0])])[0]
      scale = loss_scale()
      good = [v for v in v1.global_variables() if "good_steps" in v.name][0]
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        good.load(2**63 - 1, sess)
        states = []
        for _ in expected:
          sess.run(update)
          states.append(tuple(float(x) if i == 0 else int(x)
                              for i, x in enumerate(sess.run([scale, good]))))
    self.assertEqual(states, expected)


class SixteenBitVariablesTest(parameterized.TestCase):

  def test_tf_cannot_unscale_a_float16_gradient(self):
    with tf.Graph().as_default():
      w = v1.get_variable("w", initializer=np.ones(3, np.float16))
      with self.assertRaisesRegex(TypeError, "float16"):
        TF_OPT(SGD(0.1), 8).minimize(tf.reduce_sum(w * w))

  def test_ours_unscales_in_float32_and_trains(self):
    with tf.Graph().as_default() as graph:
      w = v1.get_variable("w", initializer=np.ones(3, np.float16))
      train_op = OURS(SGD(0.125), 8).minimize(tf.reduce_sum(w * w))
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(train_op)
        np.testing.assert_array_equal(sess.run(w), np.full(3, 0.75,
                                                           np.float16))


class EagerTest(parameterized.TestCase):

  def test_tf_runs_eagerly(self):
    v = tf.Variable([1.0])
    TF_OPT(SGD(0.25), "dynamic").minimize(lambda: tf.reduce_sum(v * v))
    self.assertEqual(v.numpy()[0], 0.5)

  def test_ours_is_graph_only_and_says_so(self):
    v = tf.Variable([1.0])
    with self.assertRaisesRegex(RuntimeError, "disable_eager_execution"):
      OURS(SGD(0.25), "dynamic").minimize(lambda: tf.reduce_sum(v * v))


class ValidationTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("initial_below_one", dict(initial_loss_scale=0.5), ValueError),
      ("period_zero", dict(increment_period=0), ValueError),
      ("period_fractional", dict(increment_period=2.5), ValueError),
      ("multiplier_one", dict(multiplier=1.0), ValueError),
      ("multiplier_below_one", dict(multiplier=0.5), ValueError),
  )
  def test_dynamic_settings_tf_accepts_and_we_refuse(self, kwargs, error):
    with tf.Graph().as_default():
      tf_mp.DynamicLossScale(**kwargs)  # Accepted without a word.
      with self.assertRaises(error):
        managers.DynamicLossScale(**kwargs)

  def test_bool_loss_scale_tf_accepts_and_we_refuse(self):
    with tf.Graph().as_default():
      TF_OPT(SGD(0.1), True)  # A fixed scale of 1.0 to TF.
      with self.assertRaisesRegex(ValueError, "`loss_scale`.*True"):
        OURS(SGD(0.1), True)

  @parameterized.named_parameters(
      ("opt_not_an_optimizer", lambda wrap: wrap("sgd", "dynamic"),
       TypeError),
      # TF's class: `loss_scale=None` is refused with ValueError by both.
      ("loss_scale_none", lambda wrap: wrap(SGD(0.1), None), ValueError),
  )
  def test_tf_raises_value_error_where_we_raise(self, build, ours):
    with tf.Graph().as_default():
      with self.assertRaises(ValueError):
        build(TF_OPT)
      with self.assertRaises(ours):
        build(OURS)

  def test_custom_tf_loss_scale_subclass(self):

    class Constant(tf_mp.LossScale):

      def __call__(self):
        return tf.constant(4.0)

      def update(self, grads):
        return tf.no_op(), True

      def get_config(self):
        return {}

    with tf.Graph().as_default():
      TF_OPT(SGD(0.1), Constant())
      with self.assertRaisesRegex(ValueError, "`loss_scale`.*Constant"):
        OURS(SGD(0.1), Constant())


class GraphStructureTest(parameterized.TestCase):

  def test_scale_state_takes_the_name_scope_only_when_built_in_graph(self):
    built_without_a_graph = managers.DynamicLossScale()
    with tf.Graph().as_default():
      with tf.name_scope("tower"):
        tf_mp.DynamicLossScale()
      with tf.name_scope("tower"):
        managers.DynamicLossScale()  # In graph mode: named as TF names it.
      with tf.name_scope("tower"):
        built_without_a_graph()  # Made lazily, at the root.
      self.assertEqual(sorted(v.op.name for v in v1.global_variables()),
                       ["current_loss_scale", "good_steps",
                        "tower/current_loss_scale", "tower/good_steps",
                        "tower_1/current_loss_scale", "tower_1/good_steps"])

  @parameterized.named_parameters(("tf", TF_OPT, "GradientDescent-wrapped"),
                                  ("ours", OURS, "GradientDescent"))
  def test_train_op_collection(self, wrapper, name):
    with tf.Graph().as_default():
      w = v1.get_variable("w", initializer=[1.0])
      train_op = wrapper(SGD(0.1), "dynamic").minimize(tf.reduce_sum(w * w))
      self.assertEqual(train_op.name, "GradientDescent")
      self.assertEqual(
          [op.name for op in v1.get_collection(v1.GraphKeys.TRAIN_OP)], [name])

  @parameterized.named_parameters(("tf", TF_OPT, False), ("ours", OURS, True))
  def test_get_slot_reaches_the_inner_optimizer(self, wrapper, found):
    with tf.Graph().as_default():
      w = v1.get_variable("w", initializer=[1.0])
      inner = v1.train.MomentumOptimizer(0.1, 0.9)
      opt = wrapper(inner, 8)
      opt.minimize(tf.reduce_sum(w * w))
      self.assertEqual(opt.get_slot(w, "momentum") is not None, found)
      self.assertEqual(opt.get_slot_names(), ["momentum"] * found)


class SameWhereItMattersTest(parameterized.TestCase):
  """A sanity row: on an ordinary step both give the same bits."""

  def test_one_clean_step(self):
    states = []
    for wrapper in (TF_OPT, OURS):
      with tf.Graph().as_default() as graph:
        w = v1.get_variable("w", initializer=[1.0, -2.0])
        train_op = wrapper(SGD(0.1), "dynamic").minimize(
            tf.reduce_sum(w * w))
        with v1.Session(graph=graph) as sess:
          sess.run(v1.global_variables_initializer())
          sess.run(train_op)
          states.append(harness.snapshot(sess, v1.global_variables()))
    harness.assert_bit_identical(self, *states)
