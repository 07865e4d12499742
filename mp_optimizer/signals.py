"""Skip signals: was this step applied, how many were skipped, what is S?

`LossScaleOptimizer.apply_gradients` publishes three tensors in graph
collections, so code that did not build the optimizer (an Estimator hook, a
`MonitoredTrainingSession` loop) can still find them:

* `step_applied()`: scalar bool, True when this step's update was applied.
  Fetch it in the same `sess.run` as the train op.
* `skipped_steps()`: scalar int64, steps skipped since the session started.
  It is a LOCAL variable, not a GLOBAL one: checkpoints written before it
  existed (contrib's, TF's) restore with a plain Saver, and it is not saved.
  `global_step` already counts the applied steps across restarts. Like
  `global_step`, when fetched in the same `sess.run` as the train op it may
  show the count before or after that step.
* `loss_scale()`: the scale the step used.

`add_summaries()` writes the scale and the skip count to TensorBoard.

A step built inside control flow (`apply_gradients` in a `tf.cond` branch, as
legacy gradient accumulation does, or in a `tf.while_loop` body; v1 or v2
control flow) has tensors nobody outside can fetch. Its signals are then reads
made in the outermost graph when fetched:

* `step_applied()`: the verdict of the newest step that ran: True if it was
  applied, False if it was skipped, and False before any step ran. A run whose
  branch was not taken (or whose loop ran no iteration) leaves it unchanged.
  With several iterations in one run, the last one counts.
* `skipped_steps()`: the same counter as above.
* `loss_scale()`: the manager's current scale, the one the next step uses.

None of the three is ordered against the step (TensorFlow gives an op outside
a `tf.cond` no way to wait for one inside it): fetch them in a `sess.run`
after the train op's, as `LossScaleHook` does. In the train op's own run they
may show the state before or after its step.
"""

from typing import Callable, List, Optional

import tensorflow as tf

from mp_optimizer.managers import _graph

STEP_APPLIED = "mp_optimizer_step_applied"
SKIPPED_STEPS = "mp_optimizer_skipped_steps"
LOSS_SCALE = "mp_optimizer_loss_scale"


class SkipCounter:
  """The LOCAL int64 `skipped_steps` variable of one optimizer, per graph.

  Only a skipped step touches it (from the untaken side of the step's
  gate), so a finite step pays nothing for the count.
  """

  def __init__(self, owner):
    self._state = _graph.PerGraphVariables(owner, [_graph.VariableSpec(
        "skipped_steps", tf.int64, 0, checkpointed=False)])
    # Made only for a step inside control flow: 1 applied, 0 skipped.
    self._latest = _graph.PerGraphVariables(owner, [_graph.VariableSpec(
        "last_step_applied", tf.int64, 0, checkpointed=False)])

  def _variable(self) -> tf.Variable:
    return self._state.get("LossScaleOptimizer.apply_gradients")[
        "skipped_steps"]

  def add_one(self) -> tf.Operation:
    """Returns an op that adds one skipped step (initializing if needed)."""
    counter = self._variable()
    return counter.assign(_graph.read_or_zero(counter) + 1, read_value=False)

  def total(self) -> tf.Tensor:
    """Returns the count, read when fetched (0 before any skip).

    The read is made in the outermost graph, so it can be fetched even when
    the step is built inside control flow.
    """
    with tf.init_scope():
      return tf.identity(_graph.read_or_zero(self._variable()),
                         name="skipped_steps_total")

  def _latest_variable(self) -> tf.Variable:
    return self._latest.get("LossScaleOptimizer.apply_gradients")[
        "last_step_applied"]

  def write_latest(self, step_applied: tf.Tensor) -> tf.Operation:
    """Returns an op that stores this step's verdict for outside readers."""
    return self._latest_variable().assign(
        tf.cast(step_applied, tf.int64), read_value=False)

  def read_latest(self) -> tf.Tensor:
    """Returns the newest stored verdict as a bool, read in the outermost graph."""
    with tf.init_scope():
      return tf.equal(_graph.read_or_zero(self._latest_variable()), 1,
                      name="last_step_applied")


def _inside_control_flow(tensor: tf.Tensor) -> bool:
  """True if `tensor` cannot be fetched from the outermost graph.

  v2 control flow builds branches and loop bodies as function graphs; v1
  control flow builds them in the same graph but marks their ops unfetchable.
  """
  with tf.init_scope():
    outer = tf.compat.v1.get_default_graph()
  return tensor.graph is not outer or not outer.is_fetchable(tensor.op)


def record(step_applied: tf.Tensor, skipped: tf.Tensor, scale: tf.Tensor,
           counter: SkipCounter,
           read_scale: Callable[[], tf.Tensor]) -> List[tf.Operation]:
  """Publishes one train op's signals in the outermost graph's collections.

  Outside control flow the step's own tensors are published. Inside it (see
  the module docstring) they cannot be fetched, so reads made in the
  outermost graph are published instead, and the step must also store its
  verdict.

  Args:
    step_applied: The step's bool verdict.
    skipped: The skip count (`counter.total()`, or a constant 0 when the
      manager never skips).
    scale: The scale the step used.
    counter: The optimizer's `SkipCounter`.
    read_scale: Returns a read of the current scale (the manager's
      `get_loss_scale`).

  Returns:
    Ops to group into the train op: none outside control flow, else the one
    that stores the verdict.
  """
  updates = []
  if _inside_control_flow(step_applied):
    updates.append(counter.write_latest(step_applied))
    step_applied = counter.read_latest()
    if _inside_control_flow(skipped):  # A constant 0: no step is skipped.
      skipped = counter.total()
    with tf.init_scope():
      scale = tf.identity(read_scale(), name="current_loss_scale")
  with tf.init_scope():
    tf.compat.v1.add_to_collection(STEP_APPLIED, step_applied)
    tf.compat.v1.add_to_collection(SKIPPED_STEPS, skipped)
    tf.compat.v1.add_to_collection(LOSS_SCALE, scale)
  return updates


def _latest(key: str, graph: Optional[tf.Graph], api: str) -> tf.Tensor:
  graph = graph or _graph.require_graph(api)
  found = graph.get_collection(key)
  if not found:
    raise ValueError(
        f"This graph has no `{key}` tensor yet: build the train op with "
        "LossScaleOptimizer.apply_gradients (or minimize) in this graph "
        "first.")
  return found[-1]


def step_applied(graph: Optional[tf.Graph] = None) -> tf.Tensor:
  """Returns the bool tensor: was the newest train op's update applied?

  Args:
    graph: The graph to look in; default the current default graph.

  Raises:
    RuntimeError: Under eager execution, when no `graph` is given.
    ValueError: If no `LossScaleOptimizer` train op was built in it.
  """
  return _latest(STEP_APPLIED, graph, "mp_optimizer.step_applied")


def skipped_steps(graph: Optional[tf.Graph] = None) -> tf.Tensor:
  """Returns the int64 count of skipped steps since the session started.

  Raises:
    RuntimeError: Under eager execution, when no `graph` is given.
    ValueError: If no `LossScaleOptimizer` train op was built in the graph.
  """
  return _latest(SKIPPED_STEPS, graph, "mp_optimizer.skipped_steps")


def loss_scale(graph: Optional[tf.Graph] = None) -> tf.Tensor:
  """Returns the loss scale the newest train op used.

  Raises:
    RuntimeError: Under eager execution, when no `graph` is given.
    ValueError: If no `LossScaleOptimizer` train op was built in the graph.
  """
  return _latest(LOSS_SCALE, graph, "mp_optimizer.signals.loss_scale")


def add_summaries(graph: Optional[tf.Graph] = None) -> tf.Tensor:
  """Adds the scalar summaries `mp_optimizer/loss_scale` and `.../skipped_steps`.

  They join the SUMMARIES collection, which Estimator,
  `MonitoredTrainingSession(summary_dir=...)` and `tf.compat.v1.summary.
  merge_all()` write to TensorBoard.

  Returns:
    The merged summary of the two.

  Raises:
    RuntimeError: Under eager execution, when no `graph` is given.
    ValueError: If no `LossScaleOptimizer` train op was built in the graph.
  """
  graph = graph or _graph.require_graph("mp_optimizer.add_summaries")
  with graph.as_default(), tf.name_scope("mp_optimizer"):
    return tf.compat.v1.summary.merge([
        tf.compat.v1.summary.scalar("loss_scale", loss_scale(graph)),
        tf.compat.v1.summary.scalar("skipped_steps", skipped_steps(graph))])
