"""TF2 faces against TensorFlow's own loss scales, run side by side.

What `update` returns, what `repr` prints, and which arguments are accepted
or refused with which exception class, each compared with
`tf.compat.v1.mixed_precision.FixedLossScale`/`DynamicLossScale` built from
the same arguments, under TF's default and v1 control flow.
"""

import inspect
import warnings

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import control_flow

from tests.support import harness

v1 = tf.compat.v1
tf_mp = v1.mixed_precision


def _tf(make):
  with warnings.catch_warnings():  # TF's classes warn that they are deprecated.
    warnings.simplefilter("ignore")
    return make()


UPDATE_ROWS = (
    ("dynamic", lambda m: m.DynamicLossScale(1.0, 2, 3.0), {}),
    ("fixed_applying_every_step",
     lambda m: m.FixedLossScale(4.0), {"skip_nonfinite_steps": False}),
)


class UpdateReturnsWhatTfReturnsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{name}_{mode}", mode, make, extra)
      for mode in control_flow.MODES for name, make, extra in UPDATE_ROWS)
  def test_types_and_uses_match(self, mode, make, extra):
    with control_flow.control_flow(mode), tf.Graph().as_default() as graph:
      grads = [tf.constant(1.0), None]
      theirs = _tf(lambda: make(tf_mp)).update(grads)
      ours_scale = make(managers) if not extra else managers.FixedLossScale(
          4.0, **extra)
      ours = ours_scale.update(grads)
      self.assertEqual(type(ours[0]), type(theirs[0]))
      self.assertEqual(type(ours[1]), type(theirs[1]))
      if isinstance(theirs[0], tf.Tensor):
        self.assertEqual(ours[0].dtype, theirs[0].dtype)
        self.assertEqual(ours[0].shape, theirs[0].shape)
        tf.identity(ours[0])
      else:
        with self.assertRaises(TypeError):  # TF's no-op: identity fails too.
          tf.identity(theirs[0])
        with self.assertRaises(TypeError):
          tf.identity(ours[0])
      grouped = tf.group(ours[0])
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(grouped)

  @parameterized.named_parameters(("v2", "v2"), ("v1", "v1"))
  def test_running_the_update_moves_the_scale_like_tf(self, mode):
    # DynamicLossScale(1, 2, 3), finite steps: 1, then grown to 3, 3, then 9.
    with control_flow.control_flow(mode), tf.Graph().as_default() as graph:
      grad = v1.placeholder(tf.float32, [])
      ours = managers.DynamicLossScale(1.0, 2, 3.0)
      theirs = _tf(lambda: tf_mp.DynamicLossScale(1.0, 2, 3.0))
      ours_update = tf.identity(ours.update([grad])[0])
      theirs_update = tf.identity(theirs.update([grad])[0])
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        got = []
        for value in (1.0, 1.0, np.inf, 1.0, 1.0):
          sess.run([ours_update, theirs_update], {grad: value})
          got.append((sess.run(ours()), sess.run(theirs())))
    self.assertEqual([o for o, _ in got], [t for _, t in got])
    self.assertEqual([o for o, _ in got], [1.0, 3.0, 1.0, 1.0, 3.0])


class ReprTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("fixed", lambda m: m.FixedLossScale(123.0)),
      ("fixed_int", lambda m: m.FixedLossScale(123)),
      ("dynamic", lambda m: m.DynamicLossScale(
          initial_loss_scale=1.0, increment_period=2, multiplier=3.0)),
      ("dynamic_ints", lambda m: m.DynamicLossScale(1, 2, 3)),
      ("dynamic_defaults", lambda m: m.DynamicLossScale()),
  )
  def test_identical_to_tf(self, make):
    with tf.Graph().as_default():
      self.assertEqual(repr(make(managers)), repr(_tf(lambda: make(tf_mp))))

  @parameterized.named_parameters(
      ("fixed_applying", lambda: managers.FixedLossScale(
          8, skip_nonfinite_steps=False),
       "FixedLossScale(8.0, skip_nonfinite_steps=False)"),
      ("dynamic_bounds", lambda: managers.DynamicLossScale(
          4, 2, min_loss_scale=0.5, max_loss_scale=2.0**20,
          fail_at_floor_after=3),
       "DynamicLossScale(initial_loss_scale=4.0, increment_period=2, "
       "multiplier=2.0, min_loss_scale=0.5, max_loss_scale=1048576.0, "
       "fail_at_floor_after=3)"),
      ("fixed_manager", lambda: managers.FixedLossScaleManager(128),
       "FixedLossScaleManager(128.0)"),
      ("fixed_manager_applying", lambda: managers.FixedLossScaleManager(
          128, skip_nonfinite_steps=False),
       "FixedLossScaleManager(128.0, skip_nonfinite_steps=False)"),
      ("exponential", lambda: managers.ExponentialUpdateLossScaleManager(
          8, 2),
       "ExponentialUpdateLossScaleManager(init_loss_scale=8.0, "
       "incr_every_n_steps=2, decr_every_n_nan_or_inf=2, incr_ratio=2.0, "
       "decr_ratio=0.8)"),
      ("exponential_extras", lambda: managers.ExponentialUpdateLossScaleManager(
          8, 2, 3, 4, 0.5, min_loss_scale=2, max_loss_scale=1024,
          hysteresis="sticky", fail_at_floor_after=5),
       "ExponentialUpdateLossScaleManager(init_loss_scale=8.0, "
       "incr_every_n_steps=2, decr_every_n_nan_or_inf=3, incr_ratio=4.0, "
       "decr_ratio=0.5, min_loss_scale=2.0, max_loss_scale=1024.0, "
       "hysteresis='sticky', fail_at_floor_after=5)"),
      ("amax_defaults", managers.AmaxHistoryLossScaleManager,
       "AmaxHistoryLossScaleManager(init_loss_scale=32768.0, "
       "history_length=16, margin=1, relax_after=1000, min_loss_scale=1.0, "
       "max_loss_scale=16777216.0)"),
      ("amax", lambda: managers.AmaxHistoryLossScaleManager(
          64, 4, 2, 10, min_loss_scale=0.5, max_loss_scale=2**20),
       "AmaxHistoryLossScaleManager(init_loss_scale=64.0, history_length=4, "
       "margin=2, relax_after=10, min_loss_scale=0.5, "
       "max_loss_scale=1048576.0)"),
  )
  def test_every_non_default_setting_is_shown(self, make, expected):
    self.assertEqual(repr(make()), expected)

  @parameterized.named_parameters(
      ("exponential", managers.ExponentialUpdateLossScaleManager, (8, 2)),
      ("dynamic", managers.DynamicLossScale, ()),
  )
  def test_max_loss_scale_shown_only_when_not_the_default(self, cls, args):
    self.assertNotIn("max_loss_scale", repr(cls(*args)))
    other = 2.0**20 if cls(*args).max_loss_scale is None else None
    made = cls(*args, max_loss_scale=other)
    self.assertIn(f"max_loss_scale={other!r}", repr(made))


  @parameterized.named_parameters(
      ("contrib_defaults", lambda: mp_optimizer.LossScaleOptimizer(
          tf.compat.v1.train.AdamOptimizer(), managers.FixedLossScaleManager(8)),
       "LossScaleOptimizer(<AdamOptimizer 'Adam'>, FixedLossScaleManager(8.0))"),
      ("contrib_options", lambda: mp_optimizer.LossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(0.1, name="sgd"),
          managers.ExponentialUpdateLossScaleManager(8, 2), clipnorm=1.0,
          gradient_accumulation_steps=4),
       "LossScaleOptimizer(<GradientDescentOptimizer 'sgd'>, "
       "ExponentialUpdateLossScaleManager(init_loss_scale=8.0, "
       "incr_every_n_steps=2, decr_every_n_nan_or_inf=2, incr_ratio=2.0, "
       "decr_ratio=0.8), clipnorm=1.0, gradient_accumulation_steps=4)"),
      ("tf2", lambda: mp_optimizer.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.AdamOptimizer(), "dynamic", global_clipnorm=2.0),
       "MixedPrecisionLossScaleOptimizer(<AdamOptimizer 'Adam'>, "
       "DynamicLossScale(initial_loss_scale=32768.0, increment_period=2000, "
       "multiplier=2.0), global_clipnorm=2.0)"),
  )
  def test_optimizer_shows_inner_manager_and_options(self, make, expected):
    with tf.Graph().as_default():
      self.assertEqual(repr(make()), expected)


NOT_RAISED = None
# (argument, value, what TF's DynamicLossScale does, what ours does).
DYNAMIC_ARGS = (
    ("initial_loss_scale", None, TypeError, TypeError),
    ("initial_loss_scale", "abc", ValueError, ValueError),
    ("initial_loss_scale", [1.0], TypeError, TypeError),
    ("initial_loss_scale", np.float32(4), NOT_RAISED, NOT_RAISED),
    ("initial_loss_scale", 4, NOT_RAISED, NOT_RAISED),
    ("increment_period", None, TypeError, TypeError),
    ("increment_period", "abc", ValueError, ValueError),
    ("increment_period", [2], TypeError, TypeError),
    ("increment_period", float("nan"), ValueError, ValueError),
    ("increment_period", 2.0, NOT_RAISED, NOT_RAISED),
    ("increment_period", np.float64(2.0), NOT_RAISED, NOT_RAISED),
    ("increment_period", np.int64(2), NOT_RAISED, NOT_RAISED),
    ("multiplier", None, TypeError, TypeError),
    ("multiplier", "abc", ValueError, ValueError),
    ("multiplier", [2.0], TypeError, TypeError),
    ("multiplier", np.float32(3), NOT_RAISED, NOT_RAISED),
)
# (value, TF's FixedLossScale, ours).
FIXED_ARGS = (
    (None, ValueError, ValueError),
    ("8", ValueError, ValueError),
    ([8], ValueError, ValueError),
    (0.5, ValueError, ValueError),
    (0, ValueError, ValueError),
    (8, NOT_RAISED, NOT_RAISED),
    (2.5, NOT_RAISED, NOT_RAISED),
)


def _outcome(make):
  try:
    make()
  except Exception as error:  # pylint: disable=broad-except
    return type(error)
  return NOT_RAISED


class ArgumentsLikeTfTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{arg}_{harness._case_name(value)}_{type(value).__name__}", arg, value,
       tf_outcome, ours)
      for arg, value, tf_outcome, ours in DYNAMIC_ARGS)
  def test_dynamic(self, arg, value, tf_outcome, ours):
    with tf.Graph().as_default():
      self.assertEqual(
          _outcome(lambda: _tf(lambda: tf_mp.DynamicLossScale(**{arg: value}))),
          tf_outcome)
      self.assertEqual(
          _outcome(lambda: managers.DynamicLossScale(**{arg: value})), ours)

  @parameterized.named_parameters(
      (f"fixed_{harness._case_name(value)}_{type(value).__name__}", value,
       tf_outcome, ours)
      for value, tf_outcome, ours in FIXED_ARGS)
  def test_fixed(self, value, tf_outcome, ours):
    self.assertEqual(_outcome(lambda: _tf(lambda: tf_mp.FixedLossScale(value))),
                     tf_outcome)
    self.assertEqual(_outcome(lambda: managers.FixedLossScale(value)), ours)

  @parameterized.named_parameters(
      ("fixed", managers.FixedLossScale, tf_mp.FixedLossScale),
      ("dynamic", managers.DynamicLossScale, tf_mp.DynamicLossScale))
  def test_help_shows_tfs_arguments_and_defaults(self, ours, theirs):
    theirs = list(inspect.signature(theirs).parameters.values())
    ours = list(inspect.signature(ours).parameters.values())[:len(theirs)]
    self.assertEqual([(p.name, p.kind, repr(p.default)) for p in ours],
                     [(p.name, p.kind, repr(p.default)) for p in theirs])

  @parameterized.named_parameters(("none", None), ("list", [8]),
                                  ("other_string", "static"))
  def test_optimizer_loss_scale_refused_with_tfs_class(self, loss_scale):
    with tf.Graph().as_default():
      sgd = v1.train.GradientDescentOptimizer(1.0)
      self.assertEqual(_outcome(lambda: _tf(
          lambda: tf_mp.MixedPrecisionLossScaleOptimizer(sgd, loss_scale))),
                       ValueError)
      self.assertEqual(_outcome(
          lambda: mp_optimizer.MixedPrecisionLossScaleOptimizer(
              sgd, loss_scale)), ValueError)
      self.assertEqual(_outcome(lambda: managers.get(loss_scale)), ValueError)

  @parameterized.named_parameters(
      ("whole_float", 2.0, 2), ("numpy_whole_float", np.float32(3.0), 3),
      ("int", 4, 4))
  def test_step_counts_accept_whole_floats(self, value, expected):
    with tf.Graph().as_default():
      tf_made = _tf(lambda: tf_mp.DynamicLossScale(increment_period=value))
      ours = managers.DynamicLossScale(increment_period=value)
      self.assertEqual(ours.get_config()["increment_period"],
                       tf_made.get_config()["increment_period"])
      self.assertEqual(ours.increment_period, expected)
      self.assertIs(type(ours.increment_period), int)
    contrib = managers.ExponentialUpdateLossScaleManager(
        8, value, decr_every_n_nan_or_inf=value, fail_at_floor_after=value)
    self.assertEqual((contrib.incr_every_n_steps,
                      contrib.decr_every_n_nan_or_inf), (expected, expected))

  @parameterized.named_parameters(("half", 2.5), ("inf", float("inf")))
  def test_fractional_step_counts_are_refused(self, value):
    with self.assertRaisesRegex(ValueError, "`increment_period`.*whole"):
      managers.DynamicLossScale(increment_period=value)
    with self.assertRaisesRegex(ValueError, "`incr_every_n_steps`.*whole"):
      managers.ExponentialUpdateLossScaleManager(8, value)


class NoneLossScaleMessageTest(parameterized.TestCase):

  def test_none_keeps_tfs_words_inside_ours(self):
    sgd = v1.train.GradientDescentOptimizer(1.0)
    with self.assertRaises(ValueError) as theirs:
      tf_mp.MixedPrecisionLossScaleOptimizer(sgd, None)
    with self.assertRaises(ValueError) as ours:
      mp_optimizer.MixedPrecisionLossScaleOptimizer(sgd, None)
    self.assertStartsWith(str(ours.exception), str(theirs.exception))
    self.assertIn("Pass 'dynamic'", str(ours.exception))


CALL_ROWS = (
    ("dynamic", lambda m: m.DynamicLossScale()),
    ("fixed", lambda m: m.FixedLossScale(123)),
)


class CallReturnsATensorTest(parameterized.TestCase):
  """`loss_scale()` is a `tf.Tensor`, as TF's (its `test_call_type`)."""

  @parameterized.named_parameters(*CALL_ROWS)
  def test_call_type_as_tfs(self, make):
    with tf.Graph().as_default():
      self.assertIsInstance(_tf(lambda: make(tf_mp))(), tf.Tensor)
      self.assertIsInstance(make(managers)(), tf.Tensor)

  def test_get_loss_scale_stays_the_variable(self):
    with tf.Graph().as_default():
      self.assertIsInstance(managers.DynamicLossScale(64).get_loss_scale(),
                            tf.Variable)

  def test_call_after_the_graph_is_finalized_reads_the_current_scale(self):
    with tf.Graph().as_default() as graph:
      loss_scale = managers.DynamicLossScale()
      update, _ = loss_scale.update([tf.constant(np.inf)])
      with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        graph.finalize()
        before = sess.run(loss_scale())
        sess.run(update)
        # TF's default 2**15, halved by one overflow.
        self.assertEqual((before, sess.run(loss_scale())), (2.0**15, 2.0**14))
