"""One optimizer's skip count, and the verdict a step in control flow stores.

Both are int64 variables in no collection (`per_graph.VariableSpec`,
`checkpointed=False`): no Saver writes or expects them, no initializer resets
them, and the first write initializes them.
"""

import tensorflow as tf

from mp_optimizer._internal import per_graph
from mp_optimizer._internal import tensors

_API = "LossScaleOptimizer.apply_gradients"


class SkipCounter:
  """The int64 `skipped_steps` variable of one optimizer, per graph.

  Only a skipped step touches it (from the untaken side of the step's gate),
  so a finite step pays nothing for the count. The increment holds the
  counter's mutex, so skips that run at once (two train ops, several
  threads) are all counted, also before anything initialized the counter.
  """

  def __init__(self, owner: tf.compat.v1.train.Optimizer):
    self._owner = owner
    self._state = per_graph.PerGraphVariables(owner, [per_graph.VariableSpec(
        "skipped_steps", tf.int64, 0, checkpointed=False)])
    # Made only for a step inside control flow: 1 applied, 0 skipped.
    self._latest = per_graph.PerGraphVariables(owner, [per_graph.VariableSpec(
        "last_step_applied", tf.int64, 0, checkpointed=False)])

  @property
  def owner(self) -> tf.compat.v1.train.Optimizer:
    """The optimizer whose skipped steps this counts."""
    return self._owner

  def _variable(self) -> tf.Variable:
    return self._state.get(_API)["skipped_steps"]

  def _increment(self) -> tf.Operation:
    counter = self._variable()
    return counter.assign(tensors.read_or_zero(counter) + 1, read_value=False)

  def add_one(self) -> tf.Operation:
    """Returns an op that adds one skipped step (initializing if needed)."""
    return self._state.mutex(_API).run(self._increment)

  def total(self) -> tf.Tensor:
    """Returns the count, read when fetched (0 before any skip).

    The read is made in the outermost graph, so it can be fetched even when
    the step is built inside control flow.
    """
    with tf.init_scope():
      return tf.identity(tensors.read_or_zero(self._variable()),
                         name="skipped_steps_total")

  def _latest_variable(self) -> tf.Variable:
    return self._latest.get(_API)["last_step_applied"]

  def write_latest(self, step_applied: tf.Tensor) -> tf.Operation:
    """Returns an op that stores this step's verdict for outside readers."""
    return self._latest_variable().assign(
        tf.cast(step_applied, tf.int64), read_value=False)

  def read_latest(self) -> tf.Tensor:
    """Returns the newest stored verdict as a bool, read in the outermost graph."""
    with tf.init_scope():
      return tf.equal(tensors.read_or_zero(self._latest_variable()), 1,
                      name="last_step_applied")
