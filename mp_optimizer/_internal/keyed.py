"""Values kept per graph (or per object, or once per process), and nowhere else.

The step records facts about what it built (which read of S scaled a loss,
which gradients were unscaled, which signals a train op publishes) for the
readers that come later. Each fact belongs to one graph: it must die with
the graph, and a second graph must not see it. `PerGraph[T]` is the one
place such a value is kept: a weak map from the graph to a value made by a
factory the first time the graph asks for it. `PerObject[K, T]` is the same
for facts about one object (an optimizer, a wrapper) that must not keep the
object alive. `PerProcess[T]` holds what a process has exactly one of (the
process group `mp_optimizer.horovod.init()` joined), set once.

```
_RECORDS: PerGraph[Dict[str, Record]] = PerGraph(dict)
_RECORDS.of(graph)["name"] = record      # made on first use, for this graph
_RECORDS.peek(graph)                      # None when the graph made none
```
"""

import weakref
from typing import Callable, Generic, Iterator, Optional, TypeVar

import tensorflow as tf

K = TypeVar("K")
T = TypeVar("T")


class PerObject(Generic[K, T]):
  """A value of type T per live key, made by `factory` on first use.

  Keys are held weakly: a value goes when its key is collected. Keys must
  be hashable and weakly referenceable (graphs, optimizers, managers).
  """

  def __init__(self, factory: Callable[[], T]):
    self._factory = factory
    self._values: "weakref.WeakKeyDictionary[K, T]" = (
        weakref.WeakKeyDictionary())

  def of(self, key: K) -> T:
    """The value of `key`, made by the factory if it has none yet."""
    value = self._values.get(key)
    if value is None:
      value = self._factory()
      self._values[key] = value
    return value

  def peek(self, key: K) -> Optional[T]:
    """The value of `key`, or None if it has none (nothing is made)."""
    return self._values.get(key)

  def set(self, key: K, value: T) -> None:
    """Replaces the value of `key`."""
    self._values[key] = value

  def discard(self, key: K) -> None:
    """Forgets the value of `key`, if any."""
    self._values.pop(key, None)

  def keys(self) -> Iterator[K]:
    """The live keys that have a value (a snapshot: safe to change after)."""
    return iter(list(self._values.keys()))


class PerGraph(PerObject[tf.Graph, T]):
  """A value of type T per live graph; the default graph when none is named."""

  def of(self, graph: Optional[tf.Graph] = None) -> T:  # pylint: disable=arguments-renamed
    """The value of `graph` (default: the default graph), made on first use."""
    return super().of(_graph(graph))

  def peek(self, graph: Optional[tf.Graph] = None) -> Optional[T]:  # pylint: disable=arguments-renamed
    """The value of `graph` (default: the default graph), or None."""
    return super().peek(_graph(graph))


def _graph(graph: Optional[tf.Graph]) -> tf.Graph:
  return graph if graph is not None else tf.compat.v1.get_default_graph()


class PerProcess(Generic[T]):
  """One value of type T for the whole process, set once and never replaced."""

  def __init__(self, what: str):
    self._what = what
    self._value: Optional[T] = None

  def peek(self) -> Optional[T]:
    """The value, or None before it is set."""
    return self._value

  def set(self, value: T) -> None:
    """Sets the value.

    Raises:
      RuntimeError: If it is already set (a process has one `what`).
    """
    if self._value is not None:
      raise RuntimeError(f"This process already has its {self._what}.")
    self._value = value
