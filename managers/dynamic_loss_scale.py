"""`DynamicLossScale`: TF's dynamic loss scale, a face of the exponential one.

It validates TF's arguments (and their Keras aliases) into
`dynamic_scale.DynamicLossScaleSettings` and holds the one dynamic scale, a
`dynamic_scale.StateMachine` with TF's face (`dynamic_scale.TF_FACE`: TF's
state names), as `ExponentialUpdateLossScaleManager` holds another.
"""

from typing import Any, Dict, List, Optional

import tensorflow as tf

from mp_optimizer._internal import validation
from mp_optimizer.managers import base
from mp_optimizer.managers import dynamic_scale
from mp_optimizer.managers import exponential
from mp_optimizer.managers import loss_scale


# The keyword-only settings: get_config shows each only when not its default.
_TF_KEYWORD_ONLY = ("min_loss_scale", "max_loss_scale", "fail_at_floor_after")
# Its class attributes are the defaults.
_DYNAMIC = dynamic_scale.DynamicLossScaleSettings


class DynamicLossScale(loss_scale.LossScale):
  """TF's `DynamicLossScale`: the exponential manager with TF's settings.

  It is `ExponentialUpdateLossScaleManager(initial_loss_scale,
  increment_period, decr_every_n_nan_or_inf=1, incr_ratio=multiplier,
  decr_ratio=1/multiplier)`, with the shrink computed as `scale / multiplier`
  and the state stored as TF stores it: float32 `current_loss_scale` and int64
  `good_steps` (there is no `bad_steps`: with one overflow per shrink it is
  always 0), made when and where `ExponentialUpdateLossScaleManager` makes
  its state (in the constructor, under the current name scope, when a graph
  is the default, as TF does). Numbers match TF's built-in bit for bit.

  Example:

  ```python
  loss_scale = managers.DynamicLossScale(initial_loss_scale=2**15,
                                         increment_period=2000)
  ```

  Args:
    initial_loss_scale: Starting scale (Keras alias `initial_scale`).
    increment_period: Finite steps in a row before the scale grows, a whole
      number (`2000.0` is taken as 2000, as TF does) (Keras alias
      `dynamic_growth_steps`).
    multiplier: Growth factor, and divisor on overflow; > 1.
    min_loss_scale: Keyword-only floor, from 2**-126 to 2**126 (default 1),
      as for `ExponentialUpdateLossScaleManager`.
    max_loss_scale: Keyword-only ceiling (default: that of
      `ExponentialUpdateLossScaleManager`).
    fail_at_floor_after: Keyword-only; as for
      `ExponentialUpdateLossScaleManager`.
    initial_scale: Keyword-only alias of `initial_loss_scale`.
    dynamic_growth_steps: Keyword-only alias of `increment_period`.

  Raises:
    TypeError: For a wrong type (TF's class for None or a list), except:
    ValueError: for a string (TF's class for a string it cannot parse; numeric
      strings, which TF parsed, are refused too), a value out of range, a
      fractional `increment_period`, or an argument given under both of its
      names.
  """

  def __init__(
      self,
      initial_loss_scale: float = base.Unset(_DYNAMIC.initial_loss_scale),
      increment_period: int = base.Unset(_DYNAMIC.increment_period),
      multiplier: float = _DYNAMIC.multiplier, *,
      min_loss_scale: float = _DYNAMIC.min_loss_scale,
      max_loss_scale: Optional[float] = _DYNAMIC.max_loss_scale,
      fail_at_floor_after: Optional[int] = _DYNAMIC.fail_at_floor_after,
      initial_scale: Optional[float] = None,
      dynamic_growth_steps: Optional[int] = None):
    initial_loss_scale = _alias("initial_loss_scale", initial_loss_scale,
                                "initial_scale", initial_scale)
    increment_period = _alias("increment_period", increment_period,
                              "dynamic_growth_steps", dynamic_growth_steps)
    for name, value in (("initial_loss_scale", initial_loss_scale),
                        ("increment_period", increment_period),
                        ("multiplier", multiplier)):
      if isinstance(value, str):  # TF's float()/int() raise ValueError.
        raise ValueError(f"`{name}` must be a number, not a string; got "
                         f"{value!r}.")
    machine_settings = dynamic_scale.DynamicLossScaleSettings(
        initial_loss_scale, increment_period,
        validation.check_greater("multiplier", multiplier, 1.0),
        min_loss_scale=min_loss_scale, max_loss_scale=max_loss_scale,
        fail_at_floor_after=fail_at_floor_after
    ).as_exponential().checked(dynamic_scale.TF_NAMES)
    self._settings = dynamic_scale.DynamicLossScaleSettings.of(machine_settings)
    self._machine = dynamic_scale.StateMachine(self, machine_settings,
                                               dynamic_scale.TF_FACE)

  initial_loss_scale = base.setting("initial_loss_scale")
  increment_period = base.setting("increment_period")
  multiplier = base.setting("multiplier")
  min_loss_scale = base.setting("min_loss_scale")
  scale_floor = base.setting(
      "min_loss_scale", "The least scale: `min_loss_scale`, as a float.")
  max_loss_scale = base.setting("max_loss_scale")
  fail_at_floor_after = base.setting("fail_at_floor_after")
  # The exponential manager's names for the same scale.
  init_loss_scale = dynamic_scale.machine_setting("init_loss_scale")
  incr_every_n_steps = dynamic_scale.machine_setting("incr_every_n_steps")
  decr_every_n_nan_or_inf = dynamic_scale.machine_setting(
      "decr_every_n_nan_or_inf")
  incr_ratio = dynamic_scale.machine_setting("incr_ratio")
  decr_ratio = dynamic_scale.machine_setting("decr_ratio")
  hysteresis = dynamic_scale.machine_setting("hysteresis")

  @property
  def dynamic(self) -> bool:
    return True

  def get_loss_scale(self) -> tf.Variable:
    """Returns the current graph's float32 `current_loss_scale` variable."""
    return self._machine.scale()

  def variables(self) -> List[tf.Variable]:
    return self._machine.variables()

  def _adopt_state(self, variables: Dict[str, tf.Variable]) -> None:
    """Takes over existing state variables by name (see `managers.get`)."""
    self._machine.adopt(variables)

  def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
    """Returns the op that moves the state machine one step (see
    `ExponentialUpdateLossScaleManager.update_loss_scale`)."""
    return self._machine.update(finite_grads)

  def get_config(self) -> Dict[str, Any]:
    """Returns TF's three config keys, plus our extras only if not default.

    A config with default extras is exactly what TF's `DynamicLossScale`
    writes and reads, so configs travel both ways between the two classes.
    """
    settings = self._settings
    return {"initial_loss_scale": settings.initial_loss_scale,
            "increment_period": settings.increment_period,
            "multiplier": settings.multiplier,
            **base.non_default(settings, _TF_KEYWORD_ONLY)}

  def __repr__(self) -> str:
    return base.call_repr("DynamicLossScale", keywords=self.get_config())


# It has every attribute of the exponential manager (it is that scale, with
# TF's settings), so `isinstance` checks written for that class still pass.
exponential.ExponentialUpdateLossScaleManager.register(DynamicLossScale)


def _alias(name: str, value: Any, alias: str, alias_value: Any) -> Any:
  """`value` or `alias_value`, whichever was passed; both is an error."""
  if alias_value is None:
    return base.value_or_default(value)
  if not isinstance(value, base.Unset):
    raise ValueError(f"Pass `{name}` or its alias `{alias}`, not both; got "
                     f"{name}={value!r} and {alias}={alias_value!r}.")
  return alias_value
