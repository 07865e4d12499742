"""Skip signals: was this step applied, how many were skipped, what is S?

Each train op `LossScaleOptimizer.apply_gradients` builds publishes three
tensors under its optimizer's name, kept with the graph, so code that did
not build the optimizer (an Estimator hook, a `MonitoredTrainingSession`
loop) can still find them; they are also added to the graph collections
`STEP_APPLIED`, `SKIPPED_STEPS` and `LOSS_SCALE`, one entry per train op,
which an exported meta-graph keeps (in a graph imported from one, the
readers below raise a ValueError that names them). A graph may hold several
optimizers (a GAN's D and G): each reports under its name
(`optimizer_names()`), and every reader takes `optimizer=` (an optimizer or
its name) to read one of them:

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
optimizer when there are several, and the precision telemetry of optimizers
built with `precision_telemetry=True` (`precision()`).

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

from typing import Any, Dict, List, Optional, Union

import tensorflow as tf

from mp_optimizer._internal import tensors
from mp_optimizer._step import signal_record
from mp_optimizer._step import telemetry
from mp_optimizer._step.signal_record import LOSS_SCALE
from mp_optimizer._step.signal_record import SKIPPED_STEPS
from mp_optimizer._step.signal_record import STEP_APPLIED

# How readers name an optimizer: the optimizer, its name, or None (all).
OptimizerRef = Union[str, tf.compat.v1.train.Optimizer, None]
# What `precision()["skip_reason"]` codes mean, by code.
SKIP_REASONS = telemetry.REASONS


def _newest(graph: Optional[tf.Graph], optimizer: OptimizerRef, api: str
            ) -> signal_record.SignalRecord:
  """The newest record of `optimizer` (None: of any optimizer) in `graph`."""
  signals = signal_record.published(graph, api)
  name = _name(signals, optimizer)
  return signals.records[-1] if name is None else signals.newest()[name]


def _name(signals: signal_record.GraphSignals,
          optimizer: OptimizerRef) -> Optional[str]:
  """The name `optimizer` publishes under (None: all of them).

  Raises:
    ValueError: If `optimizer` is not one of the graph's loss-scaling
      optimizers or their names.
  """
  if optimizer is None:
    return None
  names = signals.names()
  name = (optimizer if isinstance(optimizer, str)
          else signals.name_of(optimizer))
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
  return signal_record.published(
      graph, "mp_optimizer.signals.optimizer_names").names()


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
  return _newest(graph, optimizer, "mp_optimizer.step_applied").step_applied


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
  signals = signal_record.published(graph, "mp_optimizer.skipped_steps")
  name = _name(signals, optimizer)
  if name is None:
    return signals.total_skipped()
  return signals.newest()[name].skipped_steps


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
  return _newest(graph, optimizer,
                 "mp_optimizer.signals.loss_scale").loss_scale


def precision(graph: Optional[tf.Graph] = None,
              optimizer: OptimizerRef = None) -> Dict[str, Any]:
  """Returns the newest step's precision telemetry, as stored after it.

  Needs an optimizer built with `precision_telemetry=True`. Each value is a
  read of what the newest step stored (fetch it in a `sess.run` after the
  train op's; before any step, NaN and reason code -1):

  * "headroom_bits": float32, log2(65504 / (S * largest |gradient entry|)).
  * "zero_share": float32 vector, per entry of "groups", the share of
    gradient entries exactly zero in float16 at the step's S.
  * "groups": list of str, the variable groups (name scopes), sorted.
  * "global_norm": float32, the unscaled global gradient norm; NaN on a
    skipped step.
  * "skip_reason": int64 code into `SKIP_REASONS` ("applied", "overflow",
    "overflow at the floor", "accumulation micro-step",
    "non-finite, unscaled").
  * "reason_counts": int64 vector, steps by reason since the session
    started (stored values are in no collection, like `skipped_steps`).

  Args:
    graph: The graph to look in; default the current default graph.
    optimizer: None for the newest optimizer that records telemetry; else
      a `LossScaleOptimizer` or its name.

  Raises:
    RuntimeError: Under eager execution, when no `graph` is given.
    ValueError: If no loss-scaling train op was built in the graph, or none
      of the optimizer asked for is built with `precision_telemetry=True`.
  """
  signals = signal_record.published(graph, "mp_optimizer.signals.precision")
  name = _name(signals, optimizer)
  records = signals.newest_telemetry()
  if name is None and records:
    name = list(records)[-1]
  if name not in records:
    raise ValueError(
        "No precision telemetry for "
        f"{'this graph' if name is None else repr(name)}: build the "
        "optimizer with LossScaleOptimizer(..., precision_telemetry=True).")
  return dict(records[name].reads, groups=list(records[name].groups))


def add_summaries(graph: Optional[tf.Graph] = None) -> tf.Tensor:
  """Adds scalar summaries of the loss scale and the skipped steps.

  With one loss-scaling optimizer in the graph: `mp_optimizer/loss_scale`
  and `mp_optimizer/skipped_steps`. With several, each reports under its
  name (`optimizer_names()`): `mp_optimizer/<name>/loss_scale` and
  `mp_optimizer/<name>/skipped_steps`, and `mp_optimizer/skipped_steps` is
  their total. An optimizer built with `precision_telemetry=True` adds
  `headroom_bits`, `global_norm` and `zero_share/<group>` beside its
  `loss_scale`, from the step's own tensors. They join the SUMMARIES
  collection (once, however often this is called), which
  Estimator, `MonitoredTrainingSession(summary_dir=...)` and
  `tf.compat.v1.summary.merge_all()` write to TensorBoard.

  Each train op builds these summaries for the graph's newest signals, so
  this call adds no op and works after the graph is finalized (in a hook
  under `MonitoredTrainingSession`). A finalized graph takes nothing into a
  collection, though: there, fetch what it returns and write it yourself
  (`tf.compat.v1.summary.FileWriter.add_summary`).

  Returns:
    The merged summary of them all, the same tensor at every call until
    another train op is built.

  Raises:
    RuntimeError: Under eager execution, when no `graph` is given.
    ValueError: If no loss-scaling train op was built in the graph.
  """
  graph = graph or tensors.require_graph("mp_optimizer.add_summaries")
  made, merged = signal_record.published(
      graph, "mp_optimizer.add_summaries").summaries
  key = tf.compat.v1.GraphKeys.SUMMARIES
  if not graph.finalized and not any(entry is made[0]
                                     for entry in graph.get_collection(key)):
    for summary in made:
      graph.add_to_collection(key, summary)
  return merged
