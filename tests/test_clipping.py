"""clipnorm, clipvalue, global_clipnorm: on unscaled gradients, after the check.

Expected updates are computed by hand in numpy float32 from the plain float32
gradient (tf.gradients of the unscaled loss): SGD with learning rate 1 moves
each variable by minus its clipped gradient.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import managers
import mp_optimizer
from tests import harness
from tests import models

v1 = tf.compat.v1
LIMIT = 0.5


def _clip_by_hand(option, grads):
  grads = [g.astype(np.float32) for g in grads]
  if option == "clipnorm":
    return [g * min(1.0, LIMIT / np.linalg.norm(g)) for g in grads]
  if option == "clipvalue":
    return [np.clip(g, -LIMIT, LIMIT) for g in grads]
  norm = np.sqrt(sum(np.sum(g.astype(np.float64)**2) for g in grads))
  return [g * np.float32(LIMIT / max(norm, LIMIT)) for g in grads]


class RecordingSGD(v1.train.GradientDescentOptimizer):
  """Plain SGD that also remembers what kind of gradients it was given."""

  def __init__(self):
    super().__init__(1.0)
    self.kinds = []

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    grads_and_vars = list(grads_and_vars)
    self.kinds.extend(type(g).__name__ for g, _ in grads_and_vars)
    return super().apply_gradients(grads_and_vars, global_step, name)


class ClippingTest(parameterized.TestCase):

  @parameterized.product(option=["clipnorm", "clipvalue", "global_clipnorm"],
                         face=["contrib", "tf2"])
  def test_dense_update_equals_hand_clipped_gradient(self, option, face):
    x_data, y_data = models.regression_data(16)
    with tf.Graph().as_default() as g:
      x, y, loss = models.regression()
      variables = v1.trainable_variables()
      reference = tf.gradients(loss, variables)
      inner = v1.train.GradientDescentOptimizer(1.0)
      opt = (mp_optimizer.LossScaleOptimizer(
          inner, managers.ExponentialUpdateLossScaleManager(2**12, 100),
          **{option: LIMIT}) if face == "contrib" else
             mp_optimizer.MixedPrecisionLossScaleOptimizer(
                 inner, "dynamic", **{option: LIMIT}))
      train_op = opt.minimize(loss)
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        feed = {x: x_data, y: y_data}
        grads = sess.run(reference, feed)
        before = sess.run(variables)
        sess.run(train_op, feed)
        after = sess.run(variables)
    clipped = _clip_by_hand(option, grads)
    self.assertFalse(np.allclose(clipped[0], grads[0]), "clip inactive")
    for b, a, c in zip(before, after, clipped):
      np.testing.assert_allclose(b - a, c, rtol=1e-5, atol=1e-7)

  @parameterized.named_parameters(("clipnorm", "clipnorm"),
                                  ("clipvalue", "clipvalue"),
                                  ("global_clipnorm", "global_clipnorm"))
  def test_sparse_gradient_is_clipped_as_its_dense_sum_and_stays_sparse(
      self, option):
    with tf.Graph().as_default() as g:
      loss = models.embedding_loss(models.poison_input())  # rows 1, 3, 3
      table = v1.trainable_variables()[0]
      dense_reference = tf.convert_to_tensor(tf.gradients(loss, [table])[0])
      inner = RecordingSGD()
      opt = mp_optimizer.LossScaleOptimizer(
          inner, managers.FixedLossScaleManager(256), **{option: LIMIT})
      train_op = opt.minimize(loss)
      self.assertEqual(inner.kinds, ["IndexedSlices"])
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        grad = sess.run(dense_reference)
        before = sess.run(table)
        sess.run(train_op)
        after = sess.run(table)
    clipped, = _clip_by_hand(option, [grad])
    np.testing.assert_allclose(before - after, clipped, rtol=2e-3, atol=1e-6)
    np.testing.assert_array_equal((before - after)[[0, 2, 4]], 0)

  @parameterized.named_parameters(("nan", np.nan), ("inf", np.inf))
  def test_non_finite_step_stays_skipped(self, poison):
    with tf.Graph().as_default() as g:
      poison_in = models.poison_input()
      loss = models.dense_loss(poison_in)
      manager = managers.DynamicLossScale(2**10)
      opt = mp_optimizer.LossScaleOptimizer(
          models.OPTIMIZERS["adam"](), manager, global_clipnorm=1.0)
      train_op = opt.minimize(loss)
      state = {v.ref() for v in manager.variables()}
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(train_op)
        watched = [v for v in v1.global_variables() if v.ref() not in state]
        before = harness.snapshot(sess, watched)
        sess.run(train_op, {poison_in: poison})
        harness.assert_bit_identical(self, before,
                                     harness.snapshot(sess, watched))

  @parameterized.named_parameters(
      ("two_options", dict(clipnorm=1.0, clipvalue=1.0), ValueError,
       "Only one of"),
      ("zero", dict(clipnorm=0), ValueError, "`clipnorm` must be > 0"),
      ("negative", dict(global_clipnorm=-1.0), ValueError,
       "`global_clipnorm` must be > 0"),
      ("string", dict(clipvalue="1"), TypeError, "`clipvalue`"),
      ("inf", dict(clipnorm=float("inf")), ValueError, "`clipnorm` must be"))
  def test_bad_options(self, kwargs, error, pattern):
    with self.assertRaisesRegex(error, pattern):
      mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["sgd"](),
                                      managers.FixedLossScaleManager(8),
                                      **kwargs)
