"""What the optimizer made, per graph, for the ancestry walk to stop at.

`scaling` records each scaled loss (and its multiplier S) and the unscaled
gradients it returns; `apply_gradients` records the optimizer's scale (its
variable's handles, or a fixed scale's constant), so hand-written scaling
with `opt.get_loss_scale()` is recognised; `allow_unscaled_gradients()`
opens a block in which gradients that never saw S are let through.
"""

import contextlib
import weakref
from typing import Iterable, Iterator, List

import tensorflow as tf

from mp_optimizer._internal import per_graph
from mp_optimizer._internal import tensors

RECORDS = weakref.WeakKeyDictionary()  # graph -> {"scaled": set, "unscaled": set}
# graph -> ids of the optimizers' scale tensors and scale variables' handles.
SOURCES = weakref.WeakKeyDictionary()
ALLOWED = weakref.WeakKeyDictionary()  # graph -> open allow_unscaled_gradients

def _record(kind: str, made: Iterable) -> None:
  for tensor in made:
    if tensor is None:
      continue
    tensor = tensors.values(tensor)
    RECORDS.setdefault(tensor.graph, {"scaled": set(), "unscaled": set()})[
        kind].add(tensor.ref())


def record_scaled_loss(scaled_loss: tf.Tensor) -> None:
  """Remembers a scaled loss `loss * S` and its multiplier S.

  The multiplier matters more: for a loss of static shape `tf.gradients`
  builds its seed from a constant shape and never reads the product, but the
  gradient of `loss * S` always reads S.
  """
  _record("scaled", [scaled_loss, scaled_loss.op.inputs[1]])


def scaled_losses(graph: tf.Graph) -> List[tf.Tensor]:
  """The scaled losses (and their multipliers) recorded in `graph`."""
  return [ref.deref() for ref in RECORDS.get(graph, {}).get("scaled", ())]


def record_unscaled(grads: Iterable) -> None:
  """Remembers gradients that were divided by the loss scale."""
  _record("unscaled", grads)


@contextlib.contextmanager
def allow_unscaled_gradients() -> Iterator[None]:
  """Lets `apply_gradients` built inside it take gradients that never saw S.

  `apply_gradients` refuses gradients computed from a loss that was not
  multiplied by the loss scale (see the module docstring). Where that is
  deliberate (a float32 loss term whose gradients cannot underflow, a
  reference run), build the apply inside this block. It covers every
  `apply_gradients` built in the current graph while it is open, replica
  functions of a `tf.distribute` strategy included. Gradients of a scaled
  loss that were never unscaled are refused even here: they would be
  applied S times too large.

  Example:

  ```python
  with mp_optimizer.allow_unscaled_gradients():
    train_op = opt.apply_gradients(zip(tf.gradients(loss, variables),
                                       variables))
  ```

  Raises:
    RuntimeError: Under eager execution.
  """
  graph = per_graph.require_graph("mp_optimizer.allow_unscaled_gradients")
  ALLOWED[graph] = ALLOWED.get(graph, 0) + 1
  try:
    yield
  finally:
    ALLOWED[graph] -= 1


def record_scale_source(loss_scale) -> None:
  """Remembers the optimizer's scale (a variable or a tensor) in its graph.

  A gradient whose ancestry reads it was scaled by hand
  (`tf.gradients(loss * opt.get_loss_scale(), ...)`), and a division by it
  unscales by hand (see `_walk`).
  """
  if isinstance(loss_scale, tf.Tensor):
    SOURCES.setdefault(loss_scale.graph, set()).add(id(loss_scale))
    return
  strategy = tf.distribute.get_strategy()
  for component in strategy.experimental_local_results(loss_scale):
    handle = component.handle  # Lives (and keeps its id) with its graph.
    SOURCES.setdefault(handle.graph, set()).add(id(handle))
