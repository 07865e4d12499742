"""The one place that touches TensorFlow's object-checkpoint machinery.

`tf.train.Checkpoint` saves an object's variables only if the object is a
`Trackable` and declares them as named dependencies. TensorFlow has no public
API for a class to declare a dependency on an object it did not get through
attribute assignment; TF's own `MixedPrecisionLossScaleOptimizer` uses
`Trackable._track_trackable`. We use the same method, reached only through
`tf.__internal__.tracking.Trackable` (no `tensorflow.python` import), and only
here. Checked on TensorFlow 2.15 and 2.21.
"""

import tensorflow as tf

Trackable = tf.__internal__.tracking.Trackable


def track(owner: Trackable, child: Trackable, name: str) -> None:
  """Makes `child` part of `owner`'s checkpoint under `name`.

  `overwrite=True` lets a manager that is used in a new graph point the name at
  that graph's variable: the newest graph is the one being checkpointed. A
  restore that was requested before the child existed is applied now.
  """
  owner._track_trackable(child, name=name, overwrite=True)  # pylint: disable=protected-access
