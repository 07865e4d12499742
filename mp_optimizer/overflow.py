"""Which gradients overflowed: `OverflowReport`, the settings of the report.

`LossScaleOptimizer(..., overflow_report=True)` prints, on a skipped step
only, one line naming the variables whose gradients held NaN or Inf;
`overflow_report=OverflowReport(...)` chooses how many and where the line
goes. The docs' "Which gradient overflowed?" describes the line in full.
"""

from mp_optimizer._step.report import OverflowReport

__all__ = ["OverflowReport"]
