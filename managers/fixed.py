"""`FixedLossScaleManager`: one scale for the whole run."""

import weakref

import tensorflow as tf

from mp_optimizer._internal import tensors
from mp_optimizer._internal import validation
from mp_optimizer.managers import base


class FixedLossScaleManager(base.LossScaleManager):
  """A loss scale that never changes.

  Unlike TensorFlow's `FixedLossScale`, a step whose gradients contain NaN or
  Inf is skipped by default (as `tf.contrib.mixed_precision` did): a too-large
  fixed scale then costs a step instead of corrupting the weights. Pass
  `skip_nonfinite_steps=False` to apply every step, as TF's built-in does; the
  optimizer then builds no finite check and no gate.

  It has no state: the constructor creates no tensor, and the scale becomes
  one constant in each graph that asks for it.

  Example:

  ```python
  opt = mp_optimizer.LossScaleOptimizer(
      tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
      managers.FixedLossScaleManager(1024))
  ```

  Args:
    loss_scale: Python int or float, finite and >= 1.
    skip_nonfinite_steps: Keyword-only bool, default True.

  Raises:
    TypeError: If `loss_scale` is not an int/float or `skip_nonfinite_steps`
      is not a bool.
    ValueError: If `loss_scale` is not finite or is below 1.
  """

  def __init__(self, loss_scale: float, *, skip_nonfinite_steps: bool = True):
    self._loss_scale = validation.check_at_least("loss_scale", loss_scale, 1.0)
    self._skip = validation.check_bool("skip_nonfinite_steps",
                                        skip_nonfinite_steps)
    self._constants = weakref.WeakKeyDictionary()

  @property
  def loss_scale_value(self) -> float:
    """The scale, as the Python float given to the constructor."""
    return self._loss_scale

  @property
  def skips_nonfinite_steps(self) -> bool:
    return self._skip

  def get_loss_scale(self) -> tf.Tensor:
    """Returns the scale: one float32 constant per graph, made on first use.

    The same tensor every time, in the outermost graph, so it can be fetched
    after the graph is finalized (in a hook) and used inside control flow.
    """
    graph = tensors.require_graph("FixedLossScaleManager.get_loss_scale")
    found = self._constants.get(graph)
    if found is None:
      with tf.init_scope(), graph.name_scope(None):
        found = tf.constant(self._loss_scale, dtype=tf.float32,
                            name="loss_scale")
      self._constants[graph] = found
    return found

  def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
    """Returns a no-op: the scale is fixed."""
    base.check_finite_flag(finite_grads)
    return tf.no_op(name="fixed_loss_scale_update")

  def __repr__(self) -> str:
    skip = "" if self._skip else ", skip_nonfinite_steps=False"
    return f"{type(self).__name__}({self._loss_scale!r}{skip})"
