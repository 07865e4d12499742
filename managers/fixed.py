"""`FixedLossScaleManager`: one scale for the whole run."""

import dataclasses
import weakref

import tensorflow as tf

from mp_optimizer._internal import tensors
from mp_optimizer._internal import validation
from mp_optimizer.managers import base


@dataclasses.dataclass(frozen=True)
class FixedSettings:
  """`FixedLossScaleManager`'s settings and their defaults.

  Attributes:
    loss_scale: The scale, a finite float >= 1 (required).
    skip_nonfinite_steps: Skip a step with a NaN/Inf gradient.
  """
  loss_scale: float
  skip_nonfinite_steps: bool = True


class FixedScale:
  """One fixed scale: a float32 constant in each graph that asks, made once.

  Both fixed faces (`FixedLossScaleManager`, TF2's `FixedLossScale`) hold
  one, made from their validated settings.
  """

  def __init__(self, settings: FixedSettings):
    self.settings = settings
    self._constants = weakref.WeakKeyDictionary()

  def constant(self) -> tf.Tensor:
    """The current graph's constant (see `FixedLossScaleManager`)."""
    graph = tensors.require_graph("FixedLossScaleManager.get_loss_scale")
    found = self._constants.get(graph)
    if found is None:
      with tf.init_scope(), graph.name_scope(None):
        found = tf.constant(self.settings.loss_scale, dtype=tf.float32,
                            name="loss_scale")
      self._constants[graph] = found
    return found

  def repr_as(self, name: str) -> str:
    """The constructor call `name(scale)`, with `skip_nonfinite_steps` only
    when it is not the default."""
    return base.call_repr(
        name, [self.settings.loss_scale],
        base.non_default(self.settings, ["skip_nonfinite_steps"]))

  @staticmethod
  def update(finite_grads: tf.Tensor) -> tf.Operation:
    """A no-op, once `finite_grads` is checked: the scale is fixed."""
    base.check_finite_flag(finite_grads)
    return tf.no_op(name="fixed_loss_scale_update")


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

  def __init__(self, loss_scale: float, *,
               skip_nonfinite_steps: bool = FixedSettings.skip_nonfinite_steps):
    self._settings = FixedSettings(
        validation.check_at_least("loss_scale", loss_scale, 1.0),
        skip_nonfinite_steps=validation.check_bool("skip_nonfinite_steps",
                                                   skip_nonfinite_steps))
    self._scale = FixedScale(self._settings)

  loss_scale_value = base.setting("loss_scale",
                                  "The scale, as the Python float given.")
  scale_floor = base.setting("loss_scale",
                             "The least scale: the only one, as a float.")
  skips_nonfinite_steps = base.setting("skip_nonfinite_steps")

  def get_loss_scale(self) -> tf.Tensor:
    """Returns the scale: one float32 constant per graph, made on first use.

    The same tensor every time, in the outermost graph, so it can be fetched
    after the graph is finalized (in a hook) and used inside control flow.
    """
    return self._scale.constant()

  def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
    """Returns a no-op: the scale is fixed."""
    return self._scale.update(finite_grads)

  def __repr__(self) -> str:
    return self._scale.repr_as(type(self).__name__)
