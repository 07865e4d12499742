"""Keras-style names on `LossScaleOptimizer`, for custom loops with tf.gradients.

`tf.keras.mixed_precision.LossScaleOptimizer` users know `inner_optimizer`,
`loss_scale`, `dynamic`, `initial_scale`, `dynamic_growth_steps`,
`get_scaled_loss`/`scale_loss`, `get_unscaled_gradients` and `check_finite`.
The same names work on our optimizer, in graph mode.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import harness
from tests.support import models

v1 = tf.compat.v1
SGD = models.OPTIMIZERS["sgd"]
MP = mp_optimizer.MixedPrecisionLossScaleOptimizer


def _tf2(loss_scale):
  return lambda opt: mp_optimizer.MixedPrecisionLossScaleOptimizer(
      opt, loss_scale())


def _contrib(manager):
  return lambda opt: mp_optimizer.LossScaleOptimizer(opt, manager())


class PropertiesTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("tf2_dynamic", _tf2(lambda: managers.DynamicLossScale(64, 9)), True,
       64.0, 9),
      ("tf2_dynamic_string", _tf2(lambda: "dynamic"), True, 2.0**15, 2000),
      ("tf2_fixed", _tf2(lambda: 16), False, 16.0, None),
      ("contrib_exponential", _contrib(
          lambda: managers.ExponentialUpdateLossScaleManager(32, 5)), True,
       32.0, 5),
      ("contrib_fixed", _contrib(lambda: managers.FixedLossScaleManager(8)),
       False, 8.0, None),
  )
  def test_properties(self, wrap, dynamic, initial_scale, growth_steps):
    inner = SGD()
    with tf.Graph().as_default() as graph:
      opt = wrap(inner)
      self.assertIs(opt.inner_optimizer, inner)
      self.assertEqual(opt.dynamic, dynamic)
      self.assertEqual(opt.initial_scale, initial_scale)
      self.assertEqual(opt.dynamic_growth_steps, growth_steps)
      scale = opt.loss_scale
      self.assertIsInstance(scale, tf.Tensor)
      self.assertEqual((scale.dtype, scale.shape.rank), (tf.float32, 0))
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        self.assertEqual(sess.run(scale), initial_scale)

  def test_custom_manager_has_no_initial_scale(self):

    class Halving(managers.LossScaleManager):

      def get_loss_scale(self):
        return tf.constant(4.0)

      def update_loss_scale(self, finite_grads):
        return tf.no_op()

    opt = mp_optimizer.LossScaleOptimizer(SGD(), Halving())
    self.assertEqual((opt.initial_scale, opt.dynamic_growth_steps,
                      opt.dynamic), (None, None, False))

  @parameterized.named_parameters(
      (name, name) for name in ("inner_optimizer", "loss_scale", "dynamic",
                                "initial_scale", "dynamic_growth_steps",
                                "clipnorm", "clipvalue", "global_clipnorm",
                                "gradient_accumulation_steps"))
  def test_read_only(self, name):
    opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(SGD(), "dynamic")
    with self.assertRaises(AttributeError):
      setattr(opt, name, 2)


def _keras_loss_scale_optimizer():
  """Keras's own LossScaleOptimizer with its defaults: Keras 2's OptimizerV2
  one on TF 2.15 (the kind with `clipnorm`), Keras 3's on TF >= 2.16."""
  try:
    inner = tf.keras.optimizers.legacy.SGD()
  except ImportError:  # Keras 3 has no legacy optimizers.
    inner = tf.keras.optimizers.SGD()
  return tf.keras.mixed_precision.LossScaleOptimizer(inner)


class BeforeFirstUseTest(parameterized.TestCase):
  """Python-valued names read with no graph at all (eager, nothing built)."""

  @parameterized.named_parameters(
      ("defaults", lambda: MP(SGD(), "dynamic"),
       dict(dynamic=True, initial_scale=2.0**15, dynamic_growth_steps=2000,
            clipnorm=None, clipvalue=None, global_clipnorm=None,
            gradient_accumulation_steps=None)),
      ("clipnorm", lambda: MP(SGD(), "dynamic", clipnorm=1.5),
       dict(clipnorm=1.5, clipvalue=None, global_clipnorm=None)),
      ("clipvalue_contrib",
       lambda: mp_optimizer.LossScaleOptimizer(
           SGD(), managers.FixedLossScaleManager(8), clipvalue=0.5),
       dict(clipnorm=None, clipvalue=0.5, global_clipnorm=None,
            dynamic=False, initial_scale=8.0, dynamic_growth_steps=None)),
      ("global_clipnorm_and_accumulation",
       lambda: MP(SGD(), 4, global_clipnorm=2, gradient_accumulation_steps=4),
       dict(global_clipnorm=2, gradient_accumulation_steps=4, clipnorm=None,
            initial_scale=4.0)),
  )
  def test_readable_before_first_use(self, build, want):
    self.assertTrue(tf.executing_eagerly())  # No graph to build anything in.
    opt = build()
    self.assertEqual({name: getattr(opt, name) for name in want}, want)

  @parameterized.named_parameters(
      (name, name) for name in ("initial_scale", "dynamic_growth_steps",
                                "clipnorm", "clipvalue", "global_clipnorm"))
  def test_defaults_as_keras(self, name):
    ours = MP(SGD(), "dynamic")
    self.assertEqual(getattr(ours, name),
                     getattr(_keras_loss_scale_optimizer(), name))


def _custom_loop(opt, loss, variables, global_step):
  """What a custom loop writes with the Keras-style names."""
  grads = tf.gradients(opt.get_scaled_loss(loss), variables)
  grads = opt.get_unscaled_gradients(grads)
  finite = opt.check_finite(grads)
  return opt.apply_gradients(zip(grads, variables), global_step), finite


def _minimize(opt, loss, variables, global_step):
  train_op = opt.minimize(loss, var_list=variables, global_step=global_step)
  return train_op, tf.constant(True)


class CustomLoopTest(parameterized.TestCase):
  """tf.gradients + the Keras-style methods == minimize, bit for bit."""

  SCHEDULE = [1.0, 1.0, np.inf, 1.0, np.nan, 1.0, 1.0, 1.0]

  def _run(self, build_step, optimizer):
    with tf.Graph().as_default() as graph:
      poison = models.poison_input()
      loss = models.dense_loss(poison)
      opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(
          models.OPTIMIZERS[optimizer](), managers.DynamicLossScale(2**10, 2))
      global_step = v1.train.get_or_create_global_step()
      train_op, finite = build_step(opt, loss, v1.trainable_variables(),
                                    global_step)
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        states, verdicts = [], []
        for value in self.SCHEDULE:
          verdicts.append(sess.run([train_op, finite], {poison: value})[1])
          states.append(harness.snapshot(sess, v1.global_variables()))
        return states, verdicts

  @parameterized.named_parameters(("sgd", "sgd"), ("adam", "adam"))
  def test_same_bits_as_minimize(self, optimizer):
    custom, verdicts = self._run(_custom_loop, optimizer)
    reference, _ = self._run(_minimize, optimizer)
    self.assertEqual(verdicts, [np.isfinite(p) for p in self.SCHEDULE])
    for ours, theirs in zip(custom, reference):
      harness.assert_bit_identical(self, theirs, ours)
    self.assertEqual(custom[-1]["global_step"], 6)


class MethodsTest(parameterized.TestCase):

  @parameterized.named_parameters(("get_scaled_loss", "get_scaled_loss"),
                                  ("scale_loss", "scale_loss"))
  def test_scaled_loss(self, method):
    with tf.Graph().as_default() as graph:
      opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(SGD(), 512)
      scaled = getattr(opt, method)(tf.constant(0.25))
      self.assertEqual(scaled.dtype, tf.float32)
      with v1.Session(graph=graph) as sess:
        self.assertEqual(sess.run(scaled), 128.0)

  @parameterized.named_parameters(
      ("get_scaled_loss_float32", "get_scaled_loss", tf.float32),
      ("scale_loss_float32", "scale_loss", tf.float32),
      ("get_scaled_loss_float16", "get_scaled_loss", tf.float16))
  def test_callable_loss_gives_a_callable(self, method, dtype):
    calls = []

    def loss():
      calls.append(1)
      return tf.constant(0.25, dtype)

    with tf.Graph().as_default() as graph:
      opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(SGD(), 512)
      scaled_loss = getattr(opt, method)(loss)
      self.assertTrue(callable(scaled_loss))
      self.assertEqual(calls, [])  # Keras calls the loss only when asked.
      scaled = scaled_loss()
      self.assertEqual((calls, scaled.dtype), ([1], dtype))
      with v1.Session(graph=graph) as sess:
        self.assertEqual(sess.run(scaled), 0.25 * 512)

  def test_callable_loss_as_keras2(self):
    try:
      keras = tf.keras.mixed_precision.LossScaleOptimizer(
          tf.keras.optimizers.legacy.SGD(), dynamic=False, initial_scale=512)
    except ImportError as error:
      self.skipTest(f"Keras 3 has no get_scaled_loss: {error}")
    ours = mp_optimizer.MixedPrecisionLossScaleOptimizer(SGD(), 512)
    with tf.Graph().as_default() as graph:
      results = [opt.get_scaled_loss(lambda: tf.constant(0.25))
                 for opt in (ours, keras)]
      self.assertTrue(all(callable(r) for r in results))
      with v1.Session(graph=graph) as sess:
        ours_value, keras_value = sess.run([r() for r in results])
    self.assertEqual(ours_value, keras_value)

  def test_unscaled_gradients_keep_none_and_sparse(self):
    with tf.Graph().as_default() as graph:
      opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(SGD(), 8)
      sparse = tf.IndexedSlices(tf.constant([[8.0, 16.0]]),
                                tf.constant([3]), tf.constant([5, 2]))
      dense, none, sliced = opt.get_unscaled_gradients(
          [tf.constant([4.0, -24.0]), None, sparse])
      self.assertIsNone(none)
      self.assertIsInstance(sliced, tf.IndexedSlices)
      with v1.Session(graph=graph) as sess:
        dense, sliced = sess.run((dense, sliced))
    np.testing.assert_array_equal(dense, [0.5, -3.0])
    np.testing.assert_array_equal(sliced.values, [[1.0, 2.0]])
    np.testing.assert_array_equal(sliced.indices, [3])

  @parameterized.named_parameters(
      ("finite", 1.0, True), ("inf", np.inf, False),
      ("minus_inf", -np.inf, False), ("nan", np.nan, False))
  def test_check_finite(self, value, want):
    with tf.Graph().as_default() as graph:
      opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(SGD(), "dynamic")
      entry = v1.placeholder(tf.float32, [])
      sparse = tf.IndexedSlices(tf.stack([1.0, entry]), tf.constant([0, 1]))
      finite = opt.check_finite([tf.constant([1.0, 2.0]), None, sparse])
      self.assertEqual((finite.dtype, finite.shape.rank), (tf.bool, 0))
      with v1.Session(graph=graph) as sess:
        self.assertEqual(sess.run(finite, {entry: value}), want)
