"""The report's verdicts follow the numbers they are printed beside.

`benchmarks/targets.py` turns one run's ratios into "yes" / "no" and into the
sentence under the floors' table. These cases feed it made-up ratios and
check that each verdict flips when the numbers cross its line, so no
conclusion in BENCHMARKS.md can be fixed text.
"""

from absl.testing import absltest
from absl.testing import parameterized

from benchmarks import report
from benchmarks import shapes
from benchmarks import targets
from benchmarks import timing


def _ratio(median: float, spread: float = 0.01) -> timing.Ratio:
  return timing.Ratio(median, median - 2 * spread, median + 2 * spread,
                      median - spread, median + spread)


def _pool(**medians: float) -> report.Pool:
  rows = {name: report.Row(name=name, label=name, step_ms=1.0,
                           vs_reference=_ratio(median), reference="bare",
                           vs_counterpart=None, all_applied=True)
          for name, median in medians.items()}
  return report.Pool(rows=rows, rounds=10)


def _result(**medians: float) -> report.ShapeResult:
  return report.ShapeResult(shape=shapes.SHAPES["many_small"],
                            pool=_pool(**medians), ops={}, peak_bytes={},
                            variables=200)


class StepVerdictTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("met", 1.04, 1.01, "yes"),
      ("missed_with_a_floor_below_the_target", 1.10, 1.02, "**no**"),
      ("missed_with_the_floor_above_the_target", 1.10, 1.08,
       "**no**: the barrier-only floor is 1.080, above the target"),
      ("reaching_the_target_within_noise", 1.055, 1.08,
       "within noise (95% CI 1.045-1.065)"),
  )
  def test_verdict(self, ours, floor, expected):
    self.assertEqual(targets._step_verdict(_ratio(ours), 1.05, _ratio(floor)),
                     expected)

  def test_a_floor_whose_interval_reaches_the_target_is_not_blamed(self):
    self.assertEqual(
        targets._step_verdict(_ratio(1.10), 1.05, _ratio(1.055, spread=0.01)),
        "**no**")


class FloorsTextTest(parameterized.TestCase):

  def _text(self, floor_two_threads, floor_one_thread):
    results = [_result(ours_contrib=floor_two_threads + 0.02,
                       floor_barrier=floor_two_threads, floor_unscale=1.0)]
    one = _pool(bare=1.0, floor_barrier=floor_one_thread,
                ours_contrib=floor_one_thread + 0.01)
    return targets.floors_text(results, one)

  def test_ours_above_the_floor_is_the_difference_of_the_medians(self):
    self.assertIn("| +0.020 |", self._text(1.18, 1.03))

  def test_cost_that_vanishes_with_one_thread_is_called_lost_overlap(self):
    text = self._text(1.18, 1.03)
    self.assertIn("+3.0% over bare", text)
    self.assertIn("+18.0% for the floor", text)
    self.assertIn("most of the barrier's cost is the overlap", text)

  def test_cost_that_stays_with_one_thread_is_not_called_lost_overlap(self):
    text = self._text(1.18, 1.15)
    self.assertIn("not mainly lost overlap", text)
    self.assertNotIn("most of the barrier's cost", text)


if __name__ == "__main__":
  absltest.main()
