"""The one place that adds a control input to an op that already exists.

A gate (`mp_optimizer.gating`) must make every op of its taken side depend
on the side's pivot, including ops an inner optimizer built where the
caller's control dependencies do not reach (`tf.control_dependencies(None)`,
`tf.init_scope`). Those ops exist by the time the gate can see them, and
TensorFlow has no public API to give an existing op a new input. TF's own
v1 `tf.cond` does this for input-less ops of a branch (its `CondContext`
calls `Operation._add_control_input` with the branch pivot); we call the
same method, and only here. Checked on TensorFlow 2.15 and 2.21.
"""

import tensorflow as tf


def add_control_input(op: tf.Operation, control: tf.Operation) -> None:
  """Makes `op` run only after `control` (and be dead when it is)."""
  op._add_control_input(control)  # pylint: disable=protected-access
