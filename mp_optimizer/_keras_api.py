"""The Keras-style names of `LossScaleOptimizer`, in one small base class.

Code written against `tf.keras.mixed_precision.LossScaleOptimizer` reads
`loss_scale`, `dynamic`, `initial_scale`, `dynamic_growth_steps` and the
clip and accumulation options, and calls `get_scaled_loss`,
`get_unscaled_gradients` and `check_finite` in custom loops. They are
defined here once; `LossScaleOptimizer` derives from `KerasStyleNames` and
provides `loss_scale_manager` and `_options` (its constructor's options).
"""

from typing import Any, Callable, Iterable, List, Union

import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer._internal import tensors
from mp_optimizer._step import reads
from mp_optimizer._step import scaling
from mp_optimizer._step import unscale
from mp_optimizer._step.scaling import read_loss_scale


def _manager_setting(doc: str, *names: str) -> property:
  """A Keras-style property: the first of the manager's `names` it has."""

  def read(optimizer: "KerasStyleNames") -> Any:
    manager = optimizer.loss_scale_manager
    return next((getattr(manager, name) for name in names
                 if hasattr(manager, name)), None)

  return property(read, doc=doc)


def _option(name: str) -> property:
  """A Keras-style property: the constructor option `name`, or None."""
  return property(lambda optimizer: optimizer._options[name],  # pylint: disable=protected-access
                  doc=f"The `{name}` option, or None if it was not given.")


class KerasStyleNames:
  """Keras's reading names and custom-loop methods, on the manager's scale."""

  loss_scale_manager: managers.LossScaleManager
  _options: dict

  @property
  def loss_scale(self) -> tf.Tensor:
    """A read of the current loss scale, a float32 scalar tensor (as Keras)."""
    return read_loss_scale(self.loss_scale_manager)

  @property
  def dynamic(self) -> bool:
    """True if the loss scale changes during training."""
    return self.loss_scale_manager.dynamic

  initial_scale = _manager_setting(
      "The starting scale of a dynamic or fixed manager (else None).",
      "init_loss_scale", "loss_scale_value")
  dynamic_growth_steps = _manager_setting(
      "Finite steps between increases of a dynamic scale (else None).",
      "incr_every_n_steps")
  clipnorm = _option("clipnorm")
  clipvalue = _option("clipvalue")
  global_clipnorm = _option("global_clipnorm")
  gradient_accumulation_steps = _option(
      "gradient_accumulation_steps")

  def get_scaled_loss(
      self, loss: Union[tf.Tensor, Callable[[], tf.Tensor]]
  ) -> Union[tf.Tensor, Callable[[], tf.Tensor]]:
    """Returns `loss * S` (in the loss's dtype), for use with tf.gradients.

    With `managers.NoLossScale` it returns `loss` itself (no op is built).

    As in Keras, a callable `loss` gives a callable that returns its result
    times S.

    Raises:
      RuntimeError: Under eager execution.
      TypeError: If `loss` (or what the callable returns, when it is called)
        is not a floating-point tensor.
    """
    tensors.require_graph("LossScaleOptimizer.get_scaled_loss")
    if callable(loss):
      return lambda: self.get_scaled_loss(loss())
    loss = scaling.check_loss(loss)
    if not self.loss_scale_manager.scales_loss:
      return loss
    return scaling.scale_loss(loss, read_loss_scale(self.loss_scale_manager))

  scale_loss = get_scaled_loss

  def get_unscaled_gradients(
      self, grads: Iterable[tensors.Gradient]) -> List[tensors.Gradient]:
    """Returns gradients of a scaled loss multiplied by 1/S (None kept).

    S is the read `get_scaled_loss` multiplied their loss by (found by
    walking back from the gradients), so both directions use one S even if
    the scale changed in between; gradients of a loss scaled otherwise get
    a new read.
    With `managers.NoLossScale` it returns them as they are (a new list).

    Raises:
      RuntimeError: Under eager execution.
    """
    tensors.require_graph("LossScaleOptimizer.get_unscaled_gradients")
    if not self.loss_scale_manager.scales_loss:
      return list(grads)
    grads = list(grads)
    loss_scale = reads.read_behind("scaled", grads)
    if loss_scale is None:
      loss_scale = read_loss_scale(self.loss_scale_manager)
    manager = self.loss_scale_manager
    return unscale.unscale(grads, loss_scale,
                           stack=manager.skips_nonfinite_steps,
                           scale_floor=manager.scale_floor)

  def check_finite(self, grads: Iterable[tensors.Gradient]) -> tf.Tensor:
    """Returns a scalar bool tensor: are all `grads` finite (None ignored)?

    Raises:
      RuntimeError: Under eager execution.
    """
    tensors.require_graph("LossScaleOptimizer.check_finite")
    return managers.all_finite(grads)
