"""State-machine tables for ExponentialUpdateLossScaleManager.

Each row: constructor arguments, a finite/non-finite sequence, and the
(scale, good_steps, bad_steps) after every step, worked out by hand from the
algorithm in the class docstring. Shrinks by a ratio that is not a power of two
are worked in float32 with numpy, as the graph does them.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import harness
from tests.support import models

v1 = tf.compat.v1

T, F = True, False
f32 = np.float32
# Issue defaults for the tables: incr_ratio 2, decr_ratio 0.5, every 2 steps.
BASE = dict(incr_every_n_steps=2, decr_every_n_nan_or_inf=2, incr_ratio=2,
            decr_ratio=0.5)
BIG = 2.0**127  # float32's largest power of two; twice it overflows.


def _with(**overrides):
  return {**BASE, **overrides}


class GoldenTablesTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("all_finite_grows", _with(init_loss_scale=1), [T] * 6,
       [(1, 1, 0), (2, 0, 0), (2, 1, 0), (4, 0, 0), (4, 1, 0), (8, 0, 0)]),
      ("all_nonfinite_shrinks", _with(init_loss_scale=1024), [F] * 6,
       [(1024, 0, 1), (512, 0, 0), (512, 0, 1), (256, 0, 0), (256, 0, 1),
        (128, 0, 0)]),
      ("mixed_good_step_keeps_bad_steps", _with(init_loss_scale=1),
       [T, T, T, F, T, F],
       [(1, 1, 0), (2, 0, 0), (2, 1, 0), (2, 0, 1), (2, 1, 1), (1, 0, 0)]),
      ("floor_at_one", _with(init_loss_scale=2, decr_every_n_nan_or_inf=1),
       [F, F, F], [(1, 0, 0), (1, 0, 0), (1, 0, 0)]),
      ("floor_from_odd_scale", _with(init_loss_scale=3,
                                     decr_every_n_nan_or_inf=1),
       [F, F, F], [(1.5, 0, 0), (1, 0, 0), (1, 0, 0)]),
      ("growth_refused_on_float32_overflow",
       _with(init_loss_scale=BIG, incr_every_n_steps=1), [T, T],
       [(BIG, 0, 0), (BIG, 0, 0)]),
      ("refused_growth_still_resets_counters", _with(init_loss_scale=BIG),
       [T, T, T], [(BIG, 1, 0), (BIG, 0, 0), (BIG, 1, 0)]),
      ("incr_and_decr_every_step",
       _with(init_loss_scale=1, incr_every_n_steps=1,
             decr_every_n_nan_or_inf=1), [T, T, F, T, F, F],
       [(2, 0, 0), (4, 0, 0), (2, 0, 0), (4, 0, 0), (2, 0, 0), (1, 0, 0)]),
      ("incr_ratio_three", _with(init_loss_scale=1, incr_every_n_steps=1,
                                 incr_ratio=3), [T, T],
       [(3, 0, 0), (9, 0, 0)]),
      ("default_decr_ratio_in_float32",
       dict(init_loss_scale=3, incr_every_n_steps=100), [F, F, F, F],
       [(3, 0, 1), (f32(3) * f32(0.8), 0, 0), (f32(3) * f32(0.8), 0, 1),
        (f32(3) * f32(0.8) * f32(0.8), 0, 0)]),
      ("default_decr_ratio_hits_floor",
       dict(init_loss_scale=1.2, incr_every_n_steps=100), [F, F],
       [(f32(1.2), 0, 1), (1, 0, 0)]),
      ("bad_steps_accumulate_across_good_steps",
       _with(init_loss_scale=8, incr_every_n_steps=10,
             decr_every_n_nan_or_inf=3), [F, T, F, T, F],
       [(8, 0, 1), (8, 1, 1), (8, 0, 2), (8, 1, 2), (4, 0, 0)]),
      ("growth_resets_bad_steps", _with(init_loss_scale=4), [F, T, T, F],
       [(4, 0, 1), (4, 1, 1), (8, 0, 0), (8, 0, 1)]),
      ("overflow_resets_good_steps",
       _with(init_loss_scale=1, incr_every_n_steps=3,
             decr_every_n_nan_or_inf=5), [T, T, F, T, T, T],
       [(1, 1, 0), (1, 2, 0), (1, 0, 1), (1, 1, 1), (1, 2, 1), (2, 0, 0)]),
  )
  def test_table(self, kwargs, steps, expected):
    self._check_table(kwargs, steps, expected)

  def _check_table(self, kwargs, steps, expected):
    states = harness.run_manager(
        lambda: managers.ExponentialUpdateLossScaleManager(**kwargs), steps)
    got = [(s["scale"], s["good_steps"], s["bad_steps"]) for s in states]
    self.assertEqual(len(got), len(expected))
    for step, ((scale, good, bad), (want_scale, want_good, want_bad)) in (
        enumerate(zip(got, expected))):
      self.assertEqual(scale, f32(want_scale), f"scale after step {step}")
      self.assertEqual((good, bad), (want_good, want_bad),
                       f"counters after step {step}")

  # The three hysteresis modes on the same inputs (decr_every 3, decr 0.5).
  @parameterized.named_parameters(
      ("contrib_counts_since_last_change", "contrib", 8, 10,
       [F, T, F, F, T, F, F, F],
       [(8, 0, 1), (8, 1, 1), (8, 0, 2), (4, 0, 0), (4, 1, 0), (4, 0, 1),
        (4, 0, 2), (2, 0, 0)]),
      ("consecutive_needs_back_to_back_overflows", "consecutive", 8, 10,
       [F, T, F, F, T, F, F, F],
       [(8, 0, 1), (8, 1, 0), (8, 0, 1), (8, 0, 2), (8, 1, 0), (8, 0, 1),
        (8, 0, 2), (4, 0, 0)]),
      ("contrib_on_the_sticky_sequence", "contrib", 64, 2,
       [F, F, F, F, T, F, T, T, F],
       [(64, 0, 1), (64, 0, 2), (32, 0, 0), (32, 0, 1), (32, 1, 1), (32, 0, 2),
        (32, 1, 2), (64, 0, 0), (64, 0, 1)]),
      ("sticky_keeps_backing_off_until_growth", "sticky", 64, 2,
       [F, F, F, F, T, F, T, T, F],
       [(64, 0, 1), (64, 0, 2), (32, 0, 2), (16, 0, 2), (16, 1, 2), (8, 0, 2),
        (8, 1, 2), (16, 0, 0), (16, 0, 1)]),
  )
  def test_hysteresis(self, mode, init, incr_every, steps, expected):
    self._check_table(dict(init_loss_scale=init, incr_every_n_steps=incr_every,
                         decr_every_n_nan_or_inf=3, decr_ratio=0.5,
                         hysteresis=mode), steps, expected)

  @parameterized.named_parameters(
      ("floor_below_one_on_request",
       _with(init_loss_scale=1, decr_every_n_nan_or_inf=1,
             min_loss_scale=0.25), [F, F, F, F],
       [(0.5, 0, 0), (0.25, 0, 0), (0.25, 0, 0), (0.25, 0, 0)]),
      ("floor_above_one",
       _with(init_loss_scale=16, decr_every_n_nan_or_inf=1, min_loss_scale=4),
       [F, F, F], [(8, 0, 0), (4, 0, 0), (4, 0, 0)]),
      ("ceiling_clamps_growth",
       _with(init_loss_scale=30, incr_every_n_steps=1, max_loss_scale=100),
       [T, T, T], [(60, 0, 0), (100, 0, 0), (100, 0, 0)]),
      ("ceiling_at_float32_edge",
       _with(init_loss_scale=2.0**126, incr_every_n_steps=1,
             max_loss_scale=BIG), [T, T], [(BIG, 0, 0), (BIG, 0, 0)]),
  )
  def test_bounds(self, kwargs, steps, expected):
    self._check_table(kwargs, steps, expected)

  def test_defaults_are_contribs(self):
    manager = managers.ExponentialUpdateLossScaleManager(2**15, 2000)
    self.assertEqual(
        (manager.init_loss_scale, manager.incr_every_n_steps,
         manager.decr_every_n_nan_or_inf, manager.incr_ratio,
         manager.decr_ratio, manager.min_loss_scale, manager.max_loss_scale),
        (2.0**15, 2000, 2, 2.0, 0.8, 1.0, None))
    self.assertTrue(manager.dynamic)
    self.assertTrue(manager.skips_nonfinite_steps)


class FloorPolicyTest(parameterized.TestCase):
  """fail_at_floor_after: overflow that loss scaling cannot cure is an error."""

  def _train(self, poisoned_steps, steps, **manager_kwargs):
    """Runs `steps` steps; returns (steps completed, error or None, model)."""
    with tf.Graph().as_default() as g:
      poison = models.poison_input()
      manager = managers.ExponentialUpdateLossScaleManager(
          init_loss_scale=2, incr_every_n_steps=100, decr_every_n_nan_or_inf=1,
          decr_ratio=0.5, **manager_kwargs)
      opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["adam"](),
                                            manager)
      train_op = opt.minimize(models.dense_loss(poison))
      model = v1.trainable_variables()
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        before = harness.snapshot(sess, model)
        for step in range(steps):
          try:
            sess.run(train_op, {poison: np.inf} if step in poisoned_steps
                     else {})
          except tf.errors.InvalidArgumentError as error:
            harness.assert_bit_identical(self, before,
                                         harness.snapshot(sess, model))
            # The failed step held the state's mutex; it must be free again:
            # a clean step runs (and applies) after the error.
            sess.run(train_op)
            after = harness.snapshot(sess, model)
            self.assertTrue(any(after[name].tobytes() != before[name].tobytes()
                                for name in before))
            return step, error
      return steps, None

  # The guard must see the scale each step used: a step at scale 2 that
  # shrinks to 1 is not yet at the floor. Repeated, because a guard that
  # read the scale unordered against the shrink failed in some runs only.
  @parameterized.named_parameters((f"trial_{i}", i) for i in range(10))
  def test_fails_after_n_overflows_at_the_floor(self, trial):
    del trial  # Each trial is a fresh graph and session.
    # Step 0 shrinks 2 -> 1 (not yet at the floor); steps 1, 2, 3 overflow at
    # the floor; the third of them fails.
    done, error = self._train(range(100), 10, fail_at_floor_after=3)
    self.assertEqual(done, 3)
    message = error.message
    for needle in ("minimum (1)", "3 steps in a row", "learning rate",
                   "NaN in the data", "65504", "fail_at_floor_after=3"):
      self.assertIn(needle, message)

  @parameterized.named_parameters((f"trial_{i}", i) for i in range(10))
  def test_a_finite_step_resets_the_streak(self, trial):
    del trial
    done, error = self._train({0, 1, 2, 4, 5, 7, 8}, 10,
                              fail_at_floor_after=3)
    self.assertIsNone(error)
    self.assertEqual(done, 10)

  def test_off_by_default(self):
    done, error = self._train(range(100), 30)
    self.assertIsNone(error)
    self.assertEqual(done, 30)
