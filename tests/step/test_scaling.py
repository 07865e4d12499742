"""Scaling and unscaling: exact for powers of two, float32 rounding otherwise."""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from tests.support import models

v1 = tf.compat.v1


class RoundingTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("power_of_two", 2.0**10, 0.0),
      # contrib's decr_ratio steps: 2**15 * 0.8**3, not a power of two.
      ("contrib_shrunk", float(np.float32(2.0**15) * np.float32(0.8)**3), 1e-5),
      ("thousand", 1000.0, 1e-5))
  def test_unscaled_float32_gradient_is_the_plain_one_to_rounding(
      self, scale, rtol):
    x_data, y_data = models.regression_data(16)
    with tf.Graph().as_default() as graph:
      x, y, loss = models.regression()
      variables = v1.trainable_variables()
      plain = tf.gradients(loss, variables)
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(1.0),
          managers.FixedLossScaleManager(scale))
      ours = [g for g, _ in opt.compute_gradients(loss, variables)]
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        got, want = sess.run([ours, plain], {x: x_data, y: y_data})
    for a, b in zip(got, want):
      if rtol:
        np.testing.assert_allclose(a, b, rtol=rtol, atol=0)
      else:
        np.testing.assert_array_equal(a, b)


class AcceptedGradientsTest(parameterized.TestCase):

  def test_numpy_gradients_are_applied_as_tfs_optimizer_applies_them(self):
    grads = [np.full([4, 2], 0.5, np.float32), np.ones(2, np.float32)]
    results = []
    for wrap in (True, False):
      with tf.Graph().as_default() as graph:
        _, _, loss = models.regression()
        variables = v1.trainable_variables()
        opt = v1.train.GradientDescentOptimizer(0.1)
        if wrap:
          opt = mp_optimizer.LossScaleOptimizer(
              opt, managers.FixedLossScaleManager(8))
        train_op = opt.apply_gradients(zip(grads, variables))
        with v1.Session(graph=graph) as sess:
          sess.run(v1.global_variables_initializer())
          sess.run(train_op)
          results.append(sess.run(variables))
    for ours, theirs in zip(*results):
      np.testing.assert_array_equal(ours, theirs)


if __name__ == "__main__":
  tf.test.main()
