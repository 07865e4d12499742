"""No silent dead end: a dynamic scale's floor must be a scale S can hold.

A floor below float32's smallest normal number (2**-126) is flushed to 0 by
TensorFlow on CPU: after a run of overflows the scale becomes exactly 0,
and 0 never grows again, so every later step is skipped. A floor above
2**126 keeps 1/S subnormal, so every step counts as an overflow. Both are
refused, for every dynamic manager; at the smallest floor allowed the scale
stays a normal number and clean steps apply.
"""

import re

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers

v1 = tf.compat.v1
SMALLEST_NORMAL = 2.0**-126
# Each shrinks by half on every overflow and grows after one clean step.
MANAGERS = (
    ("contrib", lambda **kw: managers.ExponentialUpdateLossScaleManager(
        1.0, 1, decr_every_n_nan_or_inf=1, decr_ratio=0.5, **kw)),
    ("tf2", lambda **kw: managers.DynamicLossScale(1.0, 1, **kw)),
    ("amax", lambda **kw: managers.AmaxHistoryLossScaleManager(1.0, **kw)),
)
FLOORS = (("subnormal", 1e-40), ("half_the_smallest_normal", 2.0**-127),
          ("above_2_to_the_126", 2.0**127))
RANGE = (r"`min_loss_scale` must be >= 2\*\*-126 \(1\.17549e-38, float32's "
         r"smallest normal number\) and <= 2\*\*126 \(8\.50706e\+37, the "
         r"largest scale whose reciprocal is a normal float32\), got ")


class FloorRangeTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{manager}_{floor}", make, value)
      for manager, make in MANAGERS for floor, value in FLOORS)
  def test_floor_out_of_range_is_refused_with_the_range(self, make, value):
    with tf.Graph().as_default() as graph:
      with self.assertRaisesRegex(ValueError,
                                  RANGE + re.escape(f"{value:g}.")):
        make(min_loss_scale=value)
      self.assertEmpty(graph.get_operations(), "half-built graph")

  @parameterized.named_parameters(*MANAGERS)
  def test_smallest_floor_holds_and_clean_steps_apply(self, make):
    with tf.Graph().as_default() as graph:
      w = v1.get_variable("w", initializer=np.ones(2, np.float32))
      x = v1.placeholder(tf.float32, [2])
      manager = make(min_loss_scale=SMALLEST_NORMAL)
      train_op = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.0), manager).minimize(
              tf.reduce_sum(w * x))
      scale = manager.get_loss_scale()
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        for _ in range(140):  # 126 halvings reach the floor.
          sess.run(train_op, {x: [np.nan, 1.0]})
        self.assertEqual(sess.run(scale), SMALLEST_NORMAL)
        for _ in range(3):
          sess.run(train_op, {x: [1.0, 1.0]})
          self.assertGreaterEqual(sess.run(scale), SMALLEST_NORMAL)
        self.assertEqual(sess.run(mp_optimizer.skipped_steps()), 140)


if __name__ == "__main__":
  tf.test.main()
