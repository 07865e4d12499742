"""Loss-scale managers: what the loss scale is, and how it changes.

Two surfaces over one implementation of each policy:

* contrib's: `LossScaleManager`, `FixedLossScaleManager`,
  `ExponentialUpdateLossScaleManager` (`get_loss_scale`, `update_loss_scale`),
  `AmaxHistoryLossScaleManager`, which sets the scale from the gradients'
  magnitude, and `NoLossScale`, the bfloat16 mode (no scale, steps still
  checked; `keep_state_of=` keeps a float16 manager's state for its
  checkpoints);
* TF2's: `LossScale`, `FixedLossScale`, `DynamicLossScale` (`__call__`,
  `update`, `get_config`), and `get` to convert what TF's optimizer accepts;
* the finite check both use: `all_finite`, `all_finite_in_sync`.

The code lives in the repository's top-level `managers/` folder and is
installed as `mp_optimizer.managers`: import it as
`from mp_optimizer import managers`. It imports only
`mp_optimizer._internal`, never the optimizer.
"""

from mp_optimizer.managers.amax import AmaxHistoryLossScaleManager
from mp_optimizer.managers.base import LossScaleManager
from mp_optimizer.managers.dynamic_loss_scale import DynamicLossScale
from mp_optimizer.managers.exponential import ExponentialUpdateLossScaleManager
from mp_optimizer.managers.finite import all_finite
from mp_optimizer.managers.finite import all_finite_in_sync
from mp_optimizer.managers.fixed import FixedLossScaleManager
from mp_optimizer.managers.fixed_loss_scale import FixedLossScale
from mp_optimizer.managers.loss_scale import LossScale
from mp_optimizer.managers.unscaled import NoLossScale
from mp_optimizer.managers.conversion import get

__all__ = [
    "AmaxHistoryLossScaleManager",
    "DynamicLossScale",
    "ExponentialUpdateLossScaleManager",
    "FixedLossScale",
    "FixedLossScaleManager",
    "LossScale",
    "LossScaleManager",
    "NoLossScale",
    "all_finite",
    "all_finite_in_sync",
    "get",
]
