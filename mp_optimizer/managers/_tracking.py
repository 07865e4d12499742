"""The one place that touches TensorFlow's object-checkpoint machinery.

`tf.train.Checkpoint` saves an object's variables only if the object is a
`Trackable` and declares them as named dependencies. TensorFlow has no public
API for a class to declare a dependency on an object it did not get through
attribute assignment; TF's own `MixedPrecisionLossScaleOptimizer` uses
`Trackable._track_trackable`. We use the same method, reached only through
`tf.__internal__.tracking.Trackable` (no `tensorflow.python` import), and only
here. Checked on TensorFlow 2.15 and 2.21.

TensorFlow's object-checkpoint writer also decides who owns slot variables by
looking for `get_slot_names` in `dir(obj)` of every tracked object, and
refuses a slot reported by two objects. `hide_slot_owner_marker` lets a
wrapper that delegates `get_slot` to the optimizer it tracks leave ownership
with that optimizer.
"""

from typing import Iterable, List

import tensorflow as tf

_SLOT_OWNER_MARKER = "get_slot_names"

Trackable = tf.__internal__.tracking.Trackable


def track(owner: Trackable, child: Trackable, name: str) -> None:
  """Makes `child` part of `owner`'s checkpoint under `name`.

  `overwrite=True` lets a manager that is used in a new graph point the name at
  that graph's variable: the newest graph is the one being checkpointed. A
  restore that was requested before the child existed is applied now.
  """
  owner._track_trackable(child, name=name, overwrite=True)  # pylint: disable=protected-access


def hide_slot_owner_marker(names: Iterable[str]) -> List[str]:
  """Returns `names` (a `dir()` listing) without `get_slot_names`.

  For a wrapper's `__dir__`: TF's checkpoint writer then treats only the
  wrapped optimizer as the owner of its slots, and keys them under the
  wrapper's `base_optimizer` dependency, as TF's built-in wrapper does.
  Calling `wrapper.get_slot_names()` still works.
  """
  return [name for name in names if name != _SLOT_OWNER_MARKER]
