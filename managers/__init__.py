"""Loss-scale managers: the public top-level name for `mp_optimizer.managers`.

`import managers` and `from mp_optimizer import managers` give the same
classes. The library itself imports only `mp_optimizer.managers`, so a user's
own folder named `managers` next to a script cannot break it; such code can
keep working by importing `from mp_optimizer import managers`.
"""

from mp_optimizer.managers import DynamicLossScale
from mp_optimizer.managers import ExponentialUpdateLossScaleManager
from mp_optimizer.managers import FixedLossScale
from mp_optimizer.managers import FixedLossScaleManager
from mp_optimizer.managers import LossScale
from mp_optimizer.managers import LossScaleManager
from mp_optimizer.managers import __all__
from mp_optimizer.managers import __version__
from mp_optimizer.managers import all_finite
from mp_optimizer.managers import all_finite_in_sync
from mp_optimizer.managers import get
