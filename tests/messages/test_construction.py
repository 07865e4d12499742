"""Messages that tell the fix, with the exception classes TF/contrib raised.

Each row is a mistake newcomers make. The error must say what to write
instead; where TensorFlow's `MixedPrecisionLossScaleOptimizer` refuses the
same input, it is run side by side and our exception must be an instance of
the class TF raised, so code that caught TF's error still catches ours.
"""

import inspect
import pydoc

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer

v1 = tf.compat.v1
SGD = v1.train.GradientDescentOptimizer
TF_WRAPPER = v1.mixed_precision.MixedPrecisionLossScaleOptimizer
LSO = mp_optimizer.LossScaleOptimizer
MP = mp_optimizer.MixedPrecisionLossScaleOptimizer


# Built with no graph, so it makes no state: a manager built inside the test's
# graph would make its variables there (as contrib's did), and the check that
# a refused constructor leaves the graph empty would count them.
_EXP = managers.ExponentialUpdateLossScaleManager(8, 2)


def _exp():
  return _EXP


MISTAKES = (
    # name, ours, TF's same call (or None), raised, words the message holds
    ("swapped_contrib", lambda: LSO(_exp(), SGD(1.0)), None, TypeError,
     ["swapped", "optimizer first", "LossScaleOptimizer(opt, "]),
    ("swapped_tf2", lambda: MP("dynamic", SGD(1.0)),
     lambda: TF_WRAPPER("dynamic", SGD(1.0)), TypeError,
     ["swapped", "MixedPrecisionLossScaleOptimizer(opt, 'dynamic')"]),
    ("swapped_number", lambda: MP(128, SGD(1.0)),
     lambda: TF_WRAPPER(128, SGD(1.0)), TypeError,
     ["swapped", "MixedPrecisionLossScaleOptimizer(opt, 128)"]),
    ("optimizer_class_contrib",
     lambda: LSO(v1.train.AdamOptimizer, _exp()), None, TypeError,
     ["the class AdamOptimizer", "AdamOptimizer(learning_rate="]),
    ("optimizer_class_tf2", lambda: MP(v1.train.AdamOptimizer, "dynamic"),
     lambda: TF_WRAPPER(v1.train.AdamOptimizer, "dynamic"), TypeError,
     ["the class AdamOptimizer", "AdamOptimizer(learning_rate="]),
    ("manager_class",
     lambda: LSO(SGD(1.0), managers.FixedLossScaleManager), None, TypeError,
     ["`loss_scale_manager`", "the class FixedLossScaleManager",
      "FixedLossScaleManager(...)"]),
    ("loss_scale_class", lambda: MP(SGD(1.0), managers.DynamicLossScale),
     lambda: TF_WRAPPER(SGD(1.0), v1.mixed_precision.DynamicLossScale),
     TypeError, ["`loss_scale`", "the class DynamicLossScale",
                 "pass 'dynamic'"]),
    ("dynamic_string_to_contrib", lambda: LSO(SGD(1.0), "dynamic"), None,
     TypeError, ["'dynamic'", "MixedPrecisionLossScaleOptimizer(opt, 'dynamic')",
                 "ExponentialUpdateLossScaleManager"]),
    ("number_to_contrib", lambda: LSO(SGD(1.0), 128), None, TypeError,
     ["128", "MixedPrecisionLossScaleOptimizer(opt, 128)",
      "ExponentialUpdateLossScaleManager"]),
    ("no_manager", lambda: LSO(SGD(1.0)), None, TypeError,
     ["needs a loss-scale manager", "ExponentialUpdateLossScaleManager(",
      "MixedPrecisionLossScaleOptimizer(opt, 'dynamic')"]),
    ("no_loss_scale", lambda: MP(SGD(1.0)), lambda: TF_WRAPPER(SGD(1.0)),
     TypeError, ["needs `loss_scale`",
                 "MixedPrecisionLossScaleOptimizer(opt, 'dynamic')"]),
    ("unknown_keyword", lambda: MP(SGD(1.0), "dynamic", clip_norm=1.0),
     None, TypeError, ["MixedPrecisionLossScaleOptimizer.__init__",
                       "'clip_norm'"]),
)


class MistakesTest(parameterized.TestCase):

  @parameterized.named_parameters(*MISTAKES)
  def test_message_tells_the_fix(self, ours, theirs, raised, words):
    with tf.Graph().as_default() as graph:
      with self.assertRaises(raised) as caught:
        ours()
      self.assertEmpty(graph.get_operations(), "half-built graph")
    for word in words:
      self.assertIn(word, str(caught.exception))
    if theirs is not None:
      with tf.Graph().as_default(), self.assertRaises(Exception) as tf_caught:
        theirs()
      self.assertIsInstance(caught.exception, type(tf_caught.exception))

  def test_unknown_keyword_does_not_name_the_base_class(self):
    with self.assertRaises(TypeError) as caught:
      MP(SGD(1.0), "dynamic", clip_norm=1.0)
    self.assertNotIn(" LossScaleOptimizer.__init__", str(caught.exception))
    self.assertFalse(str(caught.exception).startswith("LossScaleOptimizer"))

  @parameterized.named_parameters(
      ("step_applied", mp_optimizer.step_applied,
       "mp_optimizer.step_applied"),
      ("skipped_steps", mp_optimizer.skipped_steps,
       "mp_optimizer.skipped_steps"),
      ("add_summaries", mp_optimizer.add_summaries,
       "mp_optimizer.add_summaries"),
  )
  def test_signals_under_eager(self, function, api):
    self.assertTrue(tf.executing_eagerly())
    with self.assertRaises(RuntimeError) as caught:
      function()
    message = str(caught.exception)
    self.assertIn(api, message)
    self.assertIn("tf.compat.v1.disable_eager_execution()", message)


class HelpTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("contrib", LSO, ["opt", "loss_scale_manager", "clipnorm", "clipvalue",
                        "global_clipnorm", "gradient_accumulation_steps",
                        "overflow_report", "precision_telemetry",
                        "compensated_update"]),
      ("tf2", MP, ["opt", "loss_scale", "initial_scale",
                   "dynamic_growth_steps", "clipnorm", "clipvalue",
                   "global_clipnorm", "gradient_accumulation_steps",
                   "overflow_report", "precision_telemetry",
                   "compensated_update"]),
  )
  def test_help_shows_this_classs_signature(self, cls, names):
    signature = inspect.signature(cls)
    self.assertEqual(list(signature.parameters), names)
    required = [p.name for p in signature.parameters.values()
                if p.default is p.empty and p.kind != p.VAR_KEYWORD]
    self.assertEqual(required, names[:2])
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    self.assertIn(f"{cls.__name__}(opt", text)
    for base_only in ("use_locking", "use_own_namescope_for_non_slot_vars"):
      self.assertNotIn(base_only, text)

  def test_dir_shows_only_public_names(self):
    import mp_optimizer.migrate  # pylint: disable=import-outside-toplevel,unused-import
    names = dir(mp_optimizer)
    self.assertEqual(names, sorted([*mp_optimizer.__all__, "__version__"]))
    for name in names:
      getattr(mp_optimizer, name)


class ForeignManager:
  """Has a manager's two methods, but is not a managers.LossScaleManager."""

  def get_loss_scale(self):
    return 1.0

  def update_loss_scale(self, finite):
    del finite


class ForeignManagerTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("contrib_door", mp_optimizer.LossScaleOptimizer, "`loss_scale_manager`"),
      ("tf2_door", mp_optimizer.MixedPrecisionLossScaleOptimizer,
       "`loss_scale`"))
  def test_manager_like_object_is_named_with_the_fix(self, cls, argument):
    with self.assertRaises(mp_optimizer.errors.ArgumentTypeError) as caught:
      cls(tf.compat.v1.train.GradientDescentOptimizer(1.0), ForeignManager())
    message = str(caught.exception)
    for words in (argument, "ForeignManager", __name__,
                  "not a managers.LossScaleManager",
                  "from mp_optimizer import managers"):
      self.assertIn(words, message)

  def test_argument_type_error_prints_its_public_path(self):
    cls = mp_optimizer.errors.ArgumentTypeError
    self.assertEqual(f"{cls.__module__}.{cls.__qualname__}",
                     "mp_optimizer.errors.ArgumentTypeError")
    self.assertTrue(issubclass(cls, TypeError) and issubclass(cls, ValueError))


class HabitsTest(parameterized.TestCase):
  """Habits from other APIs get a message that names the fix."""

  def test_keras_compile_says_which_optimizer_keras_needs(self):
    opt = mp_optimizer.LossScaleOptimizer(
        tf.compat.v1.train.AdamOptimizer(1e-3), managers.FixedLossScaleManager(8))
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    try:
      model.compile(optimizer=opt, loss="mse")
    except ValueError as error:  # Keras 3 (TF >= 2.16) refuses it here.
      message = str(error)
    else:  # Keras 2 wraps a v1 optimizer; its first step is eager.
      with self.assertRaises(RuntimeError) as caught:
        model.fit(np.ones((4, 2)), np.ones((4, 1)), verbose=0)
      message = str(caught.exception)
    self.assertIn("tf.keras.mixed_precision.LossScaleOptimizer", message)

  def test_minimize_without_gradients_adds_what_to_check(self):
    with tf.Graph().as_default():
      w = tf.compat.v1.get_variable("w", initializer=[1.0])
      unrelated = tf.compat.v1.get_variable("u", initializer=[1.0])
      opt = mp_optimizer.LossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(0.1),
          managers.FixedLossScaleManager(8))
      loss = tf.reduce_sum(w)
      with self.assertRaises(ValueError) as ours:
        opt.minimize(loss, var_list=[unrelated])
      with self.assertRaises(ValueError) as theirs:
        opt.inner_optimizer.minimize(loss, var_list=[unrelated])
    self.assertStartsWith(str(ours.exception), str(theirs.exception))
    self.assertIn("stop_gradient", str(ours.exception))

  def test_assigning_the_scale_variable_sets_the_next_steps_scale(self):
    # contrib's habit: manager.get_loss_scale() is the variable; assign works.
    with tf.Graph().as_default():
      manager = managers.ExponentialUpdateLossScaleManager(2**10, 1000)
      w = tf.compat.v1.get_variable("w", initializer=[1.0])
      train_op = mp_optimizer.LossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(0.1),
          manager).minimize(tf.reduce_sum(w))
      set_scale = manager.get_loss_scale().assign(64.0)
      with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(set_scale)
        sess.run(train_op)
        self.assertEqual(sess.run(mp_optimizer.signals.loss_scale()), 64.0)
