"""`LossScaleManager`: the interface every loss scale in this project implements.

How a manager states its configuration (follow it in a new manager):

1. Its settings are one frozen dataclass (`fixed.FixedSettings`,
   `amax_rule.AmaxSettings`; the dynamic scale's two faces have theirs beside
   the object they share: `dynamic_scale.ExponentialSettings` and
   `dynamic_scale.DynamicLossScaleSettings`), one field per constructor
   argument, under the argument's name, with its default. That dataclass
   is the only place a default is written.
2. The constructor's defaults read the dataclass's class attributes
   (`incr_ratio: float = _SETTINGS.incr_ratio`), so `help()` shows the
   numbers. It validates every argument (messages with the value received)
   before it makes any graph state, and keeps the validated copy as
   `self._settings`.
3. Read-only properties are `setting("name")`. `__repr__` and `get_config`
   are built from `self._settings` with `call_repr` and `non_default` (an
   optional argument is shown only when it differs from its field's
   default). Nothing reads a signature (`inspect`) to find a default.
4. An argument with an alias (`initial_scale` for `initial_loss_scale`)
   defaults to an `Unset` marker in the signature, so "not passed" is told
   apart from "passed, equal to the default": both names passed is an
   error even then. `value_or_default` turns the marker into the
   dataclass's default.
5. A TF2 face (`managers.fixed_loss_scale`, `managers.dynamic_loss_scale`)
   has one base class, `LossScale` (`managers.loss_scale`). It
   holds the policy it shares with a contrib manager as an object
   (`fixed.FixedScale`, `dynamic_scale.StateMachine`) built from its settings,
   never through a second base class, and is registered as a virtual
   subclass of that contrib manager (`register`), whose attributes it has.
"""

import abc
import dataclasses
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

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


class Unset:
  """Default of an argument with an alias: "not passed", shown as its default.

  Only this object means "not passed", so a canonical argument passed equal
  to its default together with its alias is still refused. It is not a
  number and never reaches the settings: `value_or_default` replaces it
  with `default`, the settings dataclass's default it was made from.
  """

  def __init__(self, default: Any):
    self.default = default

  def __repr__(self) -> str:  # What help() shows as the default.
    return repr(self.default)


def value_or_default(value: Any) -> Any:
  """`value`, or the default an `Unset` marker stands for."""
  return value.default if isinstance(value, Unset) else value


def setting(name: str, doc: Optional[str] = None) -> property:
  """A read-only property: the manager's validated setting `name`."""
  return property(lambda self: getattr(self._settings, name), doc=doc)


def non_default(settings: Any, names: Iterable[str]) -> Dict[str, Any]:
  """The settings among `names` that differ from their dataclass default.

  Args:
    settings: A settings dataclass instance.
    names: Field names, in the order wanted.

  Returns:
    `{name: value}` for each named field whose value is not its default (a
    field with no default always counts as not default).
  """
  fields = {field.name: field for field in dataclasses.fields(settings)}
  return {name: getattr(settings, name) for name in names
          if getattr(settings, name) != fields[name].default}


def call_repr(name: str, positional: Sequence[Any] = (),
              keywords: Optional[Dict[str, Any]] = None) -> str:
  """The constructor call `name(p0, ..., k0=v0, ...)`, values as `repr`."""
  parts = [repr(value) for value in positional]
  parts += [f"{key}={value!r}" for key, value in (keywords or {}).items()]
  return f"{name}({', '.join(parts)})"


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

  @property
  def scale_floor(self) -> Optional[float]:
    """The least scale `get_loss_scale` gives, or None if not known.

    The optimizer reads this once, when it builds the graph. Where it
    guarantees that a finite 16-bit gradient stays finite times 1/S (S at
    least 2**-112 for float16, 1 for bfloat16), such gradients are checked
    on their own 16 bits; a scale found below that bound (2**-112 or 1,
    not this floor) when a step runs then counts as an overflow. With None
    the sums of the float32 products are checked.
    """
    return None

  def variables(self) -> List[tf.Variable]:
    """Returns the state variables of the current graph (none if stateless)."""
    return []
