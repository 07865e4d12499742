"""Precision telemetry's `global_norm` at float32's extremes.

The norm is amax * sqrt(sum((g / amax)**2)). Taking 1/amax first would give
a subnormal number for amax above 2**126 (about 8.5e37), which TensorFlow
flushes to 0 on CPU: every quotient, and so the norm, would read 0 for
gradients as large as 2e38. The expected norms here are NumPy's, in float64.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from tests.support import mirrored

v1 = tf.compat.v1
SMALLEST_NORMAL = 2.0**-126
F32_MAX = float(np.finfo(np.float32).max)


def _precision(make_loss, mirror=False):
  """Runs one step at S = 1 (fixed); returns `signals.precision()`."""
  with tf.Graph().as_default() as graph:
    strategy = (tf.distribute.MirroredStrategy(mirrored.DEVICES) if mirror
                else None)
    scope = strategy.scope() if strategy else v1.variable_scope("")
    with scope:
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.0),
          managers.FixedLossScaleManager(1.0), precision_telemetry=True)
      if strategy:
        train_op = strategy.group(strategy.run(
            lambda: opt.minimize(make_loss())))
      else:
        train_op = opt.minimize(make_loss())
    precision = mp_optimizer.signals.precision()
    config = mirrored.SESSION_CONFIG if strategy else None
    with v1.Session(graph=graph, config=config) as sess:
      sess.run(v1.global_variables_initializer())
      sess.run(train_op)
      return sess.run(precision)


def _linear_loss(*gradients):
  """A loss whose gradient is `gradients`, one variable per list."""
  terms = []
  for i, values in enumerate(gradients):
    w = v1.get_variable(f"w{i}", initializer=np.zeros(len(values),
                                                      np.float32))
    terms.append(tf.reduce_sum(w * tf.constant(values, tf.float32)))
  return tf.add_n(terms)


class ExtremeNormTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("one_entry_of_2e38", [[2e38]]),
      ("two_entries_of_1e38", [[1e38, 1e38]]),
      ("1e38_in_each_of_two_variables", [[1e38], [1e38]]),
      ("float32_max_beside_one", [[F32_MAX, 1.0]]),
      ("just_above_2_to_the_126", [[2.0**126 * 1.5, -3.0]]),
      ("two_smallest_normals", [[SMALLEST_NORMAL, -SMALLEST_NORMAL]]),
      ("ordinary", [[3.0, 4.0]]),
  )
  def test_applied_step_reports_the_true_norm(self, gradients):
    got = _precision(lambda: _linear_loss(*gradients))["global_norm"]
    expected = np.linalg.norm(np.concatenate(gradients).astype(np.float64))
    self.assertGreater(got, 0.0)
    np.testing.assert_allclose(got, expected, rtol=1e-6)

  def test_sum_over_replicas_at_1e38_each(self):
    # Each replica's gradient is [1e38, 0]; the update uses their sum, whose
    # norm is 2e38.
    got = _precision(lambda: _linear_loss([1e38, 0.0]),
                     mirror=True)["global_norm"]
    np.testing.assert_allclose(got, 2e38, rtol=1e-6)


if __name__ == "__main__":
  tf.test.main()
