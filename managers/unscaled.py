"""`NoLossScale`: the bfloat16 mode's manager: no scale, every step checked."""

import dataclasses
from typing import Any, Dict, List, Optional

import tensorflow as tf

from mp_optimizer._internal import tracking
from mp_optimizer._internal import validation
from mp_optimizer.managers import base
from mp_optimizer.managers import fixed


@dataclasses.dataclass(frozen=True)
class UnscaledSettings:
  """`NoLossScale`'s settings and their defaults.

  Attributes:
    keep_state_of: None, or the float16 run's manager whose state is kept.
  """
  keep_state_of: Optional[base.LossScaleManager] = None


def _check_kept(value: Any) -> Optional[base.LossScaleManager]:
  """Returns `keep_state_of` once checked.

  Raises:
    TypeError: If it is neither None nor a `LossScaleManager` instance.
  """
  if value is None or isinstance(value, base.LossScaleManager):
    return value
  if isinstance(value, type) and issubclass(value, base.LossScaleManager):
    hint = f" Call it to create one ({value.__name__}(...))."
  elif isinstance(value, str) and value == "dynamic":
    hint = " Pass managers.DynamicLossScale(), which 'dynamic' stands for."
  elif isinstance(value, tf.compat.v1.mixed_precision.LossScale):
    hint = " Convert TensorFlow's loss scale first: managers.get(...)."
  else:
    hint = ""
  raise TypeError(
      "`keep_state_of` must be None or a managers.LossScaleManager instance "
      f"(the float16 run's manager), got {validation.describe(value)}.{hint}")


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
  keeps working). Alone it has no state and nothing to checkpoint.

  A run that moves between float16 and bfloat16 (or float32) passes the
  float16 run's manager as `keep_state_of`. Its state variables then exist
  in this graph under that manager's names (`loss_scale`, `good_steps`,
  `bad_steps` for contrib's), made when the optimizer builds its step if the
  manager did not make them in its constructor. They are saved and restored
  with the rest (by a `Saver`, under the optimizer's `loss_scale` by
  `tf.train.Checkpoint`), and the step never reads nor updates them: it is
  the step of `NoLossScale()`, with a scale of 1. So a float16 checkpoint
  restores here with no unexpected key, a checkpoint written here restores
  into float16 with no missing key, and the float16 run goes on from the
  scale it had. A stateless manager (a fixed scale) has nothing to keep: it
  is accepted and keeps nothing. A `NoLossScale` given keeps what it keeps.

  Example:

  ```python
  opt = mp_optimizer.LossScaleOptimizer(
      tf.compat.v1.train.AdamOptimizer(1e-3), managers.NoLossScale())
  # Reading and writing the float16 run's checkpoints:
  float16_manager = managers.ExponentialUpdateLossScaleManager(2**15, 2000)
  opt = mp_optimizer.LossScaleOptimizer(
      tf.compat.v1.train.AdamOptimizer(1e-3),
      managers.NoLossScale(keep_state_of=float16_manager))
  ```

  Args:
    keep_state_of: Keyword-only: None, or a `managers.LossScaleManager`
      whose state variables this graph keeps, untouched.

  Raises:
    TypeError: If `keep_state_of` is neither None nor a manager instance.
  """

  # Read by the optimizer when it builds the graph: no multiply by S and no
  # unscale, and no check that gradients saw S (there is none).
  scales_loss = False

  def __init__(self, *, keep_state_of: Optional[base.LossScaleManager] = (
      UnscaledSettings.keep_state_of)):
    kept = _check_kept(keep_state_of)
    super().__init__(1.0)
    self._settings = UnscaledSettings(keep_state_of=kept)
    if isinstance(kept, NoLossScale):
      kept = kept._kept  # pylint: disable=protected-access
    # A fixed scale has no state to keep.
    self._kept = None if isinstance(kept, fixed.FixedLossScaleManager) else kept

  keep_state_of = base.setting("keep_state_of")

  @property
  def loss_scale_value(self) -> float:
    """The scale: 1.0."""
    return 1.0

  @property
  def skips_nonfinite_steps(self) -> bool:
    """True: a step with a NaN/Inf gradient is skipped."""
    return True

  @property
  def scale_floor(self) -> float:
    """The least scale: 1.0, the only one."""
    return 1.0

  def get_loss_scale(self) -> tf.Tensor:
    """Returns a float32 constant 1 (one per graph), never a kept variable.

    The kept state is made first, so its variables get their manager's
    names rather than a name the constant took.
    """
    self._keep_state()
    return super().get_loss_scale()

  def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
    """Returns a no-op: no scale, and the kept state is left as it is."""
    self._keep_state()
    return super().update_loss_scale(finite_grads)

  def variables(self) -> List[tf.Variable]:
    """The kept manager's variables in the current graph (none without)."""
    return [] if self._kept is None else self._kept.variables()

  def get_config(self) -> Dict[str, Any]:
    """The constructor's arguments that differ from their defaults."""
    return base.non_default(self._settings, ["keep_state_of"])

  def __repr__(self) -> str:
    return base.call_repr(type(self).__name__, keywords=self.get_config())

  def _keep_state(self) -> None:
    """Makes the kept manager's state in this graph (if it has not yet)
    and checkpoints it under this manager, by its names there."""
    kept = self._kept
    if kept is None:
      return
    if not kept.variables():  # Made on first use: ask for the scale once.
      kept.get_loss_scale()
    for name, child in tf.train.TrackableView(kept).children(kept).items():
      tracking.track(self, child, name)
