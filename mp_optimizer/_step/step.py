"""One training step: check, gate, apply, update, publish the signals.

`LossScaleOptimizer.apply_gradients` checks the pairs (`pairs.py`), then
reaches `StepBuilder.build` through `merge_call`, so it runs once per step
however many replicas there are:

```
scale   = the read of S the gradients were unscaled with  # the S this step used
checked = checked_pairs()                   # what the update will use
finite  = all_finite_in_sync(checked)       # one verdict for every replica
applied = gate(finite, apply_behind(pivot), skip_side())   # one Switch
update  = manager.update_loss_scale(finite)  # beside the apply, after `scale`
return tf.group(applied, update, signals)   # also the only TRAIN_OP entry

checked_pairs(): the pairs; with a norm clip, clipped now (across replicas:
                 their clipped sum, `clipping.reduce_and_clip`)
apply_behind(pivot): apply_pairs(checked), or with gradient accumulation, add
                 them to the window and apply_pairs(window mean) once it is
                 full (a second gate)
apply_pairs(pairs, pivot): clip if not clipped yet (clipvalue, the window
                 mean), then inner.apply_gradients on each replica
skip_side():     skipped_steps += 1 (and the overflow report); fed by
                 SyncReplicasOptimizer, also global_step += 1
```

`gate.gate` is a `tf.cond` with one Switch on the flag (no gradient or
variable is switched). A manager that never skips (`skips_nonfinite_steps`
False) gets no finite check and no gate. `clipvalue` maps Inf to its limit,
so it clips after the check, as does a manager that never skips.
"""

from typing import List, Optional

import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer.managers import amax
from mp_optimizer._internal import tensors
from mp_optimizer._internal.tensors import GradsAndVars
from mp_optimizer._step import clipping
from mp_optimizer._step import gate
from mp_optimizer._step import pacing
from mp_optimizer._step import report
from mp_optimizer._step import signal_record
from mp_optimizer._step import summaries
from mp_optimizer._step import telemetry
from mp_optimizer._step import unscale
from mp_optimizer._step.scaling import step_loss_scale
from mp_optimizer._step.settings import StepSettings


# Ops that hand out SyncReplicasOptimizer's aggregated gradients.
_SYNC_REPLICAS_TAKES = ("AccumulatorTakeGradient",
                        "SparseAccumulatorTakeGradient",
                        "ResourceAccumulatorTakeGradient")


class StepBuilder:
  """Builds one train op of one optimizer (see the module docstring).

  Made by `apply_gradients` in replica context, once per train op, after
  the pairs were checked; `build` is the `merge_call` function that builds
  the step in cross-replica context.
  """

  def __init__(self, settings: StepSettings, name: str):
    self._settings = settings
    self._name = name
    # One string object for every replica: the inner optimizer's merge_call
    # regroups arguments by identity, and equal copies would become PerReplica.
    self._inner_name = name + "-wrapped"
    # The step's arguments, given to `build`.
    self._strategy: Optional[tf.distribute.Strategy] = None
    self._grads_and_vars: GradsAndVars = ()
    self._global_step: Optional[tf.Variable] = None
    self._variables: List[tf.Variable] = []  # Those with a gradient.
    # What `build` finds on the way.
    self._clip_on_apply = settings.clip is not None
    self._window = None  # The accumulation window, with an accumulator.
    self._checked: GradsAndVars = ()  # What the finite check sees.
    self._scale = None  # The S this step used.
    self._count_skip = settings.skip_counter.add_one  # Builds the skip's op.

  def checked_pairs(self) -> GradsAndVars:
    """What the finite check sees: the pairs the update will use.

    With a norm clip (and a manager that skips), the pairs clipped now, so
    the check sees exactly what the update uses. With gradient accumulation,
    the micro-step's pairs; the window's state is made now, outside the gate
    (distributed variables must not be made inside control flow).
    """
    settings = self._settings
    if settings.accumulator is not None:
      self._window = settings.accumulator.open_window(self._grads_and_vars)
      return self._grads_and_vars
    if (settings.clip is not None and settings.clip.check_clipped and
        settings.manager.skips_nonfinite_steps):
      pairs = [(g, v) for g, v in self._grads_and_vars if g is not None]
      self._clip_on_apply = False
      return tuple(zip(clipping.reduce_and_clip(self._strategy, settings.clip,
                                                pairs), self._variables))
    return self._grads_and_vars

  def apply_behind(self, pivot: tf.Tensor) -> tf.Operation:
    """The taken side: applies the checked pairs (or adds them to the
    accumulation window), every op behind `pivot`."""
    if self._window is not None:
      return self._settings.accumulator.micro_step(
          self._strategy, self._window, self.apply_pairs, pivot)
    return self.apply_pairs(self._checked, pivot)

  def apply_pairs(self, pairs: GradsAndVars, pivot: tf.Tensor) -> tf.Operation:
    """Applies (per-replica) `pairs` through the inner optimizer, on each
    replica behind `pivot`; clips them first unless `checked_pairs` did."""
    pairs = [(g, v) for g, v in pairs if g is not None]
    grads = tuple(g for g, _ in pairs)
    if self._clip_on_apply:
      grads = clipping.reduce_and_clip(self._strategy, self._settings.clip,
                                       pairs)
    return self._strategy.group(gate.on_each_replica(
        self._strategy, pivot, self._apply_on_replica, grads))

  def _apply_on_replica(self, *grads: tensors.Gradient) -> tf.Operation:
    # Behind the pivot: the held 16-bit gradients become float32 only here.
    # At most `pacing.IN_FLIGHT` of their products alive at a time.
    start = tf.compat.v1.get_default_graph().version
    grads, units = unscale.behind_gate(grads)
    applied = self._settings.inner.apply_gradients(
        list(zip(grads, self._variables)), self._global_step, self._inner_name)
    pacing.pace(units, start)
    return applied

  def _ends_sync_replicas_round(self) -> bool:
    """True if the gradients come from SyncReplicasOptimizer's accumulators.

    Those move to the next round whenever the chief takes their gradients,
    and the tokens that release the workers carry `global_step`: unless a
    skipped round advances it too, every later gradient is dropped as stale
    and the workers wait forever.
    """
    return self._global_step is not None and any(  # PerReplica: no op.
        getattr(getattr(tensors.values(g), "op", None), "type", None)
        in _SYNC_REPLICAS_TAKES for g, _ in self._grads_and_vars
        if g is not None)

  def skip_side(self) -> tf.Operation:
    """The untaken side: counts the skip (and reports it, with an overflow
    report); under SyncReplicas, also ends the round."""
    if not self._ends_sync_replicas_round():
      return self._count_skip()
    return tf.group(self._count_skip(),
                    tf.compat.v1.assign_add(self._global_step, 1))

  def _telemetry(self, finite: tf.Tensor, applied: tf.Operation,
                 name: str) -> telemetry.Record:
    """Measures the step (see `telemetry`); returns its record."""
    settings, scale = self._settings, self._scale
    stats = telemetry.measure(self._strategy, self._grads_and_vars, scale)
    window = None
    if settings.accumulator is not None:  # 0 once the window was applied.
      window = settings.accumulator.count_after(applied)
    step = {"headroom_bits": stats["headroom_bits"],
            "zero_share": stats["zero_share"],
            "global_norm": tf.where(finite, stats["global_norm"], float("nan"),
                                    name="global_norm"),
            "skip_reason": telemetry.skip_reason(finite, scale,
                                                 settings.manager, window)}
    record = telemetry.Record(name, stats["groups"], step)
    # Inside control flow the step's tensors cannot be fetched: readers then
    # use the stored values.
    record.fetchable = not signal_record.inside_control_flow(
        step["skip_reason"])
    return record

  def build(self, strategy: tf.distribute.Strategy,
            grads_and_vars: GradsAndVars,
            global_step: Optional[tf.Variable]) -> tf.Operation:
    """Builds the step described in the module docstring; returns its op.

    Args:
      strategy: The strategy whose cross-replica context this runs in.
      grads_and_vars: The checked pairs (per-replica values under a
        strategy).
      global_step: Incremented only when the step applies, or None.
    """
    settings, manager = self._settings, self._settings.manager
    self._strategy, self._global_step = strategy, global_step
    self._grads_and_vars = grads_and_vars
    self._variables = [v for g, v in grads_and_vars if g is not None]
    train_ops = tf.compat.v1.get_collection_ref(
        tf.compat.v1.GraphKeys.TRAIN_OP)
    train_ops_before = list(train_ops)
    self._checked = checked = self.checked_pairs()
    # The S the gradients were unscaled with: a second read could see a scale
    # another train op of the manager changed since.
    self._scale = scale = step_loss_scale(
        manager, (g for g, _ in self._grads_and_vars))
    if manager.skips_nonfinite_steps:
      finite = managers.all_finite_in_sync(g for g, _ in checked)
      if settings.overflow_report is not None:  # Its ops found before the gate.
        self._count_skip = report.when_skipped(
            settings.overflow_report,
            "micro-step dropped" if settings.accumulator else "step skipped",
            self._count_skip, self._grads_and_vars, scale)
      applied = gate.gate(finite, self.apply_behind, self.skip_side)
      skipped = settings.skip_counter.total()
    else:
      finite = tf.constant(True)
      applied = self.apply_behind(finite)
      skipped = tf.constant(0, tf.int64)
    # Unclipped: a norm clip shrinks the update, not what the backward held.
    extra = ({"gradient_amax": amax.gradient_amax(
        g for g, _ in self._grads_and_vars)} if manager.needs_gradient_amax
             else {})
    # Beside the apply, not after it: nothing in the apply reads the scale,
    # and the update's mutex then waits while the inner optimizer works.
    with tf.control_dependencies([scale]):
      update = manager.update_loss_scale(finite, **extra)
    name = signal_record.name_for(settings.skip_counter.owner)
    measured = (self._telemetry(finite, applied, name)
                if settings.precision_telemetry else None)
    signal_updates: List[tf.Operation] = signal_record.publish(
        name, settings.skip_counter, finite, skipped, scale, manager, measured)
    if measured is not None:
      signal_updates.append(measured.write())
    summaries.build()  # What the readers return, ready when asked.
    train_op = tf.group(applied, update, *signal_updates, name=self._name)
    # The inner apply is gated; only the whole gated step is a train op.
    train_ops[:] = train_ops_before + [train_op]
    return train_op
