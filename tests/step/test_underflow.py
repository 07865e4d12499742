"""The promise itself: float16 gradients underflow, loss scaling rescues them.

The model is `loss = c * sum(w * x)` computed in float16 with c = x = 1e-4, so
d(loss)/dw = c * x = 1e-8, below float16's smallest subnormal (about 6e-8).
The float32 reference is the same graph in float32.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer

v1 = tf.compat.v1
SMALL = 1e-4
W0 = np.full([4], 1e-3, np.float32)
LEARNING_RATE = 1000.0


def _loss(w, dtype):
  x = tf.constant(np.full([4], SMALL), dtype)
  return tf.cast(tf.constant(SMALL, dtype) * tf.reduce_sum(tf.cast(w, dtype) * x),
                 tf.float32)


def _train_once(dtype, wrap=None):
  """One SGD step; returns (gradient, weights after the step)."""
  with tf.Graph().as_default() as graph:
    w = v1.get_variable("w", initializer=W0)
    opt = v1.train.GradientDescentOptimizer(LEARNING_RATE)
    if wrap is not None:
      opt = wrap(opt)
    (grad, _), = opt.compute_gradients(_loss(w, dtype), var_list=[w])
    train_op = opt.minimize(_loss(w, dtype), var_list=[w])
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      grad_value = sess.run(grad)
      sess.run(train_op)
      return grad_value, sess.run(w)


class UnderflowTest(parameterized.TestCase):

  def test_float16_without_scaling_loses_the_gradient(self):
    reference_grad, _ = _train_once(tf.float32)
    np.testing.assert_allclose(reference_grad, SMALL * SMALL, rtol=1e-6)
    grad16, w16 = _train_once(tf.float16)
    np.testing.assert_array_equal(grad16, np.zeros(4, np.float32))
    np.testing.assert_array_equal(w16, W0)  # Training silently does nothing.

  @parameterized.named_parameters(
      ("fixed", lambda: managers.FixedLossScaleManager(2**15)),
      ("contrib_dynamic",
       lambda: managers.ExponentialUpdateLossScaleManager(2**15, 1000)),
      ("tf2_dynamic", lambda: managers.DynamicLossScale(2**15)))
  def test_float16_with_scaling_matches_float32(self, make_manager):
    reference_grad, reference_w = _train_once(tf.float32)
    grad, w = _train_once(
        tf.float16, lambda opt: mp_optimizer.LossScaleOptimizer(
            opt, make_manager()))
    # float16 keeps ~3 significant digits of the scaled gradient.
    np.testing.assert_allclose(grad, reference_grad, rtol=2e-3)
    np.testing.assert_allclose(w - W0, reference_w - W0, rtol=2e-3)
    self.assertTrue(np.all(w != W0))
