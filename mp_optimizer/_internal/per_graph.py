"""Per-graph variable storage for state, and the state's mutex.

A manager built while a graph is the default makes its state right there,
under the current name scope, as contrib and TF did, so a program that runs
`global_variables_initializer()` before it builds the train op finds it
initialized. A manager built with no graph (eagerly, before the graph exists,
outside an Estimator `model_fn`) makes its state the first time a graph asks
for it, at that graph's root name scope. Either way there is one set of
variables per graph, and two graphs never share a variable.

Two train ops of one manager in one `sess.run` (a GAN's D and G), two
threads, or asynchronous workers sharing a parameter server update one
state concurrently; each update reads, decides and writes, so two could
read the same state and one be lost. `Mutex.run` makes one update atomic
(the dynamic scale takes it only on a step that may change more than its
good-step count, which it increments atomically without the mutex:
`managers.fast_path`):

```
lock    = MutexLock(mutex)      # after `after` (the step's finite flag) is done
ops     = build()               # every op built here waits for `lock`
release = ConsumeMutexLock(lock) after ops
```

`tf.CriticalSection` does the same, but it stores Python objects in graph
collections that `Saver` cannot serialize (a warning on every save), so the
public `tf.raw_ops` are used directly. The mutex lives on the device of the
state it guards, shared by name, so workers that place the state on one
parameter server share one mutex there. If a step fails while it holds the
lock (a `check_numerics` inside `build`), the lock is released with the step.
"""

import contextlib
import contextvars
import dataclasses
import weakref
from typing import Callable, Dict, Iterator, List, Sequence, Union

import tensorflow as tf

from mp_optimizer._internal import tensors
from mp_optimizer._internal import tracking
from mp_optimizer._internal.tensors import Built

_DEFERRED = contextvars.ContextVar("mp_optimizer_state_deferred",
                                   default=False)


@contextlib.contextmanager
def deferred_state() -> Iterator[None]:
  """Managers built inside make no state in their constructor.

  For a manager that will adopt existing variables (`PerGraphVariables.adopt`)
  right after it is built.
  """
  token = _DEFERRED.set(True)
  try:
    yield
  finally:
    _DEFERRED.reset(token)


@dataclasses.dataclass(frozen=True)
class VariableSpec:
  """One state variable: a scalar, or a vector given as a list.

  Attributes:
    name: Variable name (under the name scope current when a graph-mode
      constructor made it, else at the graph's root name scope), and the key
      it is tracked under for `tf.train.Checkpoint`.
    dtype: The variable's dtype.
    initial_value: Python number (or list of numbers) it starts from.
    checkpointed: True puts it in GLOBAL_VARIABLES (saved by a default Saver);
      False puts it in no collection: a plain Saver neither saves it nor
      expects it (checkpoints written before it existed restore), and no
      initializer resets it, not even another worker's
      `local_variables_initializer()` when it lives on a parameter server.
      It starts at its first write; read it with `tensors.read_or_zero`.
    any_length: A vector whose length may change: a restore or an assign
      may give it another length (its static shape is [None]).
  """
  name: str
  dtype: tf.DType
  initial_value: Union[float, List[float]]
  checkpointed: bool = True
  any_length: bool = False


class Mutex:
  """One mutex resource in one graph, created where its state lives."""

  def __init__(self, name: str, device: str):
    """Creates the mutex in the outermost graph, on `device`.

    Args:
      name: Full op name (made unique in the graph if taken); also the
        shared name, so every graph that builds the same program on a shared
        device (a parameter server) uses one mutex.
      device: The device of the state the mutex guards.
    """
    with tf.init_scope(), tf.device(device):
      graph = tf.compat.v1.get_default_graph()
      with graph.name_scope(None):
        unique = graph.unique_name(name, mark_as_used=False)
        self._handle = tf.raw_ops.MutexV2(shared_name=unique, name=unique)

  def run(self, build: Callable[[], Built],
          after: Sequence[Union[tf.Tensor, tf.Operation]] = ()) -> tf.Operation:
    """Builds `build()` to run with the mutex held; returns the release op.

    Args:
      build: Builds the state's reads and writes; returns what must finish
        before the mutex is released. What it reads from outside must be in
        `after` or be a variable handle, so the lock is held only while the
        state's own ops run.
      after: Tensors or ops from outside that `build` uses: they run before
        the mutex is taken.
    """
    with tf.control_dependencies(list(after)):
      lock = tf.raw_ops.MutexLock(mutex=self._handle)
    with tf.control_dependencies([lock]):
      built = build()
    with tf.control_dependencies(tf.nest.flatten(built)), \
        tf.device(self._handle.device):
      return tf.raw_ops.ConsumeMutexLock(mutex_lock=lock)


class PerGraphVariables:
  """Creates a fixed set of scalar variables lazily, once per graph."""

  def __init__(self, owner: "tracking.Trackable", specs: Sequence[VariableSpec]):
    self._owner = owner
    self._specs = tuple(specs)
    self._by_graph = weakref.WeakKeyDictionary()
    self._adopted = weakref.WeakKeyDictionary()
    self._mutexes = weakref.WeakKeyDictionary()

  def adopt(self, variables: Dict[str, tf.Variable]) -> None:
    """Uses existing graph variables as this state in their graph.

    TF's own `DynamicLossScale` creates its variables in its constructor, under
    the very names a checkpoint holds. When such an object is converted to
    ours, adopting its variables keeps those names (ours would otherwise be
    `current_loss_scale_1`). Eager variables are ignored.

    Raises:
      ValueError: If a name or dtype does not match this state.
    """
    specs = {s.name: s for s in self._specs if s.checkpointed}
    for name, variable in variables.items():
      if name not in specs or variable.dtype.base_dtype != specs[name].dtype:
        raise ValueError(
            f"cannot adopt {variable!r} as `{name}`: expected one of "
            f"{sorted(specs)} with dtypes "
            f"{[specs[n].dtype.name for n in sorted(specs)]}.")
      graph = getattr(variable, "graph", None)  # Eager variables: no graph.
      if isinstance(graph, tf.Graph):
        self._adopted.setdefault(graph, {})[name] = variable

  def create_if_graph(self) -> None:
    """Makes the state now if a graph is the default, under its name scope.

    For constructors: a manager built in graph mode has its variables from
    then on, named as contrib and TF named them (`scope/loss_scale` inside
    `variable_scope("scope")`). With no graph (eager), or inside
    `deferred_state()`, nothing is made until `get` is called.
    """
    graph = None if _DEFERRED.get() else tensors.outer_graph()
    if graph is not None:
      self._create_in_context(graph, root_scope=False)

  def get(self, api: str) -> Dict[str, tf.Variable]:
    """Returns this graph's variables by name, creating them on first use.

    Made on first use, they are made at the graph's root name scope. Under a
    `tf.distribute` strategy in replica context, creation moves to
    cross-replica context with `merge_call`, so each variable is one mirrored
    variable that every replica shares.
    """
    graph = tensors.require_graph(api)
    found = self._by_graph.get(graph)
    if found is not None:
      return found
    self._create_in_context(graph, root_scope=True)
    return self._by_graph[graph]

  def mutex(self, api: str) -> Mutex:
    """Returns this graph's mutex over the state, made on first use.

    It sits on the device of the first variable, named after it
    (`loss_scale_mutex`), so updates from every graph that shares that
    variable (workers of one parameter server) share the mutex too.
    """
    first = self.get(api)[self._specs[0].name]
    graph = first.graph
    found = self._mutexes.get(graph)
    if found is None:
      found = Mutex(f"{first.op.name}_mutex", first.device)
      self._mutexes[graph] = found
    return found

  def _create_in_context(self, graph: tf.Graph, root_scope: bool) -> None:
    if tf.distribute.has_strategy() and not tensors.in_cross_replica_context():
      # Every replica calls this, with one manager or one each (an
      # Estimator's model_fn runs per replica); merge_call runs one
      # replica's function, with every replica's state in `states`.
      tf.distribute.get_replica_context().merge_call(
          lambda strategy, states: _create_shared(
              strategy.experimental_local_results(states), graph, root_scope),
          args=(self,))
    else:
      self._create(graph, root_scope)

  def existing(self) -> Dict[str, tf.Variable]:
    """Returns this graph's variables if they exist yet, else an empty dict."""
    graph = tensors.outer_graph()
    return {} if graph is None else dict(self._by_graph.get(graph, {}))

  def _create(self, graph: tf.Graph, root_scope: bool) -> None:
    if graph in self._by_graph:  # A merge_call from another replica got here.
      return
    made = dict(self._adopted.get(graph, {}))
    # `init_scope` keeps the current name scope; `name_scope(None)` leaves it.
    with tf.init_scope(), (graph.name_scope(None) if root_scope
                           else contextlib.nullcontext()):
      for spec in self._specs:
        if spec.name in made:
          continue
        collections = ([tf.compat.v1.GraphKeys.GLOBAL_VARIABLES]
                       if spec.checkpointed else [])
        made[spec.name] = _variable(spec, collections)
    self._share(graph, made)

  def _share(self, graph: tf.Graph, made: Dict[str, tf.Variable]) -> None:
    self._by_graph[graph] = made
    for spec in self._specs:
      if spec.checkpointed:
        tracking.track(self._owner, made[spec.name], spec.name)


def _create_shared(states: Sequence[PerGraphVariables], graph: tf.Graph,
                   root_scope: bool) -> None:
  """Makes the first state's variables and gives them to the others."""
  # pylint: disable=protected-access
  states[0]._create(graph, root_scope)
  for state in states[1:]:
    if graph not in state._by_graph:
      state._share(graph, states[0]._by_graph[graph])


def _variable(spec: VariableSpec, collections: list) -> tf.Variable:
  return tf.compat.v1.Variable(
      initial_value=spec.initial_value, name=spec.name, dtype=spec.dtype,
      shape=tf.TensorShape([None]) if spec.any_length else None,
      trainable=False, use_resource=True, collections=collections,
      synchronization=tf.VariableSynchronization.ON_WRITE,
      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
