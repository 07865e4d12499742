"""A graph-mode mutex: read-decide-write of shared state as one atomic step.

Two train ops of one manager in one `sess.run` (a GAN's D and G), two Python
threads running one train op, or asynchronous workers sharing a parameter
server all update one loss-scale state concurrently. Each update reads the
state, decides and writes; unless nothing else runs in between, two updates
can read the same state and one of them is lost. `Mutex.run` makes the whole
update one step of a sequence:

```
lock    = MutexLock(mutex)      # after `after` (the step's finite flag) is done
ops     = build()               # every op built here waits for `lock`
release = ConsumeMutexLock(lock) after ops
```

`tf.CriticalSection` does the same, but it stores Python objects in graph
collections that `Saver` cannot serialize (a warning on every checkpoint
save), so the three public `tf.raw_ops` are used directly. The mutex lives
on the device of the state it guards, shared by name: asynchronous workers
that place the state on one parameter server share one mutex there.
Everything `build` reads from outside must be listed in `after` (it is then
done before the lock is taken) or be a variable handle; the lock is held only
while the state's own ops run. If a step fails while it holds the lock (a
`check_numerics` inside `build`), the lock is released with the step.
"""

from typing import Callable, Sequence, Union

import tensorflow as tf

from mp_optimizer._internal.tensors import Built


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
    """Builds `build()` so that it runs with the mutex held; returns its op.

    Args:
      build: Builds the state's reads and writes; returns what must finish
        before the mutex is released.
      after: Tensors or ops from outside that `build` uses: they run before
        the mutex is taken.

    Returns:
      An op that completes when `build`'s ops have run and the mutex is
      released.
    """
    with tf.control_dependencies(list(after)):
      lock = tf.raw_ops.MutexLock(mutex=self._handle)
    with tf.control_dependencies([lock]):
      built = build()
    with tf.control_dependencies(tf.nest.flatten(built)), \
        tf.device(self._handle.device):
      return tf.raw_ops.ConsumeMutexLock(mutex_lock=lock)
