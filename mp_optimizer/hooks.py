"""`LossScaleHook`: the loss scale and skip rate in the training log."""

from typing import Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from mp_optimizer._internal import validation
from mp_optimizer import signals


class LossScaleHook(tf.compat.v1.train.SessionRunHook):
  """Logs the loss scale and the share of skipped steps every N steps.

  Works with `tf.compat.v1.train.MonitoredTrainingSession(hooks=[...])` and
  `Estimator.train(hooks=[...])` (or `EstimatorSpec(training_hooks=[...])`).
  It finds the tensors through `mp_optimizer.signals`, so the train op must be
  built before the session starts. Between reports it adds nothing to a step;
  after a reporting step it reads two scalars in a separate small run, so the
  numbers are exact (not racing the step). The loss scale shown is the one the
  next step will use.

  "Steps" are the session's `run` calls since it was created (a new session,
  e.g. each `Estimator.train`, starts again from 0): the hook assumes each
  `run` is a training step. A loop that also runs other fetches through the
  same session (evaluation, logging) makes the step numbers larger and the
  skipped share smaller than they are.

  A line reads: `loss scale 32768 at step 1200; 3 of the last 100 steps
  skipped (3.0%), 17 since the session started`. An optimizer built with
  `precision_telemetry=True` adds its newest step's telemetry and the
  window's skips by reason: `...; float16 headroom 3.2 bits, gradient
  entries zero in float16 0.41% (mean of 4 groups; most: 'dense_2' 2.10%),
  gradient norm 0.8731; skipped for overflow 3, at the floor 0; accumulation
  micro-steps 0` (and `; non-finite, unscaled N` when the bfloat16 mode,
  `managers.NoLossScale`, skipped N steps). When several
  loss-scaling optimizers built train ops in the graph (a GAN's D and G),
  each gets its own line, starting with its name (`optimizer 'D': loss
  scale ...`), and a last line gives their total.

  Example:

  ```python
  with tf.compat.v1.train.MonitoredTrainingSession(
      hooks=[mp_optimizer.LossScaleHook(every_n_steps=100)]) as sess:
    while not sess.should_stop():
      sess.run(train_op)
  ```

  Args:
    every_n_steps: Positive int: how often to report.

  Attributes:
    latest: `(step, loss scale, share of skipped steps)` of the newest
      report when the graph has one loss-scaling optimizer; None before the
      first report or when it has several.
    latest_by_optimizer: The same tuple for each optimizer, by its name
      (`mp_optimizer.signals.optimizer_names()`).
    latest_precision: For each optimizer with precision telemetry, by its
      name, the newest report's values (`mp_optimizer.signals.precision()`,
      with "reason_counts" counted over the report's window).

  Raises:
    TypeError, ValueError: If `every_n_steps` is not a positive int.
  """

  def __init__(self, every_n_steps: int = 100):
    self._every = validation.check_positive_int("every_n_steps", every_n_steps)
    self._fetches: Dict[str, Dict[str, tf.Tensor]] = {}
    self._groups: Dict[str, list] = {}
    self._last_reasons: Dict[str, np.ndarray] = {}
    self._steps = 0
    self._last: Tuple[int, Dict[str, int]] = (0, {})
    self.latest: Optional[Tuple[int, float, float]] = None
    self.latest_by_optimizer: Dict[str, Tuple[int, float, float]] = {}
    self.latest_precision: Dict[str, Dict] = {}

  def begin(self) -> None:
    self._fetches = {
        name: {"scale": signals.loss_scale(optimizer=name),
               "skipped": signals.skipped_steps(optimizer=name)}
        for name in signals.optimizer_names()}
    for name, fetches in self._fetches.items():
      try:
        precision = signals.precision(optimizer=name)
      except ValueError:  # Built without precision_telemetry.
        continue
      self._groups[name] = precision.pop("groups")
      fetches.update(precision)

  def after_create_session(self, session, coord) -> None:
    del coord  # Unused.
    self._steps = 0
    first = session.run({name: {key: fetches[key] for key in fetches
                                if key in ("skipped", "reason_counts")}
                         for name, fetches in self._fetches.items()})
    self._last = (0, {name: int(value["skipped"])
                      for name, value in first.items()})
    self._last_reasons = {name: value["reason_counts"]
                          for name, value in first.items()
                          if "reason_counts" in value}

  def after_run(self, run_context, run_values) -> None:
    del run_values  # Unused: the values are read after the step instead.
    self._steps += 1
    if self._steps % self._every:
      return
    values = run_context.session.run(self._fetches)
    steps = self._steps - self._last[0]
    several = len(values) > 1
    newly_total = 0
    for name, value in values.items():
      scale, skipped = float(value["scale"]), int(value["skipped"])
      newly = skipped - self._last[1][name]
      newly_total += newly
      self.latest_by_optimizer[name] = (self._steps, scale, newly / steps)
      tf.compat.v1.logging.info(
          "%sloss scale %.7g at step %d; %d of the last %d steps skipped "
          "(%.1f%%), %d since the session started%s",
          f"optimizer {name!r}: " if several else "", scale, self._steps,
          newly, steps, 100.0 * newly / steps, skipped,
          self._precision_text(name, value))
    self._last_reasons = {name: value["reason_counts"]
                          for name, value in values.items()
                          if "reason_counts" in value}
    skipped_now = {name: int(value["skipped"]) for name, value in values.items()}
    if several:
      tf.compat.v1.logging.info(
          "all %d loss-scaling optimizers: %d skipped steps in the last %d "
          "steps, %d since the session started", len(values), newly_total,
          steps, sum(skipped_now.values()))
    else:
      self.latest = self.latest_by_optimizer[next(iter(values))]
    self._last = (self._steps, skipped_now)

  def _precision_text(self, name: str, value: dict) -> str:
    """The telemetry part of an optimizer's line ('' without telemetry)."""
    if name not in self._groups:
      return ""
    window = value["reason_counts"] - self._last_reasons[name]
    groups, shares = self._groups[name], value["zero_share"]
    self.latest_precision[name] = dict(
        {key: value[key] for key in ("headroom_bits", "global_norm",
                                     "skip_reason", "zero_share")},
        groups=list(groups), reason_counts=window)
    most = int(shares.argmax()) if len(groups) else None
    zeros = ("" if most is None else
             f", gradient entries zero in float16 "
             f"{100.0 * float(shares.mean()):.2f}% (mean of {len(groups)} "
             f"groups; most: {groups[most]!r} "
             f"{100.0 * float(shares[most]):.2f}%)")
    return (f"; float16 headroom {float(value['headroom_bits']):.1f} bits"
            f"{zeros}, gradient norm {float(value['global_norm']):.4g}; "
            f"skipped for overflow {int(window[1])}, at the floor "
            f"{int(window[2])}; accumulation micro-steps {int(window[3])}"
            + (f"; non-finite, unscaled {int(window[4])}" if window[4] else
               ""))
