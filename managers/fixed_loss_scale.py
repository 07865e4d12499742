"""`FixedLossScale`: TF's fixed loss scale, a face of `FixedLossScaleManager`.

It holds the one fixed policy, a `fixed.FixedScale`, built from
`fixed.FixedSettings`, and differs from TF's class in one way: it skips
NaN/Inf steps unless asked not to.
"""

from typing import Any, Dict

import tensorflow as tf

from mp_optimizer._internal import validation
from mp_optimizer.managers import base
from mp_optimizer.managers import fixed
from mp_optimizer.managers import loss_scale


_FIXED = fixed.FixedSettings  # Its class attributes are the defaults.


class FixedLossScale(loss_scale.LossScale):
  """TF's `FixedLossScale(loss_scale_value)`, skipping NaN/Inf steps by default.

  TF's own class applies a step even when its gradients are NaN/Inf, which
  writes NaN into the weights. This one skips such steps unless
  `skip_nonfinite_steps=False` asks for TF's exact behaviour.

  Example:

  ```python
  opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(
      opt, managers.FixedLossScale(128))
  ```

  Args:
    loss_scale_value: Python or NumPy int or float, finite and >= 1.
    skip_nonfinite_steps: Keyword-only bool, default True.

  Raises:
    ValueError: If `loss_scale_value` is not a number (TF's class for this),
      is a bool, is not finite or is below 1.
    TypeError: If `skip_nonfinite_steps` is not a bool.
  """

  def __init__(
      self, loss_scale_value: float, *,
      skip_nonfinite_steps: bool = _FIXED.skip_nonfinite_steps):
    try:
      value = validation.check_at_least("loss_scale_value", loss_scale_value,
                                        1.0)
    except TypeError as error:  # TF raises ValueError for a non-number.
      raise ValueError(str(error)) from None
    self._settings = fixed.FixedSettings(
        value, skip_nonfinite_steps=validation.check_bool(
            "skip_nonfinite_steps", skip_nonfinite_steps))
    self._scale = fixed.FixedScale(self._settings)

  loss_scale_value = base.setting("loss_scale",
                                  "The scale, as the Python float given.")
  scale_floor = base.setting("loss_scale",
                             "The least scale: the only one, as a float.")
  skips_nonfinite_steps = base.setting("skip_nonfinite_steps")

  def get_loss_scale(self) -> tf.Tensor:
    """Returns the scale: one float32 constant per graph, made on first use."""
    return self._scale.constant()

  def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
    """Returns a no-op: the scale is fixed."""
    return self._scale.update(finite_grads)

  def get_config(self) -> Dict[str, Any]:
    """Returns TF's config keys, plus `skip_nonfinite_steps` only if False.

    A default config is exactly what TF's `FixedLossScale` writes and reads,
    so configs travel both ways between the two classes.
    """
    return {"loss_scale_value": self._settings.loss_scale,
            **base.non_default(self._settings, ["skip_nonfinite_steps"])}

  def __repr__(self) -> str:
    return self._scale.repr_as(type(self).__name__)


# The fixed manager with TF's names: `isinstance` checks written for that
# class still pass.
fixed.FixedLossScaleManager.register(FixedLossScale)
