"""`managers.get`: what TF's `MixedPrecisionLossScaleOptimizer` accepts, as ours.

TF's optimizer takes "dynamic", a number, or one of its own loss-scale
objects; each becomes the matching face of this package's managers here.
"""

import numbers
from typing import Any

import tensorflow as tf

from mp_optimizer._internal import per_graph
from mp_optimizer._internal import validation
from mp_optimizer.managers import base
from mp_optimizer.managers.dynamic_loss_scale import DynamicLossScale
from mp_optimizer.managers.fixed_loss_scale import FixedLossScale


_ACCEPTED = ("'dynamic', a Python int or float >= 1, a managers.LossScale or "
             "managers.LossScaleManager, or a "
             "tf.compat.v1.mixed_precision.FixedLossScale/DynamicLossScale")


def get(identifier: Any) -> base.LossScaleManager:
  """Turns anything TF's `MixedPrecisionLossScaleOptimizer` accepts into ours.

  Args:
    identifier: "dynamic" (a default `DynamicLossScale`), a Python int or
      float (a `FixedLossScale`), any `LossScaleManager` (returned as is), or
      one of TensorFlow's own `FixedLossScale`/`DynamicLossScale` objects
      (rebuilt from their `get_config()`; the variables a TF `DynamicLossScale`
      already made in a graph become ours there, so checkpoint names do not
      change).

  Returns:
    A `LossScaleManager`.

  Raises:
    ValueError: For None, a bool, another string or type, or a number out of
      range: the class TF's optimizer raises for what it cannot use.
  """
  if isinstance(identifier, base.LossScaleManager):
    return identifier
  if identifier is None:  # TF's own words first, then what to pass.
    raise ValueError(f"loss_scale cannot be None: `loss_scale` must be "
                     f"{_ACCEPTED}. Pass 'dynamic' for TensorFlow's default "
                     "dynamic scale.")
  if isinstance(identifier, str):
    if identifier == "dynamic":
      return DynamicLossScale()
    raise ValueError(f"`loss_scale` must be {_ACCEPTED}; got the string "
                     f"{identifier!r}. Did you mean 'dynamic'?")
  if isinstance(identifier, (int, float)) and not isinstance(identifier, bool):
    validation.check_at_least("loss_scale", identifier, 1.0)
    return FixedLossScale(identifier)
  tf_mp = tf.compat.v1.mixed_precision
  if isinstance(identifier, tf_mp.FixedLossScale):
    return FixedLossScale(**identifier.get_config())
  if isinstance(identifier, tf_mp.DynamicLossScale):
    # TF's object made its variables when it was built; keep them (and their
    # checkpoint names) rather than making `current_loss_scale_1` beside them.
    with per_graph.deferred_state():
      converted = DynamicLossScale(**identifier.get_config())
    converted._adopt_state(  # pylint: disable=protected-access
        tf.train.TrackableView(identifier).children(identifier))
    return converted
  hint = (" A bool is not a loss scale." if isinstance(identifier, bool) else
          " NumPy numbers: pass float(x)." if isinstance(identifier, numbers.Real)
          else "")
  raise ValueError(f"`loss_scale` must be {_ACCEPTED}; got "
                   f"{validation.describe(identifier)}.{hint}")
