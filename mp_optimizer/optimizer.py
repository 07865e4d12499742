"""`LossScaleOptimizer`: loss scaling around any `tf.compat.v1.train.Optimizer`."""

from typing import Any, Callable, Iterable, List, Optional, Tuple, Union

import tensorflow as tf

from mp_optimizer import _arguments
from mp_optimizer import _keras_api
from mp_optimizer import managers
from mp_optimizer._internal import tensors
from mp_optimizer._internal import tracking
from mp_optimizer._step import pairs
from mp_optimizer._step import report
from mp_optimizer._step import scaling
from mp_optimizer._step import unscale
from mp_optimizer._step import settings
from mp_optimizer._step import step

Optimizer = tf.compat.v1.train.Optimizer
GradsAndVars = List[Tuple[tensors.Gradient, tf.Variable]]


class LossScaleOptimizer(tracking.RestoresBareOptimizer,
                         _keras_api.KerasStyleNames, Optimizer):
  """Wraps an optimizer so float16 gradients neither underflow nor corrupt it.

  `compute_gradients` multiplies the loss by the manager's scale S and returns
  gradients multiplied back by 1/S, so anything before `apply_gradients`
  sees true gradients. A step with any NaN/Inf gradient is skipped entirely
  (no variable, slot or `global_step` moves) and the manager learns of it.
  This is `tf.contrib.mixed_precision`'s design without its bugs (docs:
  Migrating from contrib).

  Take gradients from this optimizer's `compute_gradients` (or
  `get_unscaled_gradients`): `apply_gradients` refuses gradients of a loss
  that never saw S, for which underflow remains.

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
    clipvalue: Keyword-only: clip each unscaled entry to +-clipvalue.
    global_clipnorm: Keyword-only: clip all unscaled gradients to this joint
      L2 norm. At most one clip option may be set; clipping happens in
      `apply_gradients`, on what the update will use (docs: Clipping and
      accumulation, as for the next option).
    gradient_accumulation_steps: Keyword-only None or an int >= 2: apply the
      mean of that many finite micro-steps once.
    overflow_report: Keyword-only bool or `overflow.OverflowReport`: on a
      skipped step, print which variables' gradients held NaN/Inf.
    precision_telemetry: Keyword-only bool: also measure each step's float16
      headroom, share of entries zero in float16 per variable group, global
      gradient norm and skip reason (`signals.precision()`; docs: Precision
      telemetry).
    compensated_update: Keyword-only: False, True (the same as "float32")
      or "bfloat16": update bfloat16 variables with Kahan summation, keeping
      what rounding lost in a slot of that dtype (docs: bfloat16), for
      variables that must stay bfloat16.

  Raises:
    TypeError: If `opt` or `loss_scale_manager` is missing or of the wrong
      type (also a ValueError, which TF raised; the message names the fix:
      swapped arguments, a class, a string or number, a look-alike manager),
      or an option has the wrong type.
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
               precision_telemetry: bool = False,
               compensated_update: Union[bool, str] = False):
    """Wraps `opt`; the arguments are described in the class docstring."""
    _arguments.check_optimizer(type(self).__name__, opt, loss_scale_manager)
    _arguments.check_manager(type(self).__name__, loss_scale_manager)
    self._options = settings.check_options(
        opt, clipnorm=clipnorm, clipvalue=clipvalue,
        global_clipnorm=global_clipnorm,
        gradient_accumulation_steps=gradient_accumulation_steps,
        overflow_report=overflow_report,
        precision_telemetry=precision_telemetry,
        compensated_update=compensated_update)
    super().__init__(use_locking=False, name=opt.get_name())
    self._opt = self._restore_target = opt
    self._manager = loss_scale_manager
    # TF's built-in uses these two names; its object checkpoints restore here.
    tracking.track(self, opt, "base_optimizer")
    tracking.track(self, loss_scale_manager, "loss_scale")
    self._settings = settings.StepSettings.make(
        self, opt, loss_scale_manager, self._options)

  @property
  def inner_optimizer(self) -> Optimizer:
    """The wrapped optimizer."""
    return self._opt

  @property
  def loss_scale_manager(self) -> managers.LossScaleManager:
    """The manager that owns the scale."""
    return self._manager

  def get_loss_scale(self) -> Union[tf.Tensor, tf.Variable]:
    """Returns the manager's current loss scale: a dynamic manager's float32
    variable (as contrib), a fixed one's float32 constant (one per graph)."""
    return self._manager.get_loss_scale()

  def compute_gradients(self,
                        loss: Union[tf.Tensor, Callable[[], tf.Tensor]],
                        var_list: Optional[List[tf.Variable]] = None,
                        gate_gradients: int = Optimizer.GATE_OP,
                        aggregation_method: Any = None,
                        colocate_gradients_with_ops: bool = False,
                        grad_loss: Optional[tf.Tensor] = None) -> GradsAndVars:
    """Returns unscaled `(gradient, variable)` pairs of `loss`.

    Takes `tf.compat.v1.train.Optimizer.compute_gradients`'s arguments. The
    loss (or a callable returning it) is multiplied by S in its own dtype,
    the gradients by 1/S in float32. `None` stays `None`; `tf.IndexedSlices`
    stay sparse.

    Raises:
      RuntimeError: Under eager execution.
      TypeError: If the loss is not floating point.
    """
    tensors.require_graph("LossScaleOptimizer.compute_gradients")
    if callable(loss):
      loss = loss()
    loss = scaling.check_loss(loss)
    scales = self._manager.scales_loss  # managers.NoLossScale: no scale.
    if scales:
      loss_scale = scaling.read_loss_scale(self._manager)  # One S, both ways.
      loss = scaling.scale_loss(loss, loss_scale)
      scaling.warn_if_bfloat16_only(loss)
    grads_and_vars = self._opt.compute_gradients(
        loss, var_list=var_list, gate_gradients=gate_gradients,
        aggregation_method=aggregation_method,
        colocate_gradients_with_ops=colocate_gradients_with_ops,
        grad_loss=grad_loss)
    if not scales:  # Nothing to undo.
      return grads_and_vars
    grads = unscale.unscale([g for g, _ in grads_and_vars], loss_scale,
                            stack=self._manager.skips_nonfinite_steps,
                            scale_floor=self._manager.scale_floor)
    return list(zip(grads, [v for _, v in grads_and_vars]))

  def apply_gradients(self, grads_and_vars: Iterable[Tuple[Any, tf.Variable]],
                      global_step: Optional[tf.Variable] = None,
                      name: Optional[str] = None) -> tf.Operation:
    """Applies unscaled gradients if all are finite; updates the scale.

    One boolean covers every non-None gradient; one Switch on it gates the
    inner apply (and its `global_step` increment), after any clipping and
    accumulation; the manager's update runs beside it, once the boolean and
    the step's read of S are done. Under `tf.distribute` every replica gets
    the same verdict. The docs' "How a step works" gives the exact semantics.

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
        or holds gradients that never saw S or kept it (see
        `mp_optimizer.allow_unscaled_gradients()`), or if the inner apply made
        a variable initialized from the gated update.
    """
    tensors.require_graph("LossScaleOptimizer.apply_gradients")
    grads_and_vars = pairs.check_before_step(grads_and_vars, self._settings)
    # Each replica of an Estimator builds its own optimizer (merge_call args
    # not one object on every replica become PerReplica): the first's builds.
    builder = step.StepBuilder(self._settings, name or self.get_name())
    applied = tf.distribute.get_replica_context().merge_call(
        builder.build, args=(grads_and_vars, global_step))
    # What a tolerant Saver and the resume check need to tell apart.
    tracking.record_optimizer_state(self._manager.variables(),
                                    self._opt.variables())
    return applied

  def get_slot(self, var: tf.Variable, name: str) -> Optional[tf.Variable]:
    """Returns the inner optimizer's slot `name` for `var` (or with
    `compensated_update`, its "kahan_compensation" slot)."""
    return self._settings.inner.get_slot(var, name)

  def get_slot_names(self) -> List[str]:
    """Returns the inner optimizer's slot names (and the compensation's)."""
    return self._settings.slot_names()

  def __dir__(self) -> List[str]:
    """Lists attributes, without the marker of the inner optimizer's slots."""
    # The slots get_slot delegates to belong to the inner optimizer; without
    # this, tf.train.Checkpoint finds them twice and refuses to save.
    return tracking.hide_slot_owner_marker(super().__dir__())

  def __repr__(self) -> str:
    return _arguments.optimizer_repr(self, self._options)

  def __str__(self) -> str:
    # Keras 3's `model.compile` prints this when it refuses the optimizer.
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
      ValueError: TF's message when no variable gets a gradient, and a hint.
    """
    try:
      return super().minimize(
          loss, global_step=global_step, var_list=var_list,
          gate_gradients=gate_gradients, aggregation_method=aggregation_method,
          colocate_gradients_with_ops=colocate_gradients_with_ops,
          name=name, grad_loss=grad_loss)
    except ValueError as error:
      if str(error).startswith("No gradients provided for any variable"):
        raise ValueError(f"{error} {_arguments.no_gradients_hint()}") from None
      raise

  def variables(self) -> List[tf.Variable]:
    """The inner optimizer's variables, scale state, accumulators and slots."""
    return (self._opt.variables() + self._manager.variables() +
            self._settings.own_variables())

