"""`LossScaleManager`: the interface every loss scale in this project implements."""

import abc
from typing import List, Union

import tensorflow as tf

from mp_optimizer._internal import tracking
from mp_optimizer._internal import validation


def check_finite_flag(finite_grads: tf.Tensor) -> tf.Tensor:
  """Checks the argument of `update_loss_scale`.

  Raises:
    TypeError: If `finite_grads` is not a boolean tensor.
    ValueError: If its static shape is known and not scalar.
  """
  if not isinstance(finite_grads, tf.Tensor) or finite_grads.dtype != tf.bool:
    raise TypeError(
        "`finite_grads` must be a scalar boolean tf.Tensor (for example from "
        "`managers.all_finite(grads)`), got "
        f"{validation.describe(finite_grads)}.")
  if finite_grads.shape.rank not in (None, 0):
    raise ValueError(
        f"`finite_grads` must be a scalar, got shape {finite_grads.shape}.")
  return finite_grads


class LossScaleManager(tracking.GraphScopedTrackable, metaclass=abc.ABCMeta):
  """Decides the loss scale S and how it changes from step to step.

  Loss scaling multiplies the loss by S before backprop, so small float16
  gradients do not underflow to zero, and multiplies the gradients by 1/S before
  they are applied. A manager supplies S (`get_loss_scale`) and learns, once a
  step, whether that step's gradients were all finite (`update_loss_scale`).
  `mp_optimizer.LossScaleOptimizer` drives both calls; a subclass only decides
  the policy.

  A stateful manager built while a graph is the default makes its variables
  in its constructor, under the current name scope (as contrib and TF did);
  one built with no graph makes them the first time a graph asks for the
  scale. Either way each graph gets its own, once.

  Example:

  ```python
  class HalvingOnOverflow(managers.LossScaleManager):
    ...  # get_loss_scale() -> float32 scalar; update_loss_scale(flag) -> op
  ```
  """

  @abc.abstractmethod
  def get_loss_scale(self) -> Union[tf.Tensor, tf.Variable]:
    """Returns the current loss scale: a scalar float32 tensor or variable.

    Return the same object on every call in one graph (a variable, or a
    tensor made once), so that it can be fetched after the graph is
    finalized.
    """

  @abc.abstractmethod
  def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
    """Returns an op that updates the scale after one step.

    Args:
      finite_grads: Scalar bool tensor, True when every gradient of the step
        was finite.

    Returns:
      An op that, when run, moves the loss scale state one step forward.
    """

  @property
  def dynamic(self) -> bool:
    """True when the scale changes during training."""
    return False

  # True for a manager whose `update_loss_scale` also takes the step's largest
  # unscaled gradient magnitude as `gradient_amax` (the optimizer passes it).
  needs_gradient_amax = False

  # False for a manager whose optimizer must not scale at all
  # (`managers.NoLossScale`): no multiply by S, no unscale.
  scales_loss = True

  @property
  def skips_nonfinite_steps(self) -> bool:
    """True when a step with a NaN/Inf gradient must not be applied.

    The optimizer reads this once, when it builds the graph: when it is False
    no finite check and no gate are built at all.
    """
    return True

  def variables(self) -> List[tf.Variable]:
    """Returns the state variables of the current graph (none if stateless)."""
    return []
