"""The top of the scale: above 2**126, 1/S is not a normal float32.

With float32 gradients and a small loss nothing overflows, so a dynamic scale
keeps growing until twice it would be Inf: 2**127. There 1/S = 2**-127 is
subnormal and flushed to 0, every unscaled gradient is exactly 0, and the step
looks finite: contrib and TF's built-in stop training without a signal. Here
such a step counts as an overflow (skipped, counted, the scale shrinks), so
every applied step still moves the weights.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer

v1 = tf.compat.v1
STEPS = 16
LEARNING_RATE = 0.1
# TF's face, multiplier 2, period 1, from 2**118 (worked by hand): steps 1-9
# use 2**118 ... 2**126, apply and double the scale; step 10 uses 2**127,
# whose reciprocal is subnormal: skipped, halved to 2**126; from then on the
# steps alternate between 2**126 (applied) and 2**127 (skipped).
TF2_SCALES_USED = [2.0**e for e in range(118, 128)] + [2.0**126, 2.0**127] * 3
TF2_APPLIED = [True] * 9 + [False, True] * 3 + [False]


def _dense_loss():
  w = v1.get_variable("w", initializer=np.full(4, 0.01, np.float32))
  return w, tf.reduce_sum(tf.square(w))


def _sparse_loss():
  w = v1.get_variable("w", initializer=np.full((6, 2), 0.01, np.float32))
  rows = tf.nn.embedding_lookup(w, [1, 4])
  return w, tf.reduce_sum(tf.square(rows))


def _contrib():
  return mp_optimizer.LossScaleOptimizer(
      v1.train.GradientDescentOptimizer(LEARNING_RATE),
      managers.ExponentialUpdateLossScaleManager(2.0**118, 1))


def _tf2():
  return mp_optimizer.MixedPrecisionLossScaleOptimizer(
      v1.train.GradientDescentOptimizer(LEARNING_RATE),
      managers.DynamicLossScale(2.0**118, increment_period=1, multiplier=2))


def _train(make_optimizer, make_loss):
  """Returns per step: (scale used, applied?, weights changed?)."""
  with tf.Graph().as_default() as graph:
    w, loss = make_loss()
    opt = make_optimizer()
    global_step = v1.train.get_or_create_global_step()
    train_op = opt.minimize(loss, global_step=global_step)
    scale = opt.get_loss_scale()
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      out = []
      for _ in range(STEPS):
        used, step_before, w_before = sess.run([scale, global_step, w])
        sess.run(train_op)
        step_after, w_after = sess.run([global_step, w])
        out.append((float(used), bool(step_after > step_before),
                    not np.array_equal(w_before, w_after)))
      return out


class ScaleTopTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("dense", _dense_loss), ("sparse", _sparse_loss))
  def test_tf2_face_skips_steps_at_2_127(self, make_loss):
    steps = _train(_tf2, make_loss)
    self.assertEqual([s for s, _, _ in steps], TF2_SCALES_USED)
    self.assertEqual([a for _, a, _ in steps], TF2_APPLIED)

  @parameterized.named_parameters(
      ("contrib_dense", _contrib, _dense_loss),
      ("contrib_sparse", _contrib, _sparse_loss),
      ("tf2_dense", _tf2, _dense_loss),
      ("tf2_sparse", _tf2, _sparse_loss))
  def test_every_applied_step_moves_the_weights(self, make_optimizer,
                                                make_loss):
    steps = _train(make_optimizer, make_loss)
    self.assertEqual([(a, c) for _, a, c in steps if a != c], [],
                     "applied steps must change the weights, skipped ones "
                     f"must not: {steps}")
    self.assertTrue(all(s <= 2.0**126 for s, a, _ in steps if a), steps)
    self.assertIn(False, [a for _, a, _ in steps])

  def test_unscaled_gradients_are_nan_above_2_126(self):
    def unscaled(scale, grad):
      opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(
          v1.train.GradientDescentOptimizer(1.0),
          managers.FixedLossScale(scale))
      return opt.get_unscaled_gradients([tf.constant(grad)])

    with tf.Graph().as_default() as graph:
      grads = unscaled(2.0**127, [2.0**127, 1.0])
      at_top = unscaled(2.0**126, [2.0**126])
      with v1.Session(graph=graph) as sess:
        unscaled, top = sess.run([grads[0], at_top[0]])
    self.assertTrue(np.isnan(unscaled).all(), unscaled)
    self.assertTrue(np.isfinite(top).all())


if __name__ == "__main__":
  tf.test.main()
