"""Misuse caught at graph-build time, with a message that says what to do."""

import warnings

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import models

v1 = tf.compat.v1


def _setup():
  loss = models.dense_loss(models.poison_input())
  opt = mp_optimizer.LossScaleOptimizer(
      models.OPTIMIZERS["sgd"](), managers.FixedLossScaleManager(1024))
  return loss, opt, v1.trainable_variables()


class ScaledGradientsTest(parameterized.TestCase):

  def test_tf_gradients_of_the_scaled_loss_are_refused(self):
    with tf.Graph().as_default():
      loss, opt, variables = _setup()
      grads = tf.gradients(opt.get_scaled_loss(loss), variables)
      with self.assertRaisesRegex(ValueError, r"dense/(w|b).*get_unscaled"):
        opt.apply_gradients(zip(grads, variables))

  def test_inner_compute_gradients_of_the_scaled_loss_are_refused(self):
    with tf.Graph().as_default():
      loss, opt, _ = _setup()
      grads_and_vars = opt.inner_optimizer.compute_gradients(
          opt.scale_loss(loss))
      with self.assertRaisesRegex(ValueError, "never divided by the loss"):
        opt.apply_gradients(grads_and_vars)

  def test_clipped_and_unscaled_gradients_are_accepted(self):
    with tf.Graph().as_default() as g:
      loss, opt, variables = _setup()
      grads = opt.get_unscaled_gradients(
          tf.gradients(opt.get_scaled_loss(loss), variables))
      clipped, _ = tf.clip_by_global_norm(grads, 1.0)
      custom = opt.apply_gradients(zip(clipped, variables))
      reference = [g for g, _ in opt.compute_gradients(loss)]
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        got, want = sess.run((grads, reference))
        for a, b in zip(got, want):
          np.testing.assert_array_equal(a, b)
        sess.run(custom)

  def test_gradients_of_the_plain_loss_are_refused(self):
    # The other ways are tables in test_unscaled_gradients.py.
    with tf.Graph().as_default():
      loss, opt, variables = _setup()
      with self.assertRaisesRegex(ValueError, "never multiplied by the loss"):
        opt.apply_gradients(zip(tf.gradients(loss, variables), variables))


class MalformedPairsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("empty", lambda variables: [], ValueError,
       r"^No variables provided\. .*`grads_and_vars` is empty"),
      ("all_none", lambda variables: [(None, v) for v in variables],
       ValueError, r"^No gradients provided for any variable: .*dense/w.*"
       r"dense/b.*Every gradient .* is None"),
      ("not_a_pair", lambda variables: [variables[0]], TypeError,
       r"\(gradient, variable\) pairs.*dense/w"),
      ("triple", lambda variables: [(None, variables[0], 1)], TypeError,
       r"\(gradient, variable\) pairs.*None"),
      ("string_gradient",
       lambda variables: [(np.ones(2, np.float32), variables[1]),
                          ("gradient", variables[0])],
       TypeError, r"(?s)convertible to a Tensor.*dense/w.*'gradient'.*str"),
  )
  def test_bad_grads_and_vars(self, make, error, pattern):
    with tf.Graph().as_default() as g:
      _, opt, variables = _setup()
      ops_before = len(g.get_operations())
      with self.assertRaisesRegex(error, pattern):
        opt.apply_gradients(make(variables))
      self.assertLen(g.get_operations(), ops_before)


  @parameterized.named_parameters(
      ("empty", lambda variables: []),
      ("all_none", lambda variables: [(None, v) for v in variables]),
      ("all_none_generator", lambda variables: ((None, v) for v in variables)))
  def test_messages_begin_with_tensorflows_own(self, make):
    with tf.Graph().as_default():
      _, opt, variables = _setup()
      with self.assertRaises(ValueError) as theirs:
        opt.inner_optimizer.apply_gradients(make(variables))
      with self.assertRaises(ValueError) as ours:
        opt.apply_gradients(make(variables))
    self.assertIs(type(ours.exception), type(theirs.exception))
    self.assertStartsWith(str(ours.exception), str(theirs.exception))


class Bfloat16WarningTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("bfloat16", tf.bfloat16, True, "compute_gradients"),
      ("bfloat16_minimize", tf.bfloat16, True, "minimize"),
      ("float16", tf.float16, False, "compute_gradients"),
      ("float32", tf.float32, False, "compute_gradients"))
  def test_warns_only_for_bfloat16_only_models(self, dtype, warns, method):
    with tf.Graph().as_default():
      loss = models.dense_loss(models.poison_input(), compute_dtype=dtype)
      opt = mp_optimizer.LossScaleOptimizer(
          models.OPTIMIZERS["sgd"](), managers.FixedLossScaleManager(8))
      with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        getattr(opt, method)(loss)
      found = [w for w in caught if issubclass(w.category, UserWarning)
               and "bfloat16" in str(w.message)]
      self.assertLen(found, 1 if warns else 0)
      if warns:
        self.assertIn("use managers.NoLossScale()", str(found[0].message))
        # At the caller's line, not inside this library or TensorFlow.
        self.assertEqual(found[0].filename, __file__)
