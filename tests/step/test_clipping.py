"""clipnorm, clipvalue, global_clipnorm: on unscaled gradients, after the check.

Expected updates are computed by hand in numpy float32 from the plain float32
gradient (tf.gradients of the unscaled loss): SGD with learning rate 1 moves
each variable by minus its clipped gradient.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import harness
from tests.support import mirrored
from tests.support import models

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

  @parameterized.named_parameters(harness.named_product(option=["clipnorm", "clipvalue", "global_clipnorm"],
                         face=["contrib", "tf2"]))
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


# Finite gradients whose squares overflow float32 (about 1.8e19 and up).
HUGE_GRADIENTS = np.array([3e38, -3e38, 1e20, -1e20, 1.0, 0.0] + [1e20] * 58,
                          np.float32)


def _expected_clip(option, grad, limit):
  """Clipped gradient in float64, rounded to float32."""
  grad = grad.astype(np.float64)
  if option == "clipvalue":
    return np.clip(grad, -limit, limit).astype(np.float32)
  norm = np.sqrt(np.sum((grad / 3e38)**2)) * 3e38
  return (grad * min(1.0, limit / norm)).astype(np.float32)


class HugeGradientsTest(parameterized.TestCase):
  """Finite gradients of any size are clipped, never turned into NaN or 0."""

  @parameterized.named_parameters(
      (f"{option}_{limit:g}", option, limit)
      for option in ("clipnorm", "global_clipnorm", "clipvalue")
      for limit in (1.0, 1e-30, 1e30))
  def test_clipped_update_is_finite_and_exact(self, option, limit):
    with tf.Graph().as_default() as g:
      w = v1.get_variable("w", initializer=np.zeros(64, np.float32))
      # d loss / d w = HUGE_GRADIENTS exactly (the loss itself may be Inf).
      loss = tf.reduce_sum(w * tf.constant(HUGE_GRADIENTS))
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(1.0),
          managers.FixedLossScaleManager(1), **{option: limit})
      train_op = opt.minimize(loss)
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        _, applied = sess.run([train_op, mp_optimizer.step_applied()])
        moved = -sess.run(w)
    self.assertTrue(applied)
    self.assertTrue(np.all(np.isfinite(moved)), moved)
    expected = _expected_clip(option, HUGE_GRADIENTS, limit)
    np.testing.assert_allclose(moved, expected, rtol=1e-5,
                               atol=np.float32(limit) * 1e-6)
    self.assertGreater(np.abs(moved).max(), 0.0)

  def test_replica_sum_that_overflows_is_a_skipped_overflow(self):
    # Each replica's gradient is finite (3e38 in one entry), their sum is
    # not: the clipped update would be NaN, so the step is an overflow.
    with tf.Graph().as_default() as g:
      strategy = tf.distribute.MirroredStrategy(mirrored.DEVICES)
      with strategy.scope():
        w = v1.get_variable("w", initializer=np.zeros(4, np.float32))
        manager = managers.ExponentialUpdateLossScaleManager(
            1, 1000, decr_every_n_nan_or_inf=1, min_loss_scale=0.25)
        opt = mp_optimizer.LossScaleOptimizer(
            v1.train.GradientDescentOptimizer(1.0), manager,
            global_clipnorm=1.0)
        grad = tf.constant([3e38, 1.0, 0.0, 0.0], tf.float32)
        train_op = strategy.group(strategy.run(
            lambda: opt.minimize(tf.reduce_sum(w * grad))))
      skipped = mp_optimizer.skipped_steps()
      with v1.Session(graph=g, config=mirrored.SESSION_CONFIG) as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(train_op)
        self.assertEqual(sess.run(skipped), 1)
        self.assertEqual(sess.run(manager.get_loss_scale()), np.float32(0.8))
        np.testing.assert_array_equal(sess.run(w), np.zeros(4, np.float32))
