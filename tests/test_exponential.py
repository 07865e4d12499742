"""State-machine tables for ExponentialUpdateLossScaleManager.

Each row: constructor arguments, a finite/non-finite sequence, and the
(scale, good_steps, bad_steps) after every step, worked out by hand from the
algorithm in the class docstring. Shrinks by a ratio that is not a power of two
are worked in float32 with numpy, as the graph does them.
"""

from absl.testing import parameterized
import numpy as np

import managers
from tests import harness

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
    states = harness.run_manager(
        lambda: managers.ExponentialUpdateLossScaleManager(**kwargs), steps)
    got = [(s["scale"], s["good_steps"], s["bad_steps"]) for s in states]
    self.assertEqual(len(got), len(expected))
    for step, ((scale, good, bad), (want_scale, want_good, want_bad)) in (
        enumerate(zip(got, expected))):
      self.assertEqual(scale, f32(want_scale), f"scale after step {step}")
      self.assertEqual((good, bad), (want_good, want_bad),
                       f"counters after step {step}")

  def test_defaults_are_contribs(self):
    manager = managers.ExponentialUpdateLossScaleManager(2**15, 2000)
    self.assertEqual(
        (manager.init_loss_scale, manager.incr_every_n_steps,
         manager.decr_every_n_nan_or_inf, manager.incr_ratio,
         manager.decr_ratio, manager.min_loss_scale, manager.max_loss_scale),
        (2.0**15, 2000, 2, 2.0, 0.8, 1.0, None))
    self.assertTrue(manager.dynamic)
    self.assertTrue(manager.skips_nonfinite_steps)
