"""The report's verdicts follow the numbers they are printed beside.

`benchmarks/targets.py` turns one run's ratios into "yes" / "no" and into the
sentence under the floors' table. These cases feed it made-up ratios and
check that each verdict flips when the numbers cross its line, so no
conclusion in BENCHMARKS.md can be fixed text.
"""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized

from benchmarks import check_readings
from benchmarks import floor_report
from benchmarks import least_dynamic
from benchmarks import report
from benchmarks import scaling_report
from benchmarks import sessions
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

  def test_a_barrier_that_costs_nothing_is_said_to_cost_nothing(self):
    text = self._text(1.005, 1.0)
    self.assertIn("costs nothing measurable", text)
    self.assertNotIn("lost overlap", text)


def _scaling_pool(ours_kernels=139, ours=1.20, floor=1.15, tf=1.26,
                  ours_first=0.04, tf_first=0.05) -> scaling_report.Pool:
  def row(kernels, ratio, first):
    return scaling_report.Row(
        label="", kernels=kernels, ops=0, graph_mb=0.0, build_s=0.0,
        first_run_s=first, first_run_load=0.0, rss_mb=0.0, step_ms=1.0,
        vs_bare=_ratio(ratio), all_applied=True)
  return scaling_report.Pool(
      size=10, inner="sgd", rounds=10, load_start=0.0, load_end=0.0,
      rows={"bare": row(97, 1.0, 0.02), "tf": row(188, tf, tf_first),
            "ours": row(ours_kernels, ours, ours_first),
            "floor_barrier": row(106, floor, 0.02)})


class ScalingTargetsTest(parameterized.TestCase):

  def _cells(self, **pool):
    line = scaling_report.targets_table([_scaling_pool(**pool)]).splitlines()[2]
    return [cell.strip() for cell in line.strip("|").split("|")][2:]

  def test_each_target_missed(self):
    self.assertEqual(self._cells(ours_kernels=139, ours=1.30, floor=1.15,
                                 tf=1.26, ours_first=0.06, tf_first=0.05),
                     ["+42: **no**", "+0.150: **no**", "1.300 / 1.260: **no**",
                      "0.06 s / 0.05 s (3.00× bare): **no**"])

  def test_each_target_met(self):
    self.assertEqual(self._cells(ours_kernels=127, ours=1.17, floor=1.15,
                                 tf=1.26, ours_first=0.04, tf_first=0.05),
                     ["+30: yes", "+0.020: yes", "1.170 / 1.260: yes",
                      "0.04 s / 0.05 s (2.00× bare): yes"])

  def test_no_verdict_without_the_contenders_it_compares(self):
    pool = _scaling_pool()
    del pool.rows["floor_barrier"]
    self.assertIn("No verdicts", scaling_report.targets_table([pool]))


def _floor_pool(ours: float, tf_dynamic: float, memory: float = 1.0,
                size: int = 10) -> scaling_report.Pool:
  def row(vs_bare, vs_floor, peak):
    return scaling_report.Row(
        label="", kernels=0, ops=0, graph_mb=0.0, build_s=0.0,
        first_run_s=0.0, first_run_load=0.0, rss_mb=0.0, step_ms=1.0,
        vs_bare=_ratio(vs_bare), all_applied=True, peak_bytes=peak,
        vs_other=_ratio(vs_floor))
  return scaling_report.Pool(
      size=size, inner="adam", rounds=10, load_start=0.0, load_end=0.0,
      family="many_small",
      rows={"bare": row(1.0, 0.9, 1000), "switch": row(1.1, 1.0, 1100),
            "tf_dynamic": row(tf_dynamic, tf_dynamic / 1.1, 1200),
            "ours_contrib": row(ours * 1.1, ours, int(1000 * memory))})


class FloorTargetsTest(parameterized.TestCase):

  def _cells(self, **pool):
    line = floor_report.floor_targets([_floor_pool(**pool)]).splitlines()[2]
    return [cell.strip() for cell in line.strip("|").split("|")][4:]

  @parameterized.named_parameters(
      ("met", 1.04, ["+0.040 (<= +0.05): yes", "1.144 / 1.300: yes"]),
      ("within_noise", 1.056,
       ["+0.056 (<= +0.05): within noise (95% CI 1.046-1.066)",
        "1.162 / 1.300: yes"]),
      ("missed", 1.20, ["+0.200 (<= +0.05): **no**", "1.320 / 1.300: **no**"]),
  )
  def test_dynamic_against_the_floor_and_tf(self, ours, expected):
    self.assertEqual(self._cells(ours=ours, tf_dynamic=1.3), expected)

  @parameterized.named_parameters(("floor", 1.04, "switch"),
                                  ("ours", 0.95, "ours_contrib"))
  def test_fastest_exact_skip_is_the_lowest_ratio_to_the_floor(self, ours,
                                                                expected):
    pool = _floor_pool(ours, 1.3)
    for name, row in pool.rows.items():
      pool.rows[name] = dataclasses.replace(row, label=name)
    self.assertIn(f"- many_small 10 adam: {expected} (",
                  floor_report.cheapest_exact([pool]))

  @parameterized.named_parameters(("within", 1.09, "yes"),
                                  ("above", 1.11, "**no**"))
  def test_memory_verdict_follows_the_worst_pool(self, memory, expected):
    text = floor_report.memory_verdicts([_floor_pool(1.0, 1.3),
                                         _floor_pool(1.0, 1.3, memory, 100)])
    self.assertIn(f"at most {memory:.2f}× bare; within 1.1× everywhere: "
                  f"{expected}.", text)


class CopiesLinesTest(absltest.TestCase):

  def test_the_floor_and_the_widest_contender(self):
    pool = dataclasses.replace(_floor_pool(1.1, 1.3), copies=3)
    for name, copies in (("switch", (1.02, 0.99, 1.0)),
                         ("bare", (1.0, 1.01, 0.995)),
                         ("ours_contrib", (0.95, 1.0, 1.06))):
      pool.rows[name] = dataclasses.replace(pool.rows[name], label=name,
                                            copies=copies)
    self.assertEqual(sessions.lines([pool], "switch"),
                     "- many_small 10 adam: switch 0.990, 1.000, 1.020; "
                     "ours_contrib 0.950, 1.000, 1.060")

  def test_no_line_for_a_pool_in_one_session(self):
    self.assertIn("No pool", sessions.lines([_floor_pool(1, 1)], "switch"))


class LeastDynamicTest(parameterized.TestCase):

  def _pool(self, scaled: float, spread: float = 0.005):
    pool = _floor_pool(1.20, 1.3)
    for name, median in (("scaled", scaled), ("ours_fixed", 1.09),
                         ("ours_least", 1.13)):
      pool.rows[name] = dataclasses.replace(
          pool.rows["ours_contrib"], vs_other=_ratio(median, spread))
    return pool

  @parameterized.named_parameters(
      ("below", 1.04, 0.005, "(0.010 below the dynamic target)"),
      ("above", 1.07, 0.005, "(above the dynamic target on its own)"),
      ("within_noise", 1.055, 0.01,
       "(above the dynamic target, within noise (95% CI 1.045-1.065))"))
  def test_the_least_against_the_target(self, scaled, spread, expected):
    text = least_dynamic.line(self._pool(scaled, spread), 0.05)
    self.assertIn(f"floor's step {scaled - 1:+.3f} {expected}", text)

  def test_the_parts_are_differences_of_the_medians(self):
    text = least_dynamic.line(self._pool(1.04), 0.05)
    self.assertIn("on ours +0.130, +0.040 over ours fixed (+0.090); "
                  "contrib's scale +0.200, +0.070 over the least.", text)

  def test_no_line_without_the_contenders_it_compares(self):
    pool = self._pool(1.04)
    del pool.rows["ours_least"]
    self.assertEqual(least_dynamic.line(pool, 0.05), "")
    self.assertIn("No pool", least_dynamic.lines([pool], 0.05))


def _costs(bits: float, total: float):
  return {"bits": {"IsFinite": 1.0, "All": bits - 1.0},
          "sum": {"Cast": 1.0, "Sum": total - 1.0}}


class ReadingsVerdictTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("bits", 10.0, 20.0, "bits"), ("sum", 60.0, 9.0, "sum"),
      ("even", 10.0, 11.5, "even"), ("just_apart", 10.0, 12.5, "bits"))
  def test_the_cheaper_reading(self, bits, total, want):
    self.assertEqual(check_readings.cheaper(_costs(bits, total)), want)

  def test_the_closing_line_counts_where_the_rule_reads_the_cheaper_way(self):
    small = check_readings.held_check.SMALL_BITS_MAX_ELEMENTS
    between = small + 2
    rows = [(small, _costs(2.0, 30.0)),     # Rule: bits, cheaper: bits.
            (between, _costs(60.0, 9.0)),   # Rule: sum, cheaper: sum.
            (between, _costs(9.0, 60.0))]   # Rule: sum, cheaper: bits.
    text = check_readings.section(rows, steps=3, load=(0.5, 0.6))
    self.assertIn("at 2 of 3 sizes.", text)
    self.assertIn(f"| {between:,} | 1.0 | 8.0 | 1.0 | 59.0 | 9.0 | 60.0 | "
                  "bits | sum |", text)

if __name__ == "__main__":
  absltest.main()
