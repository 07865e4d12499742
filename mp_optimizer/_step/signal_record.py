"""The signals each train op publishes: one record per train op, found by name.

`LossScaleOptimizer.apply_gradients` publishes, per train op, one
`SignalRecord`: the name its optimizer reports under, its verdict (was the
step applied?), the scale it used, its optimizer's skip count and, with
`precision_telemetry=True`, its telemetry. A graph's records are kept in
order (`GraphSignals`, one per graph); `mp_optimizer.signals` reads them by
optimizer name.

The verdict, the skip count and the scale are also added to the graph
collections `STEP_APPLIED`, `SKIPPED_STEPS` and `LOSS_SCALE` (docs: Skip
signals), for code that did not build the optimizer and for exported
meta-graphs; the readers here do not use the collections.
"""

import dataclasses
import weakref
from typing import Dict, List, NamedTuple, Optional

import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer._internal import keyed
from mp_optimizer._internal import tensors
from mp_optimizer._step import scaling
from mp_optimizer._step import telemetry
from mp_optimizer._step.skip_counter import SkipCounter

STEP_APPLIED = "mp_optimizer_step_applied"
SKIPPED_STEPS = "mp_optimizer_skipped_steps"
LOSS_SCALE = "mp_optimizer_loss_scale"


@dataclasses.dataclass(frozen=True)
class SignalRecord:
  """What one train op publishes.

  Attributes:
    name: The name its optimizer reports under, unique in the graph.
    optimizer: A weak reference to that optimizer.
    step_applied: Scalar bool: was the step applied?
    loss_scale: The scale the step used (inside control flow: the current
      scale, read when fetched).
    skipped_steps: Scalar int64: the optimizer's count of skipped steps.
    precision: The step's precision telemetry (`signals.precision()`), or
      None.
  """
  name: str
  optimizer: weakref.ref
  step_applied: tf.Tensor
  loss_scale: tf.Tensor
  skipped_steps: tf.Tensor
  precision: Optional[telemetry.Record] = None


class Summaries(NamedTuple):
  """The summaries of a graph's newest signals (`summaries.build`)."""
  made: List[tf.Tensor]
  merged: tf.Tensor  # Their merge.


@dataclasses.dataclass
class GraphSignals:
  """The signals of one graph: its train ops' records, oldest first.

  Attributes:
    records: One `SignalRecord` per train op, in the order they were built.
    skipped_total: With several optimizers, the sum of their newest skip
      counts, built with the newest train op; else None.
    summaries: The summaries of the newest signals, built with the newest
      train op (`summaries.build`).
  """
  records: List[SignalRecord] = dataclasses.field(default_factory=list)
  skipped_total: Optional[tf.Tensor] = None
  summaries: Optional[Summaries] = None

  def names(self) -> List[str]:
    """The optimizers' names, in the order they first published."""
    return list(dict.fromkeys(record.name for record in self.records))

  def newest(self) -> Dict[str, SignalRecord]:
    """{optimizer name: its newest record}, in the order of `names`."""
    found = {record.name: record for record in self.records}
    return {name: found[name] for name in self.names()}

  def newest_telemetry(self) -> Dict[str, telemetry.Record]:
    """{optimizer name: its newest telemetry}, the newest built last."""
    found = {}
    for record in self.records:
      if record.precision is not None:
        found.pop(record.name, None)
        found[record.name] = record.precision
    return found

  def total_skipped(self) -> tf.Tensor:
    """The count of skipped steps over every optimizer of the graph."""
    if self.skipped_total is not None:
      return self.skipped_total
    return self.records[-1].skipped_steps

  def name_of(self, optimizer: tf.compat.v1.train.Optimizer) -> Optional[str]:
    """The name `optimizer` publishes under here, or None if it has not."""
    for record in self.records:
      if record.optimizer() is optimizer:
        return record.name
    return None


_SIGNALS: keyed.PerGraph[GraphSignals] = keyed.PerGraph(GraphSignals)


def name_for(optimizer: tf.compat.v1.train.Optimizer) -> str:
  """The name `optimizer` reports under in the outermost graph's signals.

  The one it already has there, else the inner optimizer's name
  (`opt.get_name()`), with `_1`, `_2`, ... appended when another optimizer
  in the graph already reports under it.
  """
  signals = _SIGNALS.of(tensors.outer_graph())
  name = signals.name_of(optimizer)
  if name is not None:
    return name
  taken, base, suffix = set(signals.names()), optimizer.get_name(), 0
  name = base
  while name in taken:
    suffix += 1
    name = f"{base}_{suffix}"
  return name


def inside_control_flow(tensor: tf.Tensor) -> bool:
  """True if `tensor` cannot be fetched from the outermost graph.

  v2 control flow builds branches and loop bodies as function graphs; v1
  control flow builds them in the same graph but marks their ops unfetchable.
  """
  outer = tensors.outer_graph()
  return tensor.graph is not outer or not outer.is_fetchable(tensor.op)


def publish(name: str, counter: SkipCounter, step_applied: tf.Tensor,
            skipped: tf.Tensor, scale: tf.Tensor,
            manager: managers.LossScaleManager,
            step_telemetry: Optional[telemetry.Record]) -> List[tf.Operation]:
  """Publishes one train op's `SignalRecord` in the outermost graph.

  Everything a reader returns is built here, with the train op, so that
  reading needs no new op once the graph is finalized
  (`MonitoredTrainingSession` finalizes it before any hook runs): with
  several optimizers in the graph, the total of their skip counts too.
  Outside control flow the step's own tensors are published. Inside it they
  cannot be fetched, so reads made in the outermost graph are published
  instead, and the step must also store its verdict.

  Args:
    name: The name the optimizer reports under (`name_for`).
    counter: The optimizer's `SkipCounter`.
    step_applied: The step's bool verdict.
    skipped: The skip count (`counter.total()`, or a constant 0 when the
      manager never skips).
    scale: The scale the step used.
    manager: The loss-scale manager, read for the current scale inside
      control flow.
    step_telemetry: The step's precision telemetry, or None.

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
      scale = tf.identity(scaling.read_loss_scale(manager),
                          name="current_loss_scale")
  with tf.init_scope():
    signals = _SIGNALS.of(tf.compat.v1.get_default_graph())
    signals.records.append(SignalRecord(
        name, weakref.ref(counter.owner), step_applied, scale, skipped,
        step_telemetry))
    tf.compat.v1.add_to_collection(STEP_APPLIED, step_applied)
    tf.compat.v1.add_to_collection(SKIPPED_STEPS, skipped)
    tf.compat.v1.add_to_collection(LOSS_SCALE, scale)
    counts = [record.skipped_steps for record in signals.newest().values()]
    if len(counts) > 1:
      signals.skipped_total = tf.add_n(counts, name="skipped_steps_all")
  return updates


def published(graph: Optional[tf.Graph], api: str) -> GraphSignals:
  """The signals of `graph` (default: the current graph), once a train op
  published in it.

  Raises:
    RuntimeError: Under eager execution, when no `graph` is given.
    ValueError: If no loss-scaling train op was built in the graph.
  """
  graph = graph or tensors.require_graph(api)
  signals = _SIGNALS.peek(graph)
  if signals is not None and signals.records:
    return signals
  if graph.get_collection(STEP_APPLIED):
    raise ValueError(
        "This graph's loss-scaling train op was not built in it "
        "(it was imported from a meta-graph): its signals are in the graph "
        "collections mp_optimizer.signals.STEP_APPLIED, SKIPPED_STEPS and "
        "LOSS_SCALE.")
  raise ValueError(
      "This graph has no loss-scaling train op yet: build the train op "
      "with LossScaleOptimizer.apply_gradients (or minimize) in this graph "
      "first.")
