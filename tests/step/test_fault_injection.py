"""Fault injection over 2,000 steps: every poisoned step skipped, nothing lost.

Run with `pytest -s` to see the summary lines.
"""

from absl.testing import parameterized

from tests.support import fault_injection

STEPS = 2000


class FaultInjectionTest(parameterized.TestCase):

  @parameterized.named_parameters(("dense", "dense", 1), ("sparse", "sparse", 2))
  def test_poisoned_steps_skip_and_clean_steps_apply(self, target, seed):
    report = fault_injection.run(target, STEPS, seed)
    print(report.line(target))
    self.assertGreater(report.injected, STEPS // 20)
    self.assertEqual(report.skipped, report.injected)
    self.assertEqual(report.counted, report.injected)
    self.assertEqual(report.applied_clean, STEPS - report.injected)
    self.assertEqual(report.corrupted, 0)
