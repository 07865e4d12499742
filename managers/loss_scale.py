"""TF2's `LossScale` surface, as faces of this package's managers.

`FixedLossScale` is `FixedLossScaleManager` and `DynamicLossScale` is
`ExponentialUpdateLossScaleManager` with TF's names and settings: there is one
implementation of each policy, reachable through either API.
"""

import abc
import inspect
from typing import Any, Dict, Optional, Tuple, Union

import tensorflow as tf

from mp_optimizer._internal import validation
from mp_optimizer.managers import base
from mp_optimizer.managers import exponential
from mp_optimizer.managers import finite
from mp_optimizer.managers import fixed


class LossScale(base.LossScaleManager):
  """The interface of `tf.compat.v1.mixed_precision.LossScale`.

  `scale()` (i.e. `__call__`) returns the current scale; `update(grads)` checks
  the gradients and returns `(update_op, should_apply_gradients)`. Both are
  written once here in terms of the `LossScaleManager` methods, so a subclass
  implements the policy only once.
  """

  def __call__(self) -> tf.Tensor:
    """Returns the current loss scale as a float32 scalar tensor.

    A `tf.Tensor`, as TF's: a read of the scale variable made here, so the
    caller's control dependencies order it as they ordered TF's (a fixed
    scale's per-graph constant for `FixedLossScale`). Once the graph is
    finalized (in a hook), when no op can be added, the read the variable
    was made with: it too gives the current scale when run.
    `get_loss_scale()` still returns the variable itself, as contrib's did.
    """
    scale = self.get_loss_scale()
    if isinstance(scale, tf.Tensor):
      return scale
    graph = tf.compat.v1.get_default_graph()
    if graph.finalized:
      return graph.as_graph_element(scale)
    return tf.convert_to_tensor(scale)

  def update(self, grads) -> Tuple[Union[tf.Tensor, tf.Operation],
                                    Union[bool, tf.Tensor]]:
    """Checks `grads` and returns `(update_op, should_apply_gradients)`.

    The types are TF's: for a scale that checks the gradients, `update_op`
    is a scalar bool tensor that runs the update when evaluated (TF's is the
    output of a `tf.cond`), so `tf.identity(update_op)`,
    `tf.group(update_op)` and `sess.run(update_op)` all work; its value is
    the finite flag (TF's value carries no meaning). A fixed scale with
    `skip_nonfinite_steps=False` returns `(tf.no_op(), True)`, exactly as
    TF's `FixedLossScale` does.

    Args:
      grads: A nested structure of unscaled gradients; None entries are
        ignored. Under `tf.distribute`, call this in cross-replica context:
        every replica then gets the same answer.

    Returns:
      The update (see above), and a scalar bool tensor that is False when
      the step must be skipped (Python True for a scale that applies every
      step).
    """
    if not self.skips_nonfinite_steps:
      return tf.no_op(), True
    all_finite = finite.all_finite_in_sync(tf.nest.flatten(grads))
    with tf.control_dependencies([self.update_loss_scale(all_finite)]):
      update = tf.identity(all_finite, name="update_loss_scale")
    return update, all_finite

  @abc.abstractmethod
  def get_config(self) -> Dict[str, Any]:
    """Returns the constructor arguments, for `from_config`."""

  @classmethod
  def from_config(cls, config: Dict[str, Any]) -> "LossScale":
    """Builds a loss scale from `get_config()` output."""
    return cls(**config)


class FixedLossScale(LossScale, fixed.FixedLossScaleManager):
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

  def __init__(self, loss_scale_value: float, *,
               skip_nonfinite_steps: bool = True):
    try:
      validation.check_at_least("loss_scale_value", loss_scale_value, 1.0)
    except TypeError as error:  # TF raises ValueError for a non-number.
      raise ValueError(str(error)) from None
    super().__init__(loss_scale_value, skip_nonfinite_steps=skip_nonfinite_steps)

  def get_config(self) -> Dict[str, Any]:
    """Returns TF's config keys, plus `skip_nonfinite_steps` only if False.

    A default config is exactly what TF's `FixedLossScale` writes and reads,
    so configs travel both ways between the two classes.
    """
    config = {"loss_scale_value": self._loss_scale}
    if not self.skips_nonfinite_steps:
      config["skip_nonfinite_steps"] = False
    return config


class _Default(int):
  """An int default that `_alias` can tell apart from the same number passed.

  A passed 32768 is a plain `int`; only the signature's default is a
  `_Default`, so passing a canonical argument equal to its default together
  with its alias is still caught.
  """


# The contrib face's keyword defaults, stated once in its signature.
_EXPONENTIAL_DEFAULTS = {
    name: param.default for name, param in inspect.signature(
        exponential.ExponentialUpdateLossScaleManager.__init__).parameters.items()}


class DynamicLossScale(LossScale, exponential.ExponentialUpdateLossScaleManager):
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

  _FACE = exponential.Face(
      "current_loss_scale", "good_steps", None, tf.int64, True,
      {"init_loss_scale": "initial_loss_scale",
       "incr_every_n_steps": "increment_period",
       "incr_ratio": "multiplier"})

  def __init__(self,
               initial_loss_scale: float = _Default(2**15),
               increment_period: int = _Default(2000),
               multiplier: float = 2.0,
               *,
               min_loss_scale: float = _EXPONENTIAL_DEFAULTS["min_loss_scale"],
               max_loss_scale: Optional[float] = _EXPONENTIAL_DEFAULTS[
                   "max_loss_scale"],
               fail_at_floor_after: Optional[int] = None,
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
    multiplier = validation.check_greater("multiplier", multiplier, 1.0)
    super().__init__(initial_loss_scale, increment_period,
                     decr_every_n_nan_or_inf=1, incr_ratio=multiplier,
                     decr_ratio=1.0 / multiplier, min_loss_scale=min_loss_scale,
                     max_loss_scale=max_loss_scale,
                     fail_at_floor_after=fail_at_floor_after)

  initial_loss_scale = property(lambda self: self._init)
  increment_period = property(lambda self: self._policy.incr_every)
  multiplier = property(lambda self: self._policy.incr_ratio)

  def get_config(self) -> Dict[str, Any]:
    """Returns TF's three config keys, plus our extras only if not default.

    A config with default extras is exactly what TF's `DynamicLossScale`
    writes and reads, so configs travel both ways between the two classes.
    """
    return {"initial_loss_scale": self._init,
            "increment_period": self._policy.incr_every,
            "multiplier": self._policy.incr_ratio, **self._extras()}

  def __repr__(self) -> str:
    return (f"DynamicLossScale(initial_loss_scale={self._init!r}, "
            f"increment_period={self._policy.incr_every!r}, "
            f"multiplier={self._policy.incr_ratio!r}{self._extras_repr()})")


def _alias(name: str, value: Any, alias: str, alias_value: Any) -> Any:
  """`value` or `alias_value`, whichever was passed; both is an error."""
  if alias_value is None:
    return int(value) if isinstance(value, _Default) else value
  if not isinstance(value, _Default):
    raise ValueError(f"Pass `{name}` or its alias `{alias}`, not both; got "
                     f"{name}={value!r} and {alias}={alias_value!r}.")
  return alias_value
