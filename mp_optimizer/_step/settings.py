"""What every step of one optimizer is built from: its options, checked, and
the parts made from them.

`LossScaleOptimizer.__init__` checks its keyword options (`check_options`)
before it builds anything, then makes its `StepSettings`: with the wrapped
optimizer and the manager, the skip counter, the clip, the gradient
accumulator, the overflow report's settings and, with `compensated_update`,
the compensated form of the wrapped optimizer. Each `step.StepBuilder`
reads them.
"""

import dataclasses
from typing import Any, Dict, List, Optional, Union

import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer._internal import tracking
from mp_optimizer._internal import validation
from mp_optimizer._step import accumulation
from mp_optimizer._step import clipping
from mp_optimizer._step import compensation
from mp_optimizer._step import report
from mp_optimizer._step.skip_counter import SkipCounter

Optimizer = tf.compat.v1.train.Optimizer


def check_options(opt: Optimizer, *, clipnorm: Optional[float],
                  clipvalue: Optional[float], global_clipnorm: Optional[float],
                  gradient_accumulation_steps: Optional[int],
                  overflow_report: Union[bool, report.OverflowReport],
                  precision_telemetry: bool,
                  compensated_update: Union[bool, str]) -> Dict[str, Any]:
  """Checks `LossScaleOptimizer`'s keyword options; returns them as kept.

  Args:
    opt: The wrapped optimizer (`compensated_update` refuses some).
    clipnorm: As `LossScaleOptimizer` takes it, as are the others.
    clipvalue: See `clipnorm`.
    global_clipnorm: See `clipnorm`.
    gradient_accumulation_steps: See `clipnorm`.
    overflow_report: See `clipnorm`.
    precision_telemetry: See `clipnorm`.
    compensated_update: See `clipnorm`.

  Returns:
    The options by name, checked (`overflow_report` as an
    `OverflowReport` or None), for `repr` and the Keras-style names.

  Raises:
    TypeError: If an option has the wrong type.
    ValueError: If an option is out of range, two clip options are set, or
      `compensated_update` cannot help `opt`.
  """
  clipping.make_clip(clipnorm, clipvalue, global_clipnorm)
  options = {
      "clipnorm": clipnorm, "clipvalue": clipvalue,
      "global_clipnorm": global_clipnorm,
      "gradient_accumulation_steps": accumulation.check_steps(
          gradient_accumulation_steps),
      "overflow_report": report.check_option(overflow_report),
      "precision_telemetry": validation.check_bool(
          "precision_telemetry", precision_telemetry),
      "compensated_update": compensated_update}
  compensation.check_option(compensated_update, opt)
  return options


@dataclasses.dataclass(frozen=True)
class StepSettings:
  """What every step of one optimizer is built from (`make` makes it).

  Attributes:
    wrapped: The wrapped optimizer.
    manager: The loss-scale manager.
    skip_counter: The optimizer's count of skipped steps.
    clip: The clip option, or None.
    accumulator: Gradient accumulation, or None.
    overflow_report: Settings of the report of skipped steps, or None.
    precision_telemetry: Measure and store each step's precision telemetry.
    compensated: With `compensated_update`, the compensated form of the
      wrapped optimizer, else None.
  """
  wrapped: Optimizer
  manager: managers.LossScaleManager
  skip_counter: SkipCounter
  clip: Optional[clipping.Clip] = None
  accumulator: Optional[accumulation.GradientAccumulator] = None
  overflow_report: Optional[report.OverflowReport] = None
  precision_telemetry: bool = False
  compensated: Optional[compensation.Compensation] = None

  @classmethod
  def make(cls, owner: Optimizer, opt: Optimizer,
           manager: managers.LossScaleManager,
           options: Dict[str, Any]) -> "StepSettings":
    """Makes the parts `options` (from `check_options`) ask for.

    Args:
      owner: The `LossScaleOptimizer`, which tracks the compensation and the
        accumulators for `tf.train.Checkpoint`.
      opt: The wrapped optimizer.
      manager: The loss-scale manager.
      options: The checked options.
    """
    dtype = compensation.check_option(options["compensated_update"], opt)
    compensated = None
    if dtype is not None:
      compensated = compensation.Compensation(opt, dtype)
      tracking.track(owner, compensated, "compensation")
    steps = options["gradient_accumulation_steps"]
    return cls(opt, manager, SkipCounter(owner),
               clipping.make_clip(options["clipnorm"], options["clipvalue"],
                                  options["global_clipnorm"]),
               None if steps is None else accumulation.GradientAccumulator(
                   owner, steps),
               options["overflow_report"], options["precision_telemetry"],
               compensated)

  @property
  def inner(self) -> Optimizer:
    """The optimizer that applies the update (and owns the slots): the
    compensated form of the wrapped one, if any, else the wrapped one."""
    return self.compensated or self.wrapped

  def slot_names(self) -> List[str]:
    """The wrapped optimizer's slot names, and the compensation's."""
    own = self.compensated.get_slot_names() if self.compensated else []
    return self.wrapped.get_slot_names() + own

  def own_variables(self) -> List[tf.Variable]:
    """The accumulators and compensation slots of the current graph."""
    accumulators = self.accumulator.variables() if self.accumulator else []
    slots = self.compensated.variables() if self.compensated else []
    return accumulators + slots
