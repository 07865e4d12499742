"""`NoLossScale`: the bfloat16 mode's manager: no scale, every step checked."""

from mp_optimizer.managers import fixed


class NoLossScale(fixed.FixedLossScaleManager):
  """No loss scaling, but every step with a NaN/Inf gradient is skipped.

  For models that compute in bfloat16. bfloat16 has float32's exponent range,
  so gradients do not underflow and a scale buys nothing; but a step can still
  produce NaN or Inf (a diverging loss, a bad batch, an overflowing
  activation), and applying it would corrupt the weights and the optimizer's
  slots. With this manager the optimizer builds no multiply of the loss and
  no unscale of the gradients at all (`compute_gradients` returns the inner
  optimizer's gradients as they are), and keeps everything else of a step:
  the one finite check and gate, the skip count and signals, the overflow
  report, the origin report and the precision telemetry, whose skip reason
  for such a step is "non-finite, unscaled".

  It is the same switch in both faces:
  `LossScaleOptimizer(opt, managers.NoLossScale())` and
  `MixedPrecisionLossScaleOptimizer(opt, managers.NoLossScale())`.
  `get_loss_scale()` is a float32 constant 1 (so code that reads the scale
  keeps working); there is no state and nothing to checkpoint.

  Example:

  ```python
  opt = mp_optimizer.LossScaleOptimizer(
      tf.compat.v1.train.AdamOptimizer(1e-3), managers.NoLossScale())
  ```
  """

  # Read by the optimizer when it builds the graph: no multiply by S and no
  # unscale, and no check that gradients saw S (there is none).
  scales_loss = False

  def __init__(self):
    super().__init__(1.0)

  def __repr__(self) -> str:
    return f"{type(self).__name__}()"
