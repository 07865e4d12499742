"""The skip count of each optimizer, and the signals each train op publishes.

`LossScaleOptimizer.apply_gradients` publishes, per train op, its verdict,
its optimizer's skip count and the scale it used in graph collections,
under the optimizer's name; `mp_optimizer.signals` finds them with the
lookups at the end of this module, which alone know the collections' layout.
"""

import weakref
from typing import Callable, Dict, List, Optional, Union

import tensorflow as tf

from mp_optimizer._internal import per_graph
from mp_optimizer._internal import tensors

STEP_APPLIED = "mp_optimizer_step_applied"
SKIPPED_STEPS = "mp_optimizer_skipped_steps"
LOSS_SCALE = "mp_optimizer_loss_scale"
# The name of the optimizer each entry of the three collections belongs to.
OPTIMIZER_NAME = "mp_optimizer_optimizer_name"
# With several optimizers, the sum of their newest skip counts, one entry per
# train op built after the second optimizer's first.
SKIPPED_STEPS_TOTAL = "mp_optimizer_skipped_steps_total"

_COUNTERS = weakref.WeakKeyDictionary()  # optimizer -> its SkipCounter
# How readers name an optimizer: the optimizer, its name, or None (all).
OptimizerRef = Union[str, tf.compat.v1.train.Optimizer, None]


def counter_of(optimizer: tf.compat.v1.train.Optimizer
               ) -> Optional["SkipCounter"]:
  """The `SkipCounter` of a loss-scaling optimizer, else None."""
  return _COUNTERS.get(optimizer)


class SkipCounter:
  """The int64 `skipped_steps` variable of one optimizer, per graph.

  Only a skipped step touches it (from the untaken side of the step's gate),
  so a finite step pays nothing for the count. The increment holds the
  counter's mutex, so skips that run at once (two train ops, several
  threads) are all counted, also before anything initialized the counter.
  """

  def __init__(self, owner: tf.compat.v1.train.Optimizer):
    self._owner = owner
    _COUNTERS[owner] = self
    self._state = per_graph.PerGraphVariables(owner, [per_graph.VariableSpec(
        "skipped_steps", tf.int64, 0, checkpointed=False)])
    # Made only for a step inside control flow: 1 applied, 0 skipped.
    self._latest = per_graph.PerGraphVariables(owner, [per_graph.VariableSpec(
        "last_step_applied", tf.int64, 0, checkpointed=False)])
    # graph -> the optimizer's name in its signals.
    self._names = weakref.WeakKeyDictionary()

  _API = "LossScaleOptimizer.apply_gradients"

  def name(self) -> str:
    """The optimizer's name in this graph's signals, unique among them.

    The inner optimizer's name (`opt.get_name()`), with `_1`, `_2`, ...
    appended when another optimizer in the graph already reports under it.
    """
    graph = tensors.require_graph(self._API)
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
        lambda: counter.assign(tensors.read_or_zero(counter) + 1,
                               read_value=False))

  def total(self) -> tf.Tensor:
    """Returns the count, read when fetched (0 before any skip).

    The read is made in the outermost graph, so it can be fetched even when
    the step is built inside control flow.
    """
    with tf.init_scope():
      return tf.identity(tensors.read_or_zero(self._variable()),
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
      return tf.equal(tensors.read_or_zero(self._latest_variable()), 1,
                      name="last_step_applied")


def inside_control_flow(tensor: tf.Tensor) -> bool:
  """True if `tensor` cannot be fetched from the outermost graph.

  v2 control flow builds branches and loop bodies as function graphs; v1
  control flow builds them in the same graph but marks their ops unfetchable.
  """
  outer = tensors.outer_graph()
  return tensor.graph is not outer or not outer.is_fetchable(tensor.op)


def record(step_applied: tf.Tensor, skipped: tf.Tensor, scale: tf.Tensor,
           counter: SkipCounter,
           read_scale: Callable[[], tf.Tensor]) -> List[tf.Operation]:
  """Publishes one train op's signals in the outermost graph's collections.

  Everything a reader returns is built here, with the train op, so that
  reading needs no new op once the graph is finalized
  (`MonitoredTrainingSession` finalizes it before any hook runs): with
  several optimizers in the graph, the total of their skip counts too.
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
  if inside_control_flow(step_applied):
    updates.append(counter.write_latest(step_applied))
    step_applied = counter.read_latest()
    if inside_control_flow(skipped):  # A constant 0: no step is skipped.
      skipped = counter.total()
    with tf.init_scope():
      scale = tf.identity(read_scale(), name="current_loss_scale")
  name = counter.name()
  with tf.init_scope():
    tf.compat.v1.add_to_collection(STEP_APPLIED, step_applied)
    tf.compat.v1.add_to_collection(SKIPPED_STEPS, skipped)
    tf.compat.v1.add_to_collection(LOSS_SCALE, scale)
    tf.compat.v1.add_to_collection(OPTIMIZER_NAME, name)
    graph = tf.compat.v1.get_default_graph()
    counts = list(newest(graph, SKIPPED_STEPS).values())
    if len(counts) > 1:
      tf.compat.v1.add_to_collection(SKIPPED_STEPS_TOTAL, tf.add_n(
          counts, name="skipped_steps_all"))
  return updates


def published_graph(graph: Optional[tf.Graph], api: str) -> tf.Graph:
  """`graph` (default: the current graph) once a train op published in it.

  Raises:
    RuntimeError: Under eager execution, when no `graph` is given.
    ValueError: If no loss-scaling train op was built in the graph.
  """
  graph = graph or tensors.require_graph(api)
  if not graph.get_collection(OPTIMIZER_NAME):
    raise ValueError(
        "This graph has no loss-scaling train op yet: build the train op "
        "with LossScaleOptimizer.apply_gradients (or minimize) in this graph "
        "first.")
  return graph


def published_names(graph: tf.Graph) -> List[str]:
  """The optimizers' names, in the order they first published."""
  return list(dict.fromkeys(graph.get_collection(OPTIMIZER_NAME)))


def newest(graph: tf.Graph, key: str) -> Dict[str, object]:
  """{optimizer name: its newest entry in collection `key`}, in the order
  of `published_names`."""
  found = {}
  for name, entry in zip(graph.get_collection(OPTIMIZER_NAME),
                         graph.get_collection(key)):
    found[name] = entry
  return {name: found[name] for name in published_names(graph)}


def total_skipped(graph: tf.Graph) -> tf.Tensor:
  """The count of skipped steps over every optimizer of `graph` (built by
  `record`)."""
  counts = newest(graph, SKIPPED_STEPS)
  if len(counts) == 1:
    return next(iter(counts.values()))
  return graph.get_collection(SKIPPED_STEPS_TOTAL)[-1]


def name_of(optimizer: OptimizerRef, graph: tf.Graph) -> Optional[str]:
  """The name `optimizer` publishes under (None: all of them).

  Raises:
    ValueError: If `optimizer` is not one of the graph's loss-scaling
      optimizers or their names.
  """
  if optimizer is None:
    return None
  names = published_names(graph)
  if isinstance(optimizer, str):
    name = optimizer
  else:
    counter = counter_of(optimizer)
    name = None if counter is None else counter.name_in(graph)
  if name not in names:
    raise ValueError(
        f"`optimizer` must be one of the loss-scaling optimizers of this "
        f"graph, or its name, one of {names}; got {optimizer!r}.")
  return name
