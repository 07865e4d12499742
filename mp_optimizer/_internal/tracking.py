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
"""

import weakref
from typing import Dict, Iterable, List, Optional

import tensorflow as tf

_SLOT_OWNER_MARKER = "get_slot_names"

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
