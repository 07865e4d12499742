"""Gating a step on one boolean with a single Switch, and keeping it sound.

`gate(pred, when_true, when_false)` is the step's `tf.cond` without its
per-input cost; `on_each_replica` keeps the gate's control dependency alive
inside `tf.distribute` replicas; `build_behind` makes sure nothing the taken
side built can run when it is not taken.

`gate` builds its taken side under a control dependency on a pivot
that is dead on a skipped step. That reaches only ops built in the caller's
control-dependency scope: an inner optimizer may build an update or a
counter under `tf.control_dependencies(None)` or `tf.init_scope`, and such
an op would run on a skipped step. `build_behind` therefore walks every op
the side built, in creation order:

```
dead_on_skip = {pivot}
for op in ops built by the side:
  if op has an input (data or control) in dead_on_skip:   # Merge: all
    dead_on_skip += op                                    # data inputs
  elif op belongs to a variable made by the side: leave it runnable
  elif op is a while loop's Enter or Exit: leave it (its consumers are pinned)
  else: add a control input on the pivot; dead_on_skip += op
```

A variable made by the side (a slot, or one the optimizer creates in
`apply_gradients`) keeps its handle, initializer and initial value outside
the gate, as `tf.cond` keeps what `tf.init_scope` builds, so
`global_variables_initializer()` runs without the training feeds. If that
initial value depends on the gated side, no initializer could run it:
`build_behind` refuses with a ValueError, as a v1 `tf.cond` does.

A v1 summary built by the side (`tf.compat.v1.summary.*`) is dead on a
skipped step, and `merge_all()` (what summary hooks fetch) would fail. Each
such summary in a collection is replaced there by a Merge of it and an
empty summary that only the skipped side produces: a skipped step's merged
summary just lacks those values. A TF2 summary (`tf.summary.*` under a
default writer) built by the side is likewise replaced in the collection
`tf.compat.v1.summary.all_v2_summary_ops()` reads by a Merge of it and a
`False` ("nothing written") of the skipped side.

An optimizer that builds nothing outside the caller's scope (every
`tf.compat.v1.train` optimizer) gets no extra edge and no extra op.
"""

from typing import Any, Callable, List, Sequence, Set

import tensorflow as tf

from mp_optimizer._internal import graph_walk
from mp_optimizer._internal import tensors
from mp_optimizer._internal import tf_private


def on_each_replica(strategy: tf.distribute.Strategy, pivot: tf.Tensor,
                    fn: Callable[..., Any], args: Sequence = ()) -> Any:
  """`call_for_each_replica`, with every op it builds depending on `pivot`.

  Replica threads start without the caller's control dependencies, so the
  gate's pivot is entered again inside each replica; a `merge_call` from
  there carries it back into cross-replica context.
  """
  def gated(*local: Any) -> Any:
    with tf.control_dependencies([pivot]):
      return fn(*local)

  return strategy.extended.call_for_each_replica(gated, args=args)


def gate(pred: tf.Tensor, when_true: Callable[[tf.Tensor], tf.Operation],
         when_false: Callable[[], tf.Operation]) -> tf.Operation:
  """Runs the ops `when_true(pivot)` builds if `pred`, else `when_false()`.

  Like `tf.cond` on two op-returning branches, but `tf.cond` adds a Switch (or
  a function argument) for every tensor a branch captures: for Adam about four
  per variable, executed every step (see BENCHMARKS.md, "The gate"). Here one
  Switch splits `pred` into two pivots; every op of a side is built under a
  control dependency on its pivot, so on the untaken side all of them are
  dead and none runs; a Merge joins the sides into one op that completes
  either way. Ops of the true side that escaped that dependency
  (`tf.control_dependencies(None)`, `tf.init_scope`) are given one on the
  pivot afterwards, except the variables it made (slots, with their
  initializers), which stay outside the gate as they do outside `tf.cond`;
  its v1 summaries stay fetchable (see `build_behind`).

  Args:
    pred: Scalar bool tensor.
    when_true: Called with the true side's pivot; returns an op. Under
      `tf.distribute` it must build replica functions through
      `on_each_replica`.
    when_false: Called with no argument; returns an op.

  Returns:
    An op that completes when the taken side has.

  Raises:
    ValueError: `when_true` made a variable whose initial value depends on
      the true side.
  """
  on, off = tensors.pivots(pred, "gate")

  def build_taken() -> tf.Operation:
    with tf.control_dependencies([on]):
      return when_true(on)

  taken = build_behind(on, off, build_taken)
  with tf.control_dependencies([off]):
    not_taken = when_false()
  return tensors.join([(off, not_taken), (on, taken)], "gate_done")


_SUMMARY_TYPES = frozenset((
    "ScalarSummary", "HistogramSummary", "ImageSummary", "AudioSummary",
    "AudioSummaryV2", "TensorSummary", "TensorSummaryV2", "MergeSummary"))
_MERGE_TYPES = frozenset(("Merge", "RefMerge"))
# The collection of TF2 summary writes that `all_v2_summary_ops()` returns
# (`ops.GraphKeys._SUMMARY_COLLECTION`, which has no public name).
_SUMMARY_V2_COLLECTION = "_SUMMARY_V2"
_BACK_EDGE_TYPES = frozenset(("NextIteration", "RefNextIteration"))
# Frame boundaries of v1 while loops: an Enter forwards an outer tensor into
# a loop frame, an Exit a loop's result out of it. Neither computes anything,
# and a control input from the pivot's frame would join two frames, which
# TensorFlow refuses; the ops that consume them are pinned instead.
_FRAME_BOUNDARY_TYPES = frozenset(("Enter", "RefEnter", "Exit", "RefExit"))


class _MadeVariable:
  """A variable made while the side was built, and the new ops it needs."""

  def __init__(self, variable: tf.Variable, begin: int, end: int):
    self.variable = variable
    self.span = (begin, end)  # Its constructor's ops in get_operations().
    self.ops = set()


def build_behind(on: tf.Tensor, off: tf.Tensor,
                 build: Callable[[], tf.Operation]) -> tf.Operation:
  """Calls `build()`; makes every op it built dead when `on` is.

  Args:
    on: The pivot of the side `build` makes (live when it is taken).
    off: The other side's pivot (live when `on` is dead).
    build: Builds the side under a control dependency on `on`; returns its op.

  Returns:
    What `build` returned.

  Raises:
    ValueError: A variable made by `build` has an initial value that
      depends on the gated side.
  """
  graph = on.graph
  start = graph.version  # Op ids count from 1 in creation order.
  made = []

  def creator(next_creator: Callable[..., tf.Variable],
              **kwargs: Any) -> tf.Variable:
    begin = graph.version
    variable = next_creator(**kwargs)
    made.append(_MadeVariable(variable, begin, graph.version))
    return variable

  with tf.variable_creator_scope(creator):
    built = build()
  all_ops = graph.get_operations()
  new = set(all_ops[start:])
  owned = _variable_ops(made, all_ops, new)
  dead = _pin(all_ops[start:], on.op, owned)
  for found in made:
    _check_initializer(found, dead)
  _keep_summaries_fetchable(graph, new, off)
  return built


def _variable_ops(made: List[_MadeVariable], all_ops: List[tf.Operation],
                  new: Set[tf.Operation]) -> Set[tf.Operation]:
  """Each made variable's ops and their fan-in among the side's new ops."""
  owned = set()
  for found in made:
    reached = graph_walk.walk_back(
        all_ops[slice(*found.span)], graph_walk.op_and_control_inputs,
        stop=lambda op: op not in new)
    found.ops = {op for op in reached if op in new}
    owned |= found.ops
  return owned


def _dead_with(op: tf.Operation, dead: Set[tf.Operation]) -> bool:
  """Whether `op` is dead whenever every op in `dead` is."""
  if op.type in _MERGE_TYPES:  # A Merge lives if any data input does.
    data = [t.op for t in op.inputs if t.op.type not in _BACK_EDGE_TYPES]
    return bool(data) and all(source in dead for source in data)
  return (any(t.op in dead for t in op.inputs) or
          any(source in dead for source in op.control_inputs))


def _pin(new_ops: Sequence[tf.Operation], pivot: tf.Operation,
         owned: Set[tf.Operation]) -> Set[tf.Operation]:
  """Adds a control input on `pivot` to each new op that escapes it."""
  dead = {pivot}
  for op in new_ops:  # Creation order: inputs first, loop back edges aside.
    if _dead_with(op, dead):
      dead.add(op)
    elif op not in owned and op.type not in _FRAME_BOUNDARY_TYPES:
      tf_private.add_control_input(op, pivot)
      dead.add(op)
  return dead


def _check_initializer(found: _MadeVariable,
                       dead: Set[tf.Operation]) -> None:
  gated = sorted(op.name for op in found.ops if op in dead)
  if gated:
    raise ValueError(
        f"Variable `{found.variable.name}` was created inside the inner "
        f"optimizer's apply_gradients with an initial value that depends on "
        f"the gated update (op `{gated[0]}`): it could never be initialized "
        "without running a training step. Pass a callable as the initial "
        "value (`initial_value=lambda: ...`), create it under "
        "`tf.init_scope()` (as `_create_slots` does), or create it before "
        "calling apply_gradients.")


def _is_summary(tensor: tf.Tensor) -> bool:
  op = tensor.op
  while op.type in _MERGE_TYPES:  # Already made fetchable by a nested gate.
    op = op.inputs[0].op
  return op.type in _SUMMARY_TYPES


def _keep_summaries_fetchable(graph: tf.Graph, new: Set[tf.Operation],
                              off: tf.Tensor) -> None:
  """Gives each new summary in a collection a value on skipped steps too."""
  for key in graph.get_all_collection_keys():
    entries = graph.get_collection_ref(key)
    for index, entry in enumerate(entries):
      if not (isinstance(entry, tf.Tensor) and entry.op in new and
              (key == _SUMMARY_V2_COLLECTION or _is_summary(entry))):
        continue
      with graph.name_scope(entry.op.name + "/"):
        with tf.control_dependencies([off]):
          # b"" (an empty summary) or False (no TF2 summary written).
          empty = tf.zeros([], entry.dtype, name="when_skipped")
        entries[index] = tf.raw_ops.Merge(inputs=[entry, empty],
                                          name="or_skipped").output
