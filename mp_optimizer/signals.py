"""Skip signals: was this step applied, how many were skipped, what is S?

`LossScaleOptimizer.apply_gradients` publishes three tensors in graph
collections, under the optimizer's name, so code that did not build the
optimizer (an Estimator hook, a `MonitoredTrainingSession` loop) can still
find them. A graph may hold several optimizers (a GAN's D and G): each
reports under its name (`optimizer_names()`), and every reader takes
`optimizer=` (an optimizer or its name) to read one of them:

* `step_applied()`: scalar bool, True when the newest train op's update was
  applied. Fetch it in the same `sess.run` as the train op.
* `skipped_steps()`: scalar int64, steps skipped since the session started,
  the total over every optimizer unless `optimizer=` names one.
  Its variable is in no collection: a plain Saver neither saves nor expects
  it (checkpoints written before it existed, contrib's and TF's, restore),
  and no initializer resets it. It lives where the step's variables live:
  under a parameter server, like `global_step`, so every worker reads the
  cluster's count (a SyncReplicasOptimizer's skipped rounds). `global_step`
  already counts the applied steps across restarts. Like
  `global_step`, when fetched in the same `sess.run` as the train op it may
  show the count before or after that step.
* `loss_scale()`: the scale the step used.

`add_summaries()` writes the scale and the skip count to TensorBoard, per
optimizer when there are several.

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

import weakref
from typing import Callable, List, Optional, Union

import tensorflow as tf

from mp_optimizer.managers import _graph

STEP_APPLIED = "mp_optimizer_step_applied"
SKIPPED_STEPS = "mp_optimizer_skipped_steps"
LOSS_SCALE = "mp_optimizer_loss_scale"
# The name of the optimizer each entry of the three collections belongs to.
OPTIMIZER_NAME = "mp_optimizer_optimizer_name"

_COUNTERS = weakref.WeakKeyDictionary()  # optimizer -> its SkipCounter


class SkipCounter:
  """The int64 `skipped_steps` variable of one optimizer, per graph.

  Only a skipped step touches it (from the untaken side of the step's gate),
  so a finite step pays nothing for the count. The increment holds the
  counter's mutex, so skips that run at once (two train ops, several
  threads) are all counted, also before anything initialized the counter.
  """

  def __init__(self, owner):
    self._owner = owner
    _COUNTERS[owner] = self
    self._state = _graph.PerGraphVariables(owner, [_graph.VariableSpec(
        "skipped_steps", tf.int64, 0, checkpointed=False)])
    # Made only for a step inside control flow: 1 applied, 0 skipped.
    self._latest = _graph.PerGraphVariables(owner, [_graph.VariableSpec(
        "last_step_applied", tf.int64, 0, checkpointed=False)])
    # graph -> the optimizer's name in its signals.
    self._names = weakref.WeakKeyDictionary()

  _API = "LossScaleOptimizer.apply_gradients"

  def name(self) -> str:
    """The optimizer's name in this graph's signals, unique among them.

    The inner optimizer's name (`opt.get_name()`), with `_1`, `_2`, ...
    appended when another optimizer in the graph already reports under it.
    """
    graph = _graph.require_graph(self._API)
    if graph not in self._names:
      taken = set(graph.get_collection(OPTIMIZER_NAME))
      base, suffix = self._owner.get_name(), 0
      name = base
      while name in taken:
        suffix += 1
        name = f"{base}_{suffix}"
      self._names[graph] = name
    return self._names[graph]

  def name_in(self, graph: tf.Graph) -> Optional[str]:
    """The name given by `name()` in `graph`, or None if it was never asked."""
    return self._names.get(graph)

  def _variable(self) -> tf.Variable:
    return self._state.get(self._API)["skipped_steps"]

  def add_one(self) -> tf.Operation:
    """Returns an op that adds one skipped step (initializing if needed)."""
    counter = self._variable()
    return self._state.mutex(self._API).run(
        lambda: counter.assign(_graph.read_or_zero(counter) + 1,
                               read_value=False))

  def total(self) -> tf.Tensor:
    """Returns the count, read when fetched (0 before any skip).

    The read is made in the outermost graph, so it can be fetched even when
    the step is built inside control flow.
    """
    with tf.init_scope():
      return tf.identity(_graph.read_or_zero(self._variable()),
                         name="skipped_steps_total")

  def _latest_variable(self) -> tf.Variable:
    return self._latest.get(self._API)["last_step_applied"]

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
  verdict. Each entry is published under the optimizer's name
  (`counter.name()`).

  Args:
    step_applied: The step's bool verdict.
    skipped: The skip count (`counter.total()`, or a constant 0 when the
      manager never skips).
    scale: The scale the step used.
    counter: The optimizer's `SkipCounter`.
    read_scale: Returns a read of the current scale.

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
  name = counter.name()
  with tf.init_scope():
    tf.compat.v1.add_to_collection(STEP_APPLIED, step_applied)
    tf.compat.v1.add_to_collection(SKIPPED_STEPS, skipped)
    tf.compat.v1.add_to_collection(LOSS_SCALE, scale)
    tf.compat.v1.add_to_collection(OPTIMIZER_NAME, name)
  return updates


OptimizerRef = Union[str, tf.compat.v1.train.Optimizer, None]


def _graph_of(graph: Optional[tf.Graph], api: str) -> tf.Graph:
  graph = graph or _graph.require_graph(api)
  if not graph.get_collection(OPTIMIZER_NAME):
    raise ValueError(
        "This graph has no loss-scaling train op yet: build the train op "
        "with LossScaleOptimizer.apply_gradients (or minimize) in this graph "
        "first.")
  return graph


def _newest(graph: tf.Graph, key: str) -> dict:
  """{optimizer name: its newest entry in collection `key`}, in name order
  of first appearance."""
  newest = {}
  for name, entry in zip(graph.get_collection(OPTIMIZER_NAME),
                         graph.get_collection(key)):
    newest.pop(name, None)
    newest[name] = entry
  return dict(sorted(newest.items(), key=lambda item: _order(graph)[item[0]]))


def _order(graph: tf.Graph) -> dict:
  order = {}
  for name in graph.get_collection(OPTIMIZER_NAME):
    order.setdefault(name, len(order))
  return order


def _name_of(optimizer: OptimizerRef, graph: tf.Graph) -> Optional[str]:
  """The signals name `optimizer` reports under (None: all of them)."""
  if optimizer is None:
    return None
  names = optimizer_names(graph)
  if isinstance(optimizer, str):
    name = optimizer
  else:
    counter = _COUNTERS.get(optimizer)
    name = None if counter is None else counter.name_in(graph)
  if name not in names:
    raise ValueError(
        f"`optimizer` must be one of the loss-scaling optimizers of this "
        f"graph, or its name, one of {names}; got {optimizer!r}.")
  return name


def optimizer_names(graph: Optional[tf.Graph] = None) -> List[str]:
  """Returns the names the graph's loss-scaling optimizers report under.

  One per `LossScaleOptimizer` that built a train op in the graph, in the
  order they first did: the inner optimizer's name, with `_1`, `_2`, ...
  when names repeat (two `AdamOptimizer`s give "Adam" and "Adam_1").

  Raises:
    RuntimeError: Under eager execution, when no `graph` is given.
    ValueError: If no loss-scaling train op was built in the graph.
  """
  graph = _graph_of(graph, "mp_optimizer.signals.optimizer_names")
  return list(_order(graph))


def step_applied(graph: Optional[tf.Graph] = None,
                 optimizer: OptimizerRef = None) -> tf.Tensor:
  """Returns the bool tensor: was the newest train op's update applied?

  Args:
    graph: The graph to look in; default the current default graph.
    optimizer: None for the newest train op of any optimizer; else a
      `LossScaleOptimizer` or its name (`optimizer_names()`), for that
      optimizer's newest train op.

  Raises:
    RuntimeError: Under eager execution, when no `graph` is given.
    ValueError: If no loss-scaling train op was built in it, or `optimizer`
      is not one of its optimizers.
  """
  graph = _graph_of(graph, "mp_optimizer.step_applied")
  name = _name_of(optimizer, graph)
  if name is None:
    return graph.get_collection(STEP_APPLIED)[-1]
  return _newest(graph, STEP_APPLIED)[name]


def skipped_steps(graph: Optional[tf.Graph] = None,
                  optimizer: OptimizerRef = None) -> tf.Tensor:
  """Returns the int64 count of skipped steps since the session started.

  Args:
    graph: The graph to look in; default the current default graph.
    optimizer: None for the total over every loss-scaling optimizer of the
      graph; else a `LossScaleOptimizer` or its name, for its own count.

  Raises:
    RuntimeError: Under eager execution, when no `graph` is given.
    ValueError: If no loss-scaling train op was built in the graph, or
      `optimizer` is not one of its optimizers.
  """
  graph = _graph_of(graph, "mp_optimizer.skipped_steps")
  name = _name_of(optimizer, graph)
  counts = _newest(graph, SKIPPED_STEPS)
  if name is not None:
    return counts[name]
  if len(counts) == 1:
    return next(iter(counts.values()))
  with graph.as_default(), tf.init_scope():
    return tf.add_n(list(counts.values()), name="skipped_steps_all")


def loss_scale(graph: Optional[tf.Graph] = None,
               optimizer: OptimizerRef = None) -> tf.Tensor:
  """Returns the loss scale the newest train op used.

  Args:
    graph: The graph to look in; default the current default graph.
    optimizer: None for the newest train op of any optimizer; else a
      `LossScaleOptimizer` or its name, for that optimizer's newest one.

  Raises:
    RuntimeError: Under eager execution, when no `graph` is given.
    ValueError: If no loss-scaling train op was built in the graph, or
      `optimizer` is not one of its optimizers.
  """
  graph = _graph_of(graph, "mp_optimizer.signals.loss_scale")
  name = _name_of(optimizer, graph)
  if name is None:
    return graph.get_collection(LOSS_SCALE)[-1]
  return _newest(graph, LOSS_SCALE)[name]


def add_summaries(graph: Optional[tf.Graph] = None) -> tf.Tensor:
  """Adds scalar summaries of the loss scale and the skipped steps.

  With one loss-scaling optimizer in the graph: `mp_optimizer/loss_scale`
  and `mp_optimizer/skipped_steps`. With several, each reports under its
  name (`optimizer_names()`): `mp_optimizer/<name>/loss_scale` and
  `mp_optimizer/<name>/skipped_steps`, and `mp_optimizer/skipped_steps` is
  their total. They join the SUMMARIES collection, which Estimator,
  `MonitoredTrainingSession(summary_dir=...)` and
  `tf.compat.v1.summary.merge_all()` write to TensorBoard.

  Returns:
    The merged summary of them all.

  Raises:
    RuntimeError: Under eager execution, when no `graph` is given.
    ValueError: If no loss-scaling train op was built in the graph.
  """
  graph = _graph_of(graph, "mp_optimizer.add_summaries")
  names = optimizer_names(graph)
  summary = tf.compat.v1.summary.scalar
  with graph.as_default(), tf.name_scope("mp_optimizer"):
    if len(names) == 1:
      return tf.compat.v1.summary.merge([
          summary("loss_scale", loss_scale(graph)),
          summary("skipped_steps", skipped_steps(graph))])
    made = [summary("skipped_steps", skipped_steps(graph))]
    for name in names:
      with tf.name_scope(name):
        made += [summary("loss_scale", loss_scale(graph, name)),
                 summary("skipped_steps", skipped_steps(graph, name))]
    return tf.compat.v1.summary.merge(made)
