"""Step counts of 2**31 and more mean what they say, and never wrap.

`incr_every_n_steps=10**12` is a natural way to say "never grow". The counts
are compared in int64; contrib's int32 counters stop at 2**31 - 1 instead of
wrapping to negative numbers, and counts no int64 holds are refused.
"""

import sys

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from tests.support import models

v1 = tf.compat.v1
HUGE = (("2_pow_31", 2**31), ("1e12", 10**12), ("2_pow_32_plus_5", 2**32 + 5),
        ("sys_maxsize", sys.maxsize), ("float_1e12", 1e12))
INT32_MAX = 2**31 - 1


def _run(manager, finite_steps, preset=None):
  """Runs `finite_steps` updates; returns the state after each, by name."""
  with tf.Graph().as_default() as graph:
    flag = v1.placeholder(tf.bool, [])
    update = manager.update_loss_scale(flag)
    state = {v.op.name: v for v in manager.variables()
             if v in v1.global_variables()}
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      sess.run(v1.local_variables_initializer())
      for name, value in (preset or {}).items():
        state[name].load(value, sess)
      out = []
      for finite in finite_steps:
        sess.run(update, {flag: finite})
        out.append({name: value.item() for name, value in
                    sess.run(state).items()})
      return out


class HugeCountsTest(parameterized.TestCase):

  @parameterized.named_parameters(*HUGE)
  def test_contrib_period_never_reached_in_thirty_steps(self, count):
    states = _run(managers.ExponentialUpdateLossScaleManager(8, count),
                  [True] * 30)
    self.assertEqual([s["loss_scale"] for s in states], [8.0] * 30)
    self.assertEqual([s["good_steps"] for s in states], list(range(1, 31)))

  @parameterized.named_parameters(*HUGE)
  def test_contrib_overflow_allowance_never_used_up(self, count):
    states = _run(managers.ExponentialUpdateLossScaleManager(
        8, 2, decr_every_n_nan_or_inf=count), [False] * 30)
    self.assertEqual([s["loss_scale"] for s in states], [8.0] * 30)
    self.assertEqual([s["bad_steps"] for s in states], list(range(1, 31)))

  @parameterized.named_parameters(*HUGE)
  def test_tf2_increment_period_never_reached(self, count):
    states = _run(managers.DynamicLossScale(8, count), [True] * 30)
    self.assertEqual([s["current_loss_scale"] for s in states], [8.0] * 30)
    self.assertEqual([s["good_steps"] for s in states], list(range(1, 31)))

  @parameterized.named_parameters(*HUGE)
  def test_floor_guard_never_fires(self, count):
    with tf.Graph().as_default() as graph:
      poison = models.poison_input()
      opt = mp_optimizer.LossScaleOptimizer(
          models.OPTIMIZERS["sgd"](), managers.ExponentialUpdateLossScaleManager(
              1, 2, decr_every_n_nan_or_inf=1, fail_at_floor_after=count))
      train_op = opt.minimize(models.dense_loss(poison))
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        for _ in range(30):
          sess.run(train_op, {poison: np.inf})
        self.assertEqual(sess.run(mp_optimizer.skipped_steps()), 30)


class CountersAtTheirLimitTest(parameterized.TestCase):

  def test_int32_counter_reaches_a_period_of_2_pow_31(self):
    # good_steps 2**31 - 2 -> 2**31 - 1 (no growth: 2**31 - 1 < 2**31), then
    # the 2**31-th finite step grows the scale.
    states = _run(managers.ExponentialUpdateLossScaleManager(8, 2**31),
                  [True, True], preset={"good_steps": INT32_MAX - 1})
    self.assertEqual([(s["loss_scale"], s["good_steps"]) for s in states],
                     [(8.0, INT32_MAX), (16.0, 0)])

  def test_int32_counter_stops_at_its_largest_value(self):
    states = _run(managers.ExponentialUpdateLossScaleManager(8, 2**31 + 5),
                  [True] * 3, preset={"good_steps": INT32_MAX - 1})
    self.assertEqual([(s["loss_scale"], s["good_steps"]) for s in states],
                     [(8.0, INT32_MAX)] * 3)

  def test_int32_overflow_counter_stops_at_its_largest_value(self):
    states = _run(managers.ExponentialUpdateLossScaleManager(
        8, 2, decr_every_n_nan_or_inf=2**32 + 5), [False] * 2,
                  preset={"bad_steps": INT32_MAX - 1})
    self.assertEqual([(s["loss_scale"], s["bad_steps"]) for s in states],
                     [(8.0, INT32_MAX)] * 2)

  def test_int64_counter_reaches_sys_maxsize(self):
    states = _run(managers.DynamicLossScale(8, sys.maxsize), [True, True],
                  preset={"good_steps": sys.maxsize - 2})
    self.assertEqual(
        [(s["current_loss_scale"], s["good_steps"]) for s in states],
        [(8.0, sys.maxsize - 1), (16.0, 0)])

  def test_int64_counter_at_its_largest_value_still_grows(self):
    # Only a restored or edited checkpoint holds such a count. good_steps + 1
    # would wrap to the smallest int64 and the scale would never grow again.
    states = _run(managers.DynamicLossScale(8, 5), [True, True],
                  preset={"good_steps": sys.maxsize})
    self.assertEqual(
        [(s["current_loss_scale"], s["good_steps"]) for s in states],
        [(16.0, 0), (16.0, 1)])


class RefusedCountsTest(parameterized.TestCase):

  @parameterized.named_parameters(("2_pow_63", 2**63), ("float_1e19", 1e19),
                                  ("numpy_uint64", np.uint64(2**63)))
  def test_counts_no_int64_holds_are_refused(self, count):
    for build in (lambda: managers.ExponentialUpdateLossScaleManager(8, count),
                  lambda: managers.ExponentialUpdateLossScaleManager(
                      8, 2, decr_every_n_nan_or_inf=count),
                  lambda: managers.DynamicLossScale(8, count),
                  lambda: managers.ExponentialUpdateLossScaleManager(
                      8, 2, fail_at_floor_after=count)):
      with self.assertRaisesRegex(ValueError, r"<= 2\*\*63 - 1.*got (9|1)"):
        build()


if __name__ == "__main__":
  tf.test.main()
