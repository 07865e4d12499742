"""`LossScaleOptimizer`: loss scaling around any `tf.compat.v1.train.Optimizer`."""

from typing import Any, Callable, Iterable, List, Optional, Tuple, Union

import tensorflow as tf

from mp_optimizer import _arguments
from mp_optimizer import _keras_api
from mp_optimizer import managers
from mp_optimizer._internal import per_graph
from mp_optimizer._internal import tensors
from mp_optimizer._internal import tracking
from mp_optimizer._internal import validation
from mp_optimizer._step import accumulation
from mp_optimizer._step import ancestry
from mp_optimizer._step import records
from mp_optimizer._step import checks
from mp_optimizer._step import clipping
from mp_optimizer._step import report
from mp_optimizer._step import scaling
from mp_optimizer._step import skips
from mp_optimizer._step import step
from mp_optimizer._step.scaling import read_loss_scale

Optimizer = tf.compat.v1.train.Optimizer
GradsAndVars = List[Tuple[tensors.Gradient, tf.Variable]]


class LossScaleOptimizer(_keras_api.KerasStyleNames, Optimizer):
  """Wraps an optimizer so float16 gradients neither underflow nor corrupt it.

  `compute_gradients` multiplies the loss by the manager's scale S and returns
  gradients already multiplied back by 1/S, so anything between it and
  `apply_gradients` (clipping, summaries) sees true gradients.
  `apply_gradients` checks all gradients at once: a step with any NaN/Inf
  gradient is skipped entirely (no variable, slot or `global_step` moves) and
  the manager learns of it. This is `tf.contrib.mixed_precision`'s design,
  with its bugs fixed: `None` gradients are allowed, sparse gradients stay
  sparse, the base `Optimizer.__init__` is called (so slots and `variables()`
  work), and managers built outside the graph work.

  Always take gradients from this optimizer's `compute_gradients` (or
  `get_unscaled_gradients`), never from `tf.gradients` of the unscaled loss:
  those were never scaled, and underflow remains.

  Example:

  ```python
  opt = mp_optimizer.LossScaleOptimizer(
      tf.compat.v1.train.AdamOptimizer(1e-3),
      managers.ExponentialUpdateLossScaleManager(2**15, 2000))
  train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
  ```

  Args:
    opt: The `tf.compat.v1.train.Optimizer` that computes and applies updates.
    loss_scale_manager: A `managers.LossScaleManager`.
    clipnorm: Keyword-only: clip each unscaled gradient to this L2 norm.
    clipvalue: Keyword-only: clip each unscaled gradient entry to
      [-clipvalue, clipvalue].
    global_clipnorm: Keyword-only: clip all unscaled gradients to this joint
      L2 norm. At most one of the three clip options may be set. Clipping
      happens in `apply_gradients`, on what the update will use; a norm clip
      comes before the finite check, which then checks the clipped update
      (docs: Clipping and accumulation).
    gradient_accumulation_steps: Keyword-only None or an int >= 2: apply the
      mean of that many finite micro-steps once (docs:
      Clipping and accumulation).
    overflow_report: Keyword-only True, False or an
      `mp_optimizer.overflow.OverflowReport`: on a skipped step, print which
      variables' gradients held NaN/Inf.
    precision_telemetry: Keyword-only bool: also measure every step's float16
      headroom, share of gradient entries zero in float16 per variable
      group, unscaled global gradient norm and skip reason (docs: Precision
      telemetry; read with `mp_optimizer.signals.precision()`,
      `add_summaries()` and `LossScaleHook`).

  Raises:
    TypeError: If `opt` or `loss_scale_manager` is missing or has the wrong
      type (a TypeError that is also a ValueError, which TF raised), an
      option is not a number, `overflow_report` is not a bool or an
      `OverflowReport`, or `precision_telemetry` is not a bool. The message names the fix: swapped arguments, a class
      instead of an instance, a string or number (that is
      `MixedPrecisionLossScaleOptimizer`'s), an object with a manager's
      methods that is not a `managers.LossScaleManager`.
    ValueError: If `opt` is already a `LossScaleOptimizer` or TF's
      `MixedPrecisionLossScaleOptimizer`, or is a `SyncReplicasOptimizer`
      (wrap the other way round), or an option is out of range.
  """

  __signature__ = _arguments.ClassSignature()

  def __init__(self, opt: Optimizer,
               loss_scale_manager: managers.LossScaleManager = (
                   _arguments.REQUIRED), *,
               clipnorm: Optional[float] = None,
               clipvalue: Optional[float] = None,
               global_clipnorm: Optional[float] = None,
               gradient_accumulation_steps: Optional[int] = None,
               overflow_report: Union[bool, report.OverflowReport] = False,
               precision_telemetry: bool = False):
    """Wraps `opt`; the arguments are described in the class docstring."""
    _arguments.check_optimizer(type(self).__name__, opt, loss_scale_manager)
    _arguments.check_manager(type(self).__name__, loss_scale_manager)
    clip = clipping.make_clip(clipnorm, clipvalue, global_clipnorm)
    steps = accumulation.check_steps(gradient_accumulation_steps)
    report_settings = report.check_option(overflow_report)
    telemetry = validation.check_bool("precision_telemetry",
                                      precision_telemetry)
    self._options = {"clipnorm": clipnorm, "clipvalue": clipvalue,
                     "global_clipnorm": global_clipnorm,
                     "gradient_accumulation_steps": steps,
                     "overflow_report": report_settings,
                     "precision_telemetry": telemetry}
    super().__init__(use_locking=False, name=opt.get_name())
    self._opt = opt
    self._manager = loss_scale_manager
    # TF's built-in uses these two names; its object checkpoints restore here.
    tracking.track(self, opt, "base_optimizer")
    tracking.track(self, loss_scale_manager, "loss_scale")
    self._accumulator = (None if steps is None else
                         accumulation.GradientAccumulator(self, steps))
    self._parts = step.Parts(opt, loss_scale_manager, skips.SkipCounter(self),
                             clip, self._accumulator, report_settings,
                             telemetry)

  @property
  def inner_optimizer(self) -> Optimizer:
    """The wrapped optimizer."""
    return self._opt

  @property
  def loss_scale_manager(self) -> managers.LossScaleManager:
    """The manager that owns the scale."""
    return self._manager

  def get_loss_scale(self) -> Union[tf.Tensor, tf.Variable]:
    """Returns the manager's current loss scale (see `get_loss_scale` there).

    For a dynamic manager this is its float32 scale variable, as contrib
    returned; a fixed one returns one float32 constant per graph.
    """
    return self._manager.get_loss_scale()

  def compute_gradients(self,
                        loss: Union[tf.Tensor, Callable[[], tf.Tensor]],
                        var_list: Optional[List[tf.Variable]] = None,
                        gate_gradients: int = Optimizer.GATE_OP,
                        aggregation_method: Any = None,
                        colocate_gradients_with_ops: bool = False,
                        grad_loss: Optional[tf.Tensor] = None) -> GradsAndVars:
    """Returns unscaled `(gradient, variable)` pairs of `loss`.

    Takes the arguments of `tf.compat.v1.train.Optimizer.compute_gradients`.
    The loss (a tensor, or a callable returning one) is multiplied by S in its
    own dtype; the gradients are multiplied by 1/S in float32 before they are
    returned. `None` gradients stay `None`; `tf.IndexedSlices` stay sparse.

    Raises:
      RuntimeError: Under eager execution.
      TypeError: If the loss is not floating point.
    """
    per_graph.require_graph("LossScaleOptimizer.compute_gradients")
    if callable(loss):
      loss = loss()
    loss = scaling.check_loss(loss)
    loss_scale = read_loss_scale(self._manager)  # One S, both ways.
    scaled_loss = scaling.scale_loss(loss, loss_scale)
    checks.warn_if_bfloat16_only(scaled_loss)
    grads_and_vars = self._opt.compute_gradients(
        scaled_loss,
        var_list=var_list,
        gate_gradients=gate_gradients,
        aggregation_method=aggregation_method,
        colocate_gradients_with_ops=colocate_gradients_with_ops,
        grad_loss=grad_loss)
    grads = scaling.unscale([g for g, _ in grads_and_vars], loss_scale,
                            stack=self._manager.skips_nonfinite_steps)
    return list(zip(grads, [v for _, v in grads_and_vars]))

  def apply_gradients(self, grads_and_vars: Iterable[Tuple[Any, tf.Variable]],
                      global_step: Optional[tf.Variable] = None,
                      name: Optional[str] = None) -> tf.Operation:
    """Applies unscaled gradients if all are finite; updates the scale.

    One boolean covers every non-None gradient. The inner optimizer's apply
    (and its `global_step` increment) is gated by one Switch on it, after
    any clipping and gradient accumulation; the manager's update runs beside
    it, once the boolean and the step's read of the scale are done, and is
    grouped into the returned op. Under `tf.distribute` this
    happens in cross-replica context and every replica gets the same verdict.
    The docs' "How a step works" gives the exact semantics.

    Args:
      grads_and_vars: `(gradient, variable)` pairs from `compute_gradients`.
      global_step: Optional variable incremented only when the step applies.
      name: Optional name of the returned op.

    Returns:
      One op that runs the whole step.

    Raises:
      RuntimeError: Under eager execution, or in cross-replica context.
      TypeError: If `grads_and_vars` does not hold (gradient, variable) pairs.
      ValueError: If `grads_and_vars` is empty or all its gradients are None,
        or it holds gradients of the scaled loss that were never unscaled, or
        gradients of a loss that was never scaled (outside
        `mp_optimizer.allow_unscaled_gradients()`),
        or if the inner apply made a variable initialized from the gated
        update.
    """
    per_graph.require_graph("LossScaleOptimizer.apply_gradients")
    grads_and_vars = checks.check_grads_and_vars(grads_and_vars)
    records.record_scale_source(self._manager.get_loss_scale())
    ancestry.check_unscaled(grads_and_vars)
    checks.warn_if_16bit_variables(self._opt, grads_and_vars)
    if tensors.in_cross_replica_context():
      raise RuntimeError(
          "LossScaleOptimizer.apply_gradients must be called in replica "
          "context: call it inside `strategy.run` (or a model_fn), not "
          "directly under `strategy.scope()`.")
    return tf.distribute.get_replica_context().merge_call(
        self._apply_cross_replica, args=(grads_and_vars, global_step, name))

  def _apply_cross_replica(self, strategy: tf.distribute.Strategy,
                           grads_and_vars: GradsAndVars,
                           global_step: Optional[tf.Variable],
                           name: Optional[str]) -> tf.Operation:
    return step.gated_step(strategy, self._parts, grads_and_vars, global_step,
                           name or self.get_name())

  def get_slot(self, var: tf.Variable, name: str) -> Optional[tf.Variable]:
    """Returns the inner optimizer's slot `name` for `var`."""
    return self._opt.get_slot(var, name)

  def get_slot_names(self) -> List[str]:
    """Returns the inner optimizer's slot names."""
    return self._opt.get_slot_names()

  def __dir__(self) -> List[str]:
    """Lists attributes, without the marker of the inner optimizer's slots."""
    # The slots get_slot delegates to belong to the inner optimizer; without
    # this, tf.train.Checkpoint finds them twice and refuses to save.
    return tracking.hide_slot_owner_marker(super().__dir__())

  def __repr__(self) -> str:
    return _arguments.optimizer_repr(self, self._options)

  def __str__(self) -> str:
    # What Keras 3's `model.compile` prints when it refuses this optimizer
    # ("Could not interpret optimizer identifier: <str>").
    return repr(self) + _arguments.KERAS_HINT

  def minimize(self, loss: Union[tf.Tensor, Callable[[], tf.Tensor]],
               global_step: Optional[tf.Variable] = None,
               var_list: Optional[List[tf.Variable]] = None,
               gate_gradients: int = Optimizer.GATE_OP,
               aggregation_method: Any = None,
               colocate_gradients_with_ops: bool = False,
               name: Optional[str] = None,
               grad_loss: Optional[tf.Tensor] = None) -> tf.Operation:
    """`compute_gradients`, then `apply_gradients`, as TF's `minimize`.

    Raises:
      ValueError: TF's own message when no variable gets a gradient,
        followed by what to check.
    """
    try:
      return super().minimize(
          loss, global_step=global_step, var_list=var_list,
          gate_gradients=gate_gradients,
          aggregation_method=aggregation_method,
          colocate_gradients_with_ops=colocate_gradients_with_ops,
          name=name, grad_loss=grad_loss)
    except ValueError as error:
      if not str(error).startswith("No gradients provided for any variable"):
        raise
      raise ValueError(f"{error} {_arguments.NO_GRADIENTS_HINT}") from None

  def variables(self) -> List[tf.Variable]:
    """Returns the inner optimizer's variables, the scale state and any
    gradient accumulators."""
    accumulators = ([] if self._accumulator is None else
                    self._accumulator.variables())
    return self._opt.variables() + self._manager.variables() + accumulators

