"""TF2's LossScale faces: tables against TF's own classes, and config.

Golden numbers come from TensorFlow's `tf.compat.v1.mixed_precision`
`DynamicLossScale` run side by side on the same finite/non-finite sequence,
and, for power-of-two multipliers, from the algorithm worked by hand.

Grappler's constant folding rewrites `scale / multiplier` into
`scale * float32(1 / multiplier)`, which for a multiplier of 3 changes the
last bit (100 / 3 gives 33.333332 without it, 33.333336 with it). Every table
therefore runs with Grappler's default settings and with constant folding off.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer.managers import exponential
from tests.support import harness

v1 = tf.compat.v1
tf_mp = tf.compat.v1.mixed_precision
T, F, NAN = True, False, "nan"
f32 = np.float32
BIG = 2.0**127  # float32's largest power of two; twice it overflows.



def _without_constant_folding():
  config = v1.ConfigProto()
  rewrites = config.graph_options.rewrite_options
  rewrites.constant_folding = rewrites.OFF
  return config


CONFIGS = {
    "grappler_default": v1.ConfigProto(),
    "no_constant_folding": _without_constant_folding(),
}


def _run_update(make_loss_scale, steps, config):
  """Feeds `steps` to `make_loss_scale().update(grads)` in a fresh graph.

  A True step feeds finite gradients; False feeds Inf into one of them; "nan"
  feeds NaN. A None gradient is always present and must be ignored.

  Returns:
    A list of (scale, good_steps, should_apply) after each step, with
    good_steps read from the graph variable of that name.
  """
  with tf.Graph().as_default() as graph:
    loss_scale = make_loss_scale()
    grads = [v1.placeholder(tf.float32, [2]), None,
             v1.placeholder(tf.float16, [])]
    update_op, should_apply = loss_scale.update(grads)
    good_steps, = [v for v in v1.global_variables()
                   if v.op.name == "good_steps"]
    with tf.control_dependencies([update_op]):
      after = (tf.identity(loss_scale()), good_steps.read_value(),
               tf.identity(should_apply))
    with v1.Session(graph=graph, config=config) as sess:
      sess.run(v1.global_variables_initializer())
      out = []
      for step in steps:
        bad = {T: 1.0, F: np.inf, NAN: np.nan}[step]
        out.append(tuple(sess.run(after, {grads[0]: [1.0, bad],
                                          grads[2]: 2.0})))
      return out


# name, (initial_loss_scale, increment_period, multiplier), steps, expected
# scales worked by hand (None: the multiplier is not a power of two, TF's run
# is the only reference).
TABLES = (
    ("grows_every_period", (1, 2, 2.0), [T] * 6, [1, 2, 2, 4, 4, 8]),
    ("halves_on_every_overflow", (1024, 2, 2.0), [F, NAN, F, F],
     [512, 256, 128, 64]),
    ("overflow_resets_the_period", (1, 3, 2.0), [T, T, F, T, T, T],
     [1, 1, 1, 1, 1, 2]),
    ("floor_at_one", (2, 2, 2.0), [F, F, F], [1, 1, 1]),
    ("floor_from_an_odd_scale", (3, 1, 2.0), [F, F, T], [1.5, 1, 2]),
    ("growth_refused_when_it_overflows", (BIG, 1, 2.0), [T, T, F, T],
     [BIG, BIG, 2.0**126, BIG]),
    ("period_one_grows_every_step", (1, 1, 4.0), [T, T, F, T],
     [4, 16, 4, 16]),
    ("multiplier_three", (100, 2, 3.0), [F, F, T, T, T, T, F, NAN, F],
     None),
    ("multiplier_three_grows", (1, 1, 3.0), [T, T, T, F, T], None),
    ("multiplier_one_and_a_half", (1000, 1, 1.5), [F] * 5 + [T] * 3, None),
    ("tf_defaults", (), [T] * 3 + [F] * 3, [2.0**15, 2.0**15, 2.0**15,
                                           2.0**14, 2.0**13, 2.0**12]),
)


def _tables():
  return [(f"{name}_{config}", args, steps, expected, config)
          for name, args, steps, expected in TABLES for config in CONFIGS]


class DynamicLossScaleTableTest(parameterized.TestCase):

  @parameterized.named_parameters(*_tables())
  def test_same_numbers_as_tensorflow(self, args, steps, expected, config):
    got = _run_update(lambda: managers.DynamicLossScale(*args), steps,
                      CONFIGS[config])
    want = _run_update(lambda: tf_mp.DynamicLossScale(*args), steps,
                       CONFIGS[config])
    self.assertLen(got, len(steps))
    for step, (ours, theirs) in enumerate(zip(got, want)):
      self.assertEqual(f32(ours[0]).tobytes(), f32(theirs[0]).tobytes(),
                       f"scale after step {step}: {ours[0]} vs {theirs[0]}")
      self.assertEqual(ours[1:], theirs[1:], f"counter/verdict, step {step}")
      self.assertEqual(ours[2], steps[step] is T)

  @parameterized.named_parameters(
      (name, args, steps, expected)
      for name, args, steps, expected in TABLES if expected is not None)
  def test_scales_worked_by_hand(self, args, steps, expected):
    got = _run_update(lambda: managers.DynamicLossScale(*args), steps,
                      CONFIGS["grappler_default"])
    self.assertEqual([scale for scale, _, _ in got],
                     [f32(e) for e in expected])

  def test_counter_is_int64_and_resets(self):
    got = _run_update(lambda: managers.DynamicLossScale(8, 3), [T, T, T, T, F],
                      CONFIGS["grappler_default"])
    counters = [good for _, good, _ in got]
    self.assertEqual(counters, [1, 2, 0, 1, 0])
    self.assertEqual({type(c) for c in counters}, {np.int64})


class OneStateMachineTest(parameterized.TestCase):

  def test_dynamic_is_the_exponential_manager_with_tf_settings(self):
    scale = managers.DynamicLossScale(100, 7, 3)
    self.assertIsInstance(scale, exponential.ExponentialUpdateLossScaleManager)
    self.assertEqual(
        (scale.init_loss_scale, scale.incr_every_n_steps,
         scale.decr_every_n_nan_or_inf, scale.incr_ratio, scale.decr_ratio,
         scale.hysteresis),
        (100.0, 7, 1, 3.0, 1 / 3, "contrib"))

  def test_dynamic_steps_as_the_exponential_manager_with_its_settings(self):
    # A multiplier of 2: `scale / 2` and `scale * 0.5` agree bit for bit.
    steps = [T, T, F, T, T, T, F, F, T] * 2
    tf2 = harness.run_manager(
        lambda: managers.DynamicLossScale(64, 3, 2, max_loss_scale=256),
        steps)
    contrib = harness.run_manager(
        lambda: managers.ExponentialUpdateLossScaleManager(
            64, 3, 1, 2, 0.5, max_loss_scale=256), steps)
    self.assertEqual([(s["scale"], s["good_steps"]) for s in tf2],
                     [(s["scale"], s["good_steps"]) for s in contrib])
    self.assertEqual({s["bad_steps"] for s in contrib}, {0})

  def test_fixed_is_the_fixed_manager(self):
    self.assertIsInstance(managers.FixedLossScale(8),
                          managers.FixedLossScaleManager)

  @parameterized.named_parameters(
      ("fixed", managers.FixedLossScale, managers.FixedLossScaleManager),
      ("dynamic", managers.DynamicLossScale,
       managers.ExponentialUpdateLossScaleManager))
  def test_a_tf2_face_has_one_base_class(self, face, contrib_manager):
    self.assertEqual(face.__bases__, (managers.LossScale,))
    self.assertTrue(issubclass(face, contrib_manager))


class CallTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("fixed", lambda: managers.FixedLossScale(96), 96.0),
      ("dynamic", lambda: managers.DynamicLossScale(48, 5), 48.0),
      ("dynamic_default", managers.DynamicLossScale, 2.0**15),
  )
  def test_call_returns_the_scale_as_a_float32_scalar(self, make, value):
    with tf.Graph().as_default() as graph:
      scale = make()()
      self.assertEqual(scale.dtype, tf.float32)
      self.assertEqual(scale.shape.rank, 0)
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        self.assertEqual(sess.run(scale), value)


class FixedUpdateTest(parameterized.TestCase):

  @parameterized.named_parameters(("finite", 1.0, True),
                                  ("inf", np.inf, False),
                                  ("nan", np.nan, False))
  def test_default_skips_non_finite_steps(self, value, apply):
    with tf.Graph().as_default() as graph:
      grad = v1.placeholder(tf.float32, [])
      update_op, should_apply = managers.FixedLossScale(8).update([grad, None])
      # A checking scale returns its update as a bool tensor, as TF's
      # DynamicLossScale does, so tf.identity works on it.
      self.assertIsInstance(update_op, tf.Tensor)
      self.assertEqual(update_op.dtype, tf.bool)
      tf.identity(update_op)
      with v1.Session(graph=graph) as sess:
        self.assertEqual(sess.run(should_apply, {grad: value}), apply)

  def test_tf_behaviour_always_applies_like_tf(self):
    with tf.Graph().as_default():
      grads = [tf.constant(np.inf)]
      ours = managers.FixedLossScale(8, skip_nonfinite_steps=False)
      _, should_apply = ours.update(grads)
      _, tf_should_apply = tf_mp.FixedLossScale(8).update(grads)
      self.assertIs(should_apply, True)
      self.assertIs(tf_should_apply, True)


class PropertiesTest(parameterized.TestCase):

  def test_dynamic_properties(self):
    scale = managers.DynamicLossScale(64, 9, 3)
    self.assertEqual((scale.initial_loss_scale, scale.increment_period,
                      scale.multiplier), (64.0, 9, 3.0))
    self.assertTrue(scale.dynamic)

  def test_tf_defaults(self):
    ours, theirs = managers.DynamicLossScale(), tf_mp.DynamicLossScale()
    self.assertEqual((ours.initial_loss_scale, ours.increment_period,
                      ours.multiplier),
                     (theirs.initial_loss_scale, theirs.increment_period,
                      theirs.multiplier))

  def test_fixed_properties(self):
    scale = managers.FixedLossScale(128)
    self.assertEqual(scale.loss_scale_value, 128.0)
    self.assertFalse(scale.dynamic)
    self.assertTrue(scale.skips_nonfinite_steps)
    self.assertFalse(managers.FixedLossScale(
        128, skip_nonfinite_steps=False).skips_nonfinite_steps)

  @parameterized.named_parameters(
      ("initial_loss_scale", managers.DynamicLossScale, "initial_loss_scale"),
      ("increment_period", managers.DynamicLossScale, "increment_period"),
      ("multiplier", managers.DynamicLossScale, "multiplier"),
      ("loss_scale_value", lambda: managers.FixedLossScale(2),
       "loss_scale_value"),
  )
  def test_read_only(self, make, name):
    scale = make()
    with self.assertRaises(AttributeError):
      setattr(scale, name, 4)

  def test_keras_aliases(self):
    scale = managers.DynamicLossScale(initial_scale=16, dynamic_growth_steps=3)
    self.assertEqual((scale.initial_loss_scale, scale.increment_period),
                     (16.0, 3))


class ConfigTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("fixed", lambda: managers.FixedLossScale(64),
       {"loss_scale_value": 64.0}),
      ("fixed_tf_behaviour",
       lambda: managers.FixedLossScale(64, skip_nonfinite_steps=False),
       {"loss_scale_value": 64.0, "skip_nonfinite_steps": False}),
      ("dynamic", lambda: managers.DynamicLossScale(32, 7, 3),
       {"initial_loss_scale": 32.0, "increment_period": 7,
        "multiplier": 3.0}),
      ("dynamic_bounds",
       lambda: managers.DynamicLossScale(32, 7, min_loss_scale=0.5,
                                         max_loss_scale=2**20),
       {"initial_loss_scale": 32.0, "increment_period": 7,
        "multiplier": 2.0, "min_loss_scale": 0.5,
        "max_loss_scale": 2.0**20}),
  )
  def test_round_trip(self, make, config):
    scale = make()
    self.assertEqual(scale.get_config(), config)
    rebuilt = type(scale).from_config(scale.get_config())
    self.assertIsInstance(rebuilt, type(scale))
    self.assertEqual(rebuilt.get_config(), config)

  @parameterized.named_parameters(
      ("fixed", lambda: tf_mp.FixedLossScale(64), managers.FixedLossScale),
      ("dynamic", lambda: tf_mp.DynamicLossScale(32, 7, 3),
       managers.DynamicLossScale),
  )
  def test_configs_travel_both_ways_with_tensorflow(self, make_tf, ours_cls):
    with tf.Graph().as_default():
      theirs = make_tf()
      ours = ours_cls.from_config(theirs.get_config())
      self.assertEqual(ours.get_config(), theirs.get_config())
      back = type(theirs).from_config(ours.get_config())
      self.assertEqual(back.get_config(), theirs.get_config())
