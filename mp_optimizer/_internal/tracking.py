"""The one place that touches TensorFlow's object-checkpoint machinery.

`tf.train.Checkpoint` saves an object's variables only if the object is a
`Trackable` and declares them as named dependencies. TensorFlow has no public
API for a class to declare a dependency on an object it did not get through
attribute assignment; TF's own `MixedPrecisionLossScaleOptimizer` uses
`Trackable._track_trackable`. We use the same method, reached only through
`tf.__internal__.tracking.Trackable` (no `tensorflow.python` import), and only
here. Checked on TensorFlow 2.15 and 2.21.

One object may hold state in several graphs (a manager or optimizer built
once and used in an Estimator's train and eval graphs). A checkpoint saved or
restored in one graph must see that graph's variables only, or TF refuses to
save ("must be from the same graph"). TF's v1 `Optimizer` solves this for its
own non-slot variables: it keeps them per graph in `_non_slot_dict`, answers
`_trackable_children`/`_lookup_dependency` with the current graph's, and
hands pending restores over with `_handle_deferred_dependencies`. `track`
does the same for graph variables: through `GraphScopedTrackable` for the
managers, and through the v1 optimizer's own per-graph table for an
optimizer.

TensorFlow's object-checkpoint writer also decides who owns slot variables by
looking for `get_slot_names` in `dir(obj)` of every tracked object, and
refuses a slot reported by two objects. `hide_slot_owner_marker` lets a
wrapper that delegates `get_slot` to the optimizer it tracks leave ownership
with that optimizer.

A loss-scaling wrapper is saved as TF's built-in saves it: the wrapped
optimizer under `base_optimizer`, the manager under `loss_scale`. A
checkpoint written by the bare optimizer (a float32 run) has the optimizer's
own state where the wrapper sits: `beta1_power` as its child, the slots
listed on its node. TF then asks the wrapper for those (`_lookup_dependency`,
`_deferred_dependencies`, `_create_or_restore_slot_variable`), and, left to
the v1 `Optimizer` base, they would vanish without a word.
`RestoresBareOptimizer` hands them to the wrapped optimizer, through those
three private methods of TF's restore machinery (no public API routes a
checkpoint node to another object); checked on TensorFlow 2.15 and 2.21.

Which variables are loss-scale state and which are the wrapped optimizer's
(slots, beta powers) is recorded in two graph collections
(`record_optimizer_state`), so a tolerant `Saver` and the resume check can
tell them apart in the graph the train op was built in. They are
plain variable collections: a default `Saver` ignores them.

`checkpoint_keys` reads which key holds each variable in a checkpoint. An
object-based checkpoint names its keys by object path; the variable names
are in its serialized object graph, a `TrackableObjectGraph` proto that TF
has no public parser for, so the proto class is imported here (the same
table TF's own name-based Saver uses to read object-based checkpoints).
Checked on TensorFlow 2.15 and 2.21.
"""

import weakref
from typing import Dict, Iterable, List, Optional

import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2  # pylint: disable=g-direct-tensorflow-import

_SLOT_OWNER_MARKER = "get_slot_names"
SCALE_STATE = "mp_optimizer_scale_state"
OPTIMIZER_STATE = "mp_optimizer_optimizer_state"
# The key under which an object-based checkpoint holds its object graph.
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"

Trackable = tf.__internal__.tracking.Trackable
_V1Optimizer = tf.compat.v1.train.Optimizer


def _graph_of(child) -> Optional[tf.Graph]:
  """The graph a variable lives in, or None (eager, or not a variable)."""
  if not isinstance(child, tf.Variable):
    return None
  try:
    graph = child.graph
  except AttributeError:  # An eager variable has no graph.
    return None
  return graph if isinstance(graph, tf.Graph) else None


class GraphScopedTrackable(Trackable):
  """A `Trackable` whose graph variables are its dependencies in their graph.

  Saving or restoring in a graph sees, under each name, the variable made in
  that graph; other dependencies (objects with no graph) are seen everywhere.
  """

  def _graph_dependencies(self) -> Dict[str, Trackable]:
    try:
      by_graph = self._mp_by_graph
    except AttributeError:
      return {}
    return by_graph.get(tf.compat.v1.get_default_graph(), {})

  def _add_graph_dependency(self, graph: tf.Graph, name: str,
                            child: Trackable) -> None:
    if not hasattr(self, "_mp_by_graph"):
      self._mp_by_graph = weakref.WeakKeyDictionary()
    self._mp_by_graph.setdefault(graph, {})[name] = child

  def _trackable_children(self, save_type="checkpoint", **kwargs):
    children = dict(super()._trackable_children(save_type, **kwargs))
    children.update(self._graph_dependencies())
    return children

  def _lookup_dependency(self, name, cached_dependencies=None):
    found = self._graph_dependencies().get(name)
    if found is not None:
      return found
    return super()._lookup_dependency(name, cached_dependencies)


_WRAPPER_CHILDREN = ("base_optimizer", "loss_scale")


class RestoresBareOptimizer:
  """Mixin: a wrapper that also restores the bare wrapped optimizer's format.

  The class sets `_restore_target` (the wrapped optimizer) in its
  constructor before tracking anything. A restore of that format logs one
  line per graph: the scale state keeps its initial values.
  """

  _restore_target = None

  def _inner_or_none(self):
    return self.__dict__.get("_restore_target")

  @property
  def _deferred_dependencies(self):
    # One table with the wrapped optimizer: a restore deferred on the wrapper
    # (`beta1_power` before it exists) is applied when the wrapped optimizer
    # makes the variable; the wrapper's own names are not the optimizer's.
    inner = self._inner_or_none()
    if inner is None:
      return super()._deferred_dependencies
    return inner._deferred_dependencies  # pylint: disable=protected-access

  def _lookup_dependency(self, name, cached_dependencies=None):
    found = super()._lookup_dependency(name, cached_dependencies)
    inner = self._inner_or_none()
    if found is None and inner is not None and name not in _WRAPPER_CHILDREN:
      found = inner._lookup_dependency(name)  # pylint: disable=protected-access
      self._log_bare_format()
    return found

  def _create_or_restore_slot_variable(self, slot_variable_position,
                                       slot_name, variable):
    self._log_bare_format()
    return self._restore_target._create_or_restore_slot_variable(  # pylint: disable=protected-access
        slot_variable_position, slot_name, variable)

  def _log_bare_format(self) -> None:
    graph = tf.compat.v1.get_default_graph()
    logged = self.__dict__.setdefault("_bare_format_logged",
                                      weakref.WeakSet())
    if graph not in logged:
      logged.add(graph)
      tf.compat.v1.logging.warning(
          "Restoring a checkpoint of the optimizer without loss scaling into "
          "%s: its slots and state go to the wrapped optimizer; the checkpoint "
          "holds no loss-scale state, which starts from the manager's initial "
          "values.", type(self).__name__)


def track(owner: Trackable, child: Trackable, name: str) -> None:
  """Makes `child` part of `owner`'s checkpoint under `name`.

  A variable made in a graph is `owner`'s dependency in that graph only, so
  an owner used in several graphs saves, in each, that graph's state. Any
  other child (an optimizer, a manager) is a dependency in every graph;
  `overwrite=True` lets such a name be pointed at a new object. A restore
  requested before the child existed is applied now.

  Raises:
    TypeError: If `child` is a graph variable and `owner` can hold no
      per-graph dependencies (it is neither a `GraphScopedTrackable` nor a
      `tf.compat.v1.train.Optimizer`).
  """
  graph = _graph_of(child)
  if graph is None:
    owner._track_trackable(child, name=name, overwrite=True)  # pylint: disable=protected-access
    return
  if isinstance(owner, GraphScopedTrackable):
    owner._add_graph_dependency(graph, name, child)  # pylint: disable=protected-access
  elif isinstance(owner, _V1Optimizer):
    # The v1 optimizer's own per-graph table, keyed as it keys it.
    owner._non_slot_dict[(name, graph)] = child  # pylint: disable=protected-access
  else:
    raise TypeError(f"{type(owner).__name__} cannot hold per-graph state "
                    f"such as {child!r}.")
  owner._handle_deferred_dependencies(name=name, trackable=child)  # pylint: disable=protected-access


def hide_slot_owner_marker(names: Iterable[str]) -> List[str]:
  """Returns `names` (a `dir()` listing) without `get_slot_names`.

  For a wrapper's `__dir__`: TF's checkpoint writer then treats only the
  wrapped optimizer as the owner of its slots, and keys them under the
  wrapper's `base_optimizer` dependency, as TF's built-in wrapper does.
  Calling `wrapper.get_slot_names()` still works.
  """
  return [name for name in names if name != _SLOT_OWNER_MARKER]


def record_optimizer_state(scale_state: Iterable[tf.Variable],
                           optimizer_state: Iterable[tf.Variable]) -> None:
  """Adds the variables to this graph's two state collections, once each.

  Only checkpointed state (in GLOBAL_VARIABLES) is recorded: a variable kept
  out of every collection (a skip count, a floor streak) stays out.

  Args:
    scale_state: The loss-scale manager's variables.
    optimizer_state: The wrapped optimizer's variables (slots, beta powers).
  """
  graph = tf.compat.v1.get_default_graph()
  saved = {id(v) for v in
           graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)}
  for key, variables in ((SCALE_STATE, scale_state),
                         (OPTIMIZER_STATE, optimizer_state)):
    known = {id(v) for v in graph.get_collection(key)}
    for variable in variables:
      if id(variable) in saved and id(variable) not in known:
        known.add(id(variable))
        graph.add_to_collection(key, variable)


def recorded_state(key: str, graph: Optional[tf.Graph] = None
                   ) -> List[tf.Variable]:
  """The variables `record_optimizer_state` added under `key` in `graph`."""
  graph = graph or tf.compat.v1.get_default_graph()
  return list(graph.get_collection(key))


def checkpoint_keys(reader) -> Dict[str, str]:
  """Variable name -> key holding it, in the checkpoint `reader` reads.

  Args:
    reader: A `tf.train.load_checkpoint` reader.
  """
  if not reader.has_tensor(OBJECT_GRAPH_KEY):
    return {key: key for key in reader.get_variable_to_shape_map()}
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor(OBJECT_GRAPH_KEY))
  return {attribute.full_name: attribute.checkpoint_key
          for node in graph.nodes for attribute in node.attributes
          if attribute.full_name}
