"""Walking back over a graph: from given tensors or ops to what they read.

Every walk of the library over the op graph (what a gradient depends on,
which read of S it saw, which ops a variable's initializer needs) is this
one depth-first walk, written once and without recursion (a model's graph
holds far more ops than Python's recursion limit):

```
stack = starts, the first on top
while stack:
  node = stack.pop()
  if node was seen: continue            # each node once: loops have cycles
  yield node                            # pre-order
  if not stop(node): push inputs(node)  # the last input is visited first
```

A start is walked to its end before the next start is visited. Nodes are
told apart by identity (tensors are not hashable under TF2 behaviour; a
graph keeps its ops and tensors alive, so their ids are stable during a
walk). What "inputs" means is the caller's: `op_inputs` (data edges),
`op_and_control_inputs`, `tensor_inputs`, or its own function (a walk that
skips an edge, or follows a numerator only).
"""

from typing import Callable, Iterable, Iterator, List, Optional, TypeVar

import tensorflow as tf

N = TypeVar("N")


def op_inputs(op: tf.Operation) -> List[tf.Operation]:
  """The ops whose outputs `op` reads (data edges)."""
  return [tensor.op for tensor in op.inputs]


def op_and_control_inputs(op: tf.Operation) -> List[tf.Operation]:
  """The ops `op` reads or waits for (data, then control edges)."""
  return op_inputs(op) + list(op.control_inputs)


def tensor_inputs(tensor: tf.Tensor) -> List[tf.Tensor]:
  """The tensors read by the op that made `tensor`."""
  return list(tensor.op.inputs)


def walk_back(starts: Iterable[N], inputs: Callable[[N], Iterable[N]],
              stop: Optional[Callable[[N], bool]] = None,
              post_order: bool = False) -> Iterator[N]:
  """Yields every node reachable back from `starts`, each once.

  Args:
    starts: Where the walk begins, visited in this order.
    inputs: A node's inputs (the edges to follow back).
    stop: Called once per node when it is first visited; True keeps the
      walk from following that node's inputs (the node is still yielded).
      None follows every edge.
    post_order: Yield a node once everything the walk reached from it has
      been yielded (inputs before the nodes that read them, except around
      a cycle), instead of when it is first visited. A stopped node is
      yielded at once.

  Yields:
    The nodes, in the order described above.
  """
  stack = [(node, False) for node in reversed(list(starts))]
  seen = set()
  while stack:
    node, finished = stack.pop()
    if finished:
      yield node
      continue
    if id(node) in seen:
      continue
    seen.add(id(node))
    if not post_order:
      yield node
    if stop is not None and stop(node):
      if post_order:
        yield node
      continue
    if post_order:
      stack.append((node, True))
    stack.extend((source, False) for source in inputs(node))
