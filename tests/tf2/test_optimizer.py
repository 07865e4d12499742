"""TF2's door: `MixedPrecisionLossScaleOptimizer` and the rewrite switch.

Bit parity with TF's built-in over whole training runs is in
`test_parity.py`; the float16 rewrite itself in `test_graph_rewrite.py`.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import harness
from tests.support import models

v1 = tf.compat.v1
tf_mp = tf.compat.v1.mixed_precision
SGD = models.OPTIMIZERS["sgd"]
ACCEPTED = ("'dynamic'", "int or float", "LossScaleManager",
            "tf.compat.v1.mixed_precision.FixedLossScale/DynamicLossScale")


class AcceptedLossScalesTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("dynamic_string", lambda: "dynamic", managers.DynamicLossScale,
       2.0**15),
      ("int", lambda: 64, managers.FixedLossScale, 64.0),
      ("float", lambda: 2.5, managers.FixedLossScale, 2.5),
      ("our_fixed", lambda: managers.FixedLossScale(8),
       managers.FixedLossScale, 8.0),
      ("our_dynamic", lambda: managers.DynamicLossScale(16, 3),
       managers.DynamicLossScale, 16.0),
      ("contrib_manager",
       lambda: managers.ExponentialUpdateLossScaleManager(32, 2),
       managers.ExponentialUpdateLossScaleManager, 32.0),
      ("tf_fixed", lambda: tf_mp.FixedLossScale(4), managers.FixedLossScale,
       4.0),
      ("tf_dynamic", lambda: tf_mp.DynamicLossScale(128, 5),
       managers.DynamicLossScale, 128.0),
  )
  def test_accepted_and_trains(self, make_loss_scale, manager_cls, scale):
    with tf.Graph().as_default() as graph:
      # float32 compute: no scale here overflows, so the first step applies.
      loss = models.dense_loss(models.poison_input(), compute_dtype=tf.float32)
      opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(SGD(),
                                                          make_loss_scale())
      self.assertIsInstance(opt, mp_optimizer.LossScaleOptimizer)
      self.assertIsInstance(opt.loss_scale_manager, manager_cls)
      global_step = v1.train.get_or_create_global_step()
      train_op = opt.minimize(loss, global_step=global_step)
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        self.assertEqual(sess.run(opt.loss_scale), scale)
        sess.run(train_op)
        self.assertEqual(sess.run(global_step), 1)

  def test_manager_object_is_used_as_is(self):
    manager = managers.DynamicLossScale(16, 3)
    opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(SGD(), manager)
    self.assertIs(opt.loss_scale_manager, manager)

  @parameterized.named_parameters(
      ("both", {"initial_scale": 8, "dynamic_growth_steps": 3}, 8.0, 3),
      ("initial_scale", {"initial_scale": 8}, 8.0, 2000),
      ("growth_steps", {"dynamic_growth_steps": 3}, 2.0**15, 3),
  )
  def test_keras_keywords_with_dynamic(self, kwargs, initial, period):
    opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(SGD(), "dynamic",
                                                        **kwargs)
    manager = opt.loss_scale_manager
    self.assertIsInstance(manager, managers.DynamicLossScale)
    self.assertEqual((manager.initial_loss_scale, manager.increment_period),
                     (initial, period))
    self.assertEqual((opt.initial_scale, opt.dynamic_growth_steps),
                     (initial, period))


class RejectedArgumentsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      # ValueError throughout: the class TF's optimizer raises.
      ("none", None, ValueError, "None"),
      ("other_string", "auto", ValueError, "'auto'"),
      ("list", [128], ValueError, "[128]"),
      ("object", object(), ValueError, "object"),
      ("bool", False, ValueError, "False"),
  )
  def test_loss_scale_error_lists_what_is_accepted(self, loss_scale, error,
                                                   shown):
    with tf.Graph().as_default() as graph:
      with self.assertRaises(error) as raised:
        mp_optimizer.MixedPrecisionLossScaleOptimizer(SGD(), loss_scale)
      self.assertEmpty(graph.get_operations())
    message = str(raised.exception)
    self.assertIn("`loss_scale`", message)
    self.assertIn(shown, message)
    for accepted in ACCEPTED:
      self.assertIn(accepted, message)

  @parameterized.named_parameters(("zero", 0), ("below_one", 0.25))
  def test_number_below_one(self, loss_scale):
    with self.assertRaisesRegex(ValueError, "`loss_scale` must be >= 1"):
      mp_optimizer.MixedPrecisionLossScaleOptimizer(SGD(), loss_scale)

  @parameterized.named_parameters(
      ("fixed_number", 128), ("dynamic_object", managers.DynamicLossScale()))
  def test_keras_keywords_need_dynamic_string(self, loss_scale):
    with self.assertRaisesRegex(ValueError, "`initial_scale`.*'dynamic'"):
      mp_optimizer.MixedPrecisionLossScaleOptimizer(SGD(), loss_scale,
                                                    initial_scale=8)

  def test_our_optimizer_cannot_be_wrapped_again(self):
    inner = mp_optimizer.MixedPrecisionLossScaleOptimizer(SGD(), "dynamic")
    with self.assertRaisesRegex(ValueError, "`opt`.*inner_optimizer"):
      mp_optimizer.MixedPrecisionLossScaleOptimizer(inner, "dynamic")

  def test_tensorflows_optimizer_cannot_be_wrapped(self):
    with tf.Graph().as_default():
      theirs = tf_mp.MixedPrecisionLossScaleOptimizer(SGD(), 8)
      with self.assertRaisesRegex(ValueError, "`opt`.*twice"):
        mp_optimizer.MixedPrecisionLossScaleOptimizer(theirs, "dynamic")
      with self.assertRaisesRegex(ValueError, "`opt`.*twice"):
        mp_optimizer.LossScaleOptimizer(
            theirs, managers.FixedLossScaleManager(8))

  def test_keras_optimizer_is_a_type_error(self):
    with self.assertRaisesRegex(TypeError, "`opt`.*keras"):
      mp_optimizer.MixedPrecisionLossScaleOptimizer(
          tf.keras.optimizers.SGD(0.1), "dynamic")


class FixedScaleNonFiniteStepTest(parameterized.TestCase):
  """Our fixed scale skips a NaN/Inf step; TF's applies it."""

  def _poisoned_step(self, make_opt):
    """Two clean steps, then one with Inf; returns state before and after."""
    with tf.Graph().as_default() as graph:
      poison = models.poison_input()
      loss = models.dense_loss(poison)
      global_step = v1.train.get_or_create_global_step()
      train_op = make_opt().minimize(loss, global_step=global_step)
      watched = v1.global_variables()
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(train_op)
        sess.run(train_op)
        before = harness.snapshot(sess, watched)
        sess.run(train_op, {poison: np.inf})
        return before, harness.snapshot(sess, watched)

  @parameterized.named_parameters(
      ("number", lambda: 1024),
      ("fixed_loss_scale", lambda: managers.FixedLossScale(1024)),
      ("tf_fixed_converted", lambda: tf_mp.FixedLossScale(1024)),
  )
  def test_ours_skips_by_default(self, loss_scale):
    before, after = self._poisoned_step(
        lambda: mp_optimizer.MixedPrecisionLossScaleOptimizer(
            models.OPTIMIZERS["momentum"](), loss_scale()))
    harness.assert_bit_identical(self, before, after)

  def test_tensorflow_applies_and_corrupts_and_our_switch_matches_it(self):
    _, theirs = self._poisoned_step(
        lambda: tf_mp.MixedPrecisionLossScaleOptimizer(
            models.OPTIMIZERS["momentum"](), 1024))
    before, ours = self._poisoned_step(
        lambda: mp_optimizer.MixedPrecisionLossScaleOptimizer(
            models.OPTIMIZERS["momentum"](),
            managers.FixedLossScale(1024, skip_nonfinite_steps=False)))
    self.assertTrue(np.isnan(theirs["dense/w"]).all())
    self.assertEqual(theirs["global_step"], before["global_step"] + 1)
    harness.assert_bit_identical(self, theirs, ours)

  def test_tf_behaviour_builds_no_finite_check(self):
    with tf.Graph().as_default() as graph:
      opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(
          SGD(), managers.FixedLossScale(8, skip_nonfinite_steps=False))
      opt.minimize(models.dense_loss(models.poison_input()))
      types = {op.type for op in graph.get_operations()}
      self.assertNoCommonElements(types, {"If", "StatelessIf", "IsFinite",
                                          "Switch"})


class DelegationTest(parameterized.TestCase):

  def test_name_slots_and_variables_like_tensorflow(self):
    with tf.Graph().as_default():
      loss = models.dense_loss(models.poison_input())
      inner = models.OPTIMIZERS["adam"]()
      opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(inner, "dynamic")
      opt.minimize(loss)
      self.assertEqual(opt.get_name(), "Adam")
      self.assertEqual(sorted(opt.get_slot_names()), ["m", "v"])
      self.assertEqual(
          sorted(v.op.name for v in opt.variables()),
          ["beta1_power", "beta2_power", "current_loss_scale", "dense/b/Adam",
           "dense/b/Adam_1", "dense/w/Adam", "dense/w/Adam_1", "good_steps"])

  def test_tracks_tensorflows_checkpoint_names(self):
    inner = SGD()
    manager = managers.DynamicLossScale()
    opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(inner, manager)
    children = tf.train.TrackableView(opt).children(opt)
    self.assertIs(children["base_optimizer"], inner)
    self.assertIs(children["loss_scale"], manager)


class RewriteSwitchTest(parameterized.TestCase):
  """The switch flips TF's own session-wide rewrite option both ways."""

  def setUp(self):
    super().setUp()
    self.addCleanup(mp_optimizer.disable_mixed_precision_graph_rewrite)

  def _rewrite_on(self):
    return tf.config.optimizer.get_experimental_options().get(
        "auto_mixed_precision", False)

  @parameterized.named_parameters(
      ("default", (), managers.DynamicLossScale, 2.0**15),
      ("number", (256,), managers.FixedLossScale, 256.0),
      ("tf_dynamic", (tf_mp.DynamicLossScale(8, 2),),
       managers.DynamicLossScale, 8.0),
  )
  def test_enable_wraps_and_turns_on_then_disable_turns_off(
      self, args, manager_cls, initial_scale):
    inner = SGD()
    opt = mp_optimizer.enable_mixed_precision_graph_rewrite(inner, *args)
    self.assertTrue(self._rewrite_on())
    self.assertIsInstance(opt, mp_optimizer.MixedPrecisionLossScaleOptimizer)
    self.assertIs(opt.inner_optimizer, inner)
    self.assertIsInstance(opt.loss_scale_manager, manager_cls)
    self.assertEqual(opt.initial_scale, initial_scale)
    mp_optimizer.disable_mixed_precision_graph_rewrite()
    self.assertFalse(self._rewrite_on())

  @parameterized.named_parameters(
      ("already_wrapped", lambda: mp_optimizer.MixedPrecisionLossScaleOptimizer(
          SGD(), 8), "dynamic", ValueError),
      ("bad_loss_scale", SGD, None, ValueError),
      ("keras_optimizer", lambda: tf.keras.optimizers.SGD(0.1), "dynamic",
       TypeError),
  )
  def test_bad_arguments_leave_the_rewrite_off(self, make_opt, loss_scale,
                                               error):
    with self.assertRaises(error):
      mp_optimizer.enable_mixed_precision_graph_rewrite(make_opt(), loss_scale)
    self.assertFalse(self._rewrite_on())
