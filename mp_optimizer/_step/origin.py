"""Where an overflow started: the first op whose output was NaN or Inf.

With `OverflowReport(first_nonfinite_op=True)`, a skipped step prints a
second line naming the first op, in the order the graph was built (the
forward pass, then the backward pass), whose output held a NaN or an Inf:

```
mp_optimizer: first non-finite op: layer_13/MatMul (MatMul, float16, shape (4, 64)) Inf; 51 of 262 ops in the step's forward and backward pass non-finite
```

A NaN fed in the data names the placeholder it was fed to (the op that
holds it); an overflowing layer names that layer's op; a too-large scale
names the first backward op past 65504.

```
candidates = float outputs of every op the gradients depend on, in build order
per candidate c: code = 1 if any(isnan(c)) + 2 if any(isinf(c))   (0: finite)
print the first candidate with code != 0, and how many there were
```

The candidates are found once, when the step is built (ops inside while
loops, which nothing outside a loop can read, are left out). The checks sit
on the skipped side of the step's gate (`gate`): a finite step runs none of
them, but the executor keeps each candidate tensor until the step's verdict
is known, so a clean step may hold more memory (see BENCHMARKS.md).
"""

from typing import Any, Iterable, List

import tensorflow as tf

from mp_optimizer._internal import graph_walk
from mp_optimizer._internal import provenance
from mp_optimizer._internal import tensors

_FLOATS = frozenset((tf.float16, tf.bfloat16, tf.float32, tf.float64))
_KINDS = ("finite", "NaN", "Inf", "NaN+Inf")


def candidates(grads: Iterable[Any]) -> List[tf.Tensor]:
  """Float outputs of the ops the gradients and losses depend on, in order.

  The order is the order the ops were built: the forward pass, then the
  backward pass.

  Args:
    grads: The step's gradients (per replica under a strategy); None allowed.
  """
  starts = []
  strategy = (tf.distribute.get_strategy()
              if tensors.in_cross_replica_context() else None)
  for grad in grads:
    if grad is None:
      continue
    parts = (strategy.experimental_local_results(grad)
             if strategy is not None else [grad])
    starts.extend(tensors.values(part) for part in parts)
  if not starts:
    return []
  graph = starts[0].graph
  # The losses too: forward ops that only feed the loss's value.
  starts += provenance.recorded(graph).scaled_losses
  seen = set(graph_walk.walk_back([t.op for t in starts],
                                  graph_walk.op_inputs))
  order = {op: index for index, op in enumerate(graph.get_operations())}
  ops = sorted((op for op in seen if op in order and graph.is_fetchable(op)),
               key=order.__getitem__)
  return [t for op in ops for t in op.outputs
          if t.dtype.base_dtype in _FLOATS]


def _describe(tensor: tf.Tensor) -> str:
  shape = tensor.shape
  shown = ("unknown" if shape.rank is None else
           "(" + ", ".join("?" if d is None else str(d)
                           for d in shape.as_list()) +
           ("," if shape.rank == 1 else "") + ")")
  return (f"{tensor.op.name} ({tensor.op.type}, "
          f"{tensor.dtype.base_dtype.name}, shape {shown})")


def report(found: List[tf.Tensor], output_stream: Any) -> tf.Operation:
  """Prints the first non-finite candidate; build on the skipped side."""
  with tf.name_scope("first_nonfinite_op"):
    codes = tf.stack([
        tf.cast(tf.reduce_any(tf.math.is_nan(t)), tf.int32) +
        2 * tf.cast(tf.reduce_any(tf.math.is_inf(t)), tf.int32)
        for t in found])
    with tf.device("/device:CPU:0"):  # String ops run on CPUs only.
      bad = tf.where(codes > 0)[:, 0]
      count = tf.size(bad)
      first = tf.concat([bad, [0]], 0)[0]  # 0 when none: the line says so.
      described = tf.strings.join([
          tf.gather(tf.constant([_describe(t) for t in found]), first), " ",
          tf.gather(tf.constant(_KINDS), tf.gather(codes, first))])
      described = tf.where(count > 0, described,
                           "none (only the finite check's sum overflowed)")
      line = tf.strings.join([
          "mp_optimizer: first non-finite op: ", described, "; ",
          tf.strings.as_string(count), f" of {len(found)} ops in the step's "
          "forward and backward pass non-finite"])
      return tf.print(line, output_stream=output_stream)
