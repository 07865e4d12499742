"""`broadcast_global_variables` and `BroadcastGlobalVariablesHook`.

The variables of one dtype travel together: flattened into one buffer, one
broadcast, split back and assigned.
"""

from typing import Dict, List

import tensorflow as tf

from mp_optimizer._internal import tensors
from mp_optimizer.horovod import collectives
from mp_optimizer.horovod import ops


def broadcast_variables(variables: List[tf.Variable],
                        root_rank: int) -> tf.Operation:
  """An op that sets `variables` on every rank to `root_rank`'s values.

  Raises:
    RuntimeError: Under eager execution.
    TypeError, ValueError: If `root_rank` is not a rank.
  """
  tensors.require_graph("hvd.broadcast_variables")
  ops.check_root_rank(root_rank)
  by_dtype: Dict[tf.DType, List[tf.Variable]] = {}
  for variable in variables:
    by_dtype.setdefault(variable.dtype.base_dtype, []).append(variable)
  assigns = []
  with tf.name_scope("HorovodBroadcastVariables"):
    for group in by_dtype.values():
      buffer = collectives.broadcast(
          tf.concat([tf.reshape(v.read_value(), [-1]) for v in group], 0),
          root_rank)
      pieces = tf.split(buffer, [v.shape.num_elements() for v in group])
      assigns += [v.assign(tf.reshape(p, v.shape), read_value=False)
                  for v, p in zip(group, pieces)]
  return tf.group(*assigns)


def broadcast_global_variables(root_rank: int) -> tf.Operation:
  """An op that sets every global variable to `root_rank`'s value.

  Example:

  ```python
  # fragment: part of a program, not runnable on its own
  sess.run(tf.compat.v1.global_variables_initializer())
  sess.run(hvd.broadcast_global_variables(0))
  ```

  Raises:
    RuntimeError: Under eager execution (as Horovod).
    TypeError, ValueError: If `root_rank` is not a rank.
  """
  return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
  """Broadcasts every global variable from `root_rank` once the session exists.

  So every rank starts from the same weights, whether initialized or restored
  from a checkpoint.

  Example:

  ```python
  # fragment: part of a program, not runnable on its own
  hooks = [hvd.BroadcastGlobalVariablesHook(0)]
  with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as sess:
      ...
  ```

  Args:
    root_rank: The rank whose values every rank takes.
    device: Device of the broadcast ops ("" lets TensorFlow place them).
  """

  def __init__(self, root_rank: int, device: str = ""):
    super().__init__()
    self.root_rank = root_rank
    self.device = device
    self.bcast_op = None

  def begin(self) -> None:
    """Builds the broadcast in the graph being finalized."""
    if self.bcast_op is None or (
        self.bcast_op.graph is not tf.compat.v1.get_default_graph()):
      with tf.device(self.device):
        self.bcast_op = broadcast_global_variables(self.root_rank)

  def after_create_session(self, session: tf.compat.v1.Session,
                           coord: tf.train.Coordinator) -> None:  # pylint: disable=unused-argument
    """Runs the broadcast once, before the first step."""
    session.run(self.bcast_op)
