"""Which read of the loss scale S a tensor saw, found from the gradients.

A manager's scale may be read more than once per step, and another train op
of the same manager may change it between two reads. So the reads that
scaled a loss and unscaled gradients are remembered (by `scaling`), and
whatever needs "the S these gradients saw" walks back to them
(`read_behind`) instead of reading again: the step's signals, telemetry and
overflow report, and `get_unscaled_gradients` for the S of its loss.
"""

import weakref
from typing import Iterable, Optional

import tensorflow as tf

from mp_optimizer._internal import tensors
from mp_optimizer._internal.tensors import Gradient

# kind -> graph -> {ref of a tensor that saw S: the read of S it saw}, for
# the unscaled gradients and the multipliers of the scaled losses.
_READS = {"scaled": weakref.WeakKeyDictionary(),
          "unscaled": weakref.WeakKeyDictionary()}


def remember(kind: str, made: Iterable[Optional[tf.Tensor]],
             loss_scale: tf.Tensor) -> None:
  """Records that the tensors `made` ("scaled" or "unscaled") saw `loss_scale`."""
  seen_by = _READS[kind].setdefault(loss_scale.graph, {})
  for tensor in made:
    if tensor is not None:
      seen_by[tensor.ref()] = loss_scale


def read_behind(kind: str, grads: Iterable[Optional[Gradient]]
                ) -> Optional[tf.Tensor]:
  """The read of S behind the first of `grads` that leads to one, or None.

  Walks back over data edges from each gradient in turn (on the first
  replica, in cross-replica context) to a tensor that saw S: an unscaled
  gradient (`kind` "unscaled"), passing whatever came after the unscale (a
  clip, a sum, an all-reduce); or the multiplier of a scaled loss ("scaled"),
  which the gradients of `loss * S` read.
  """
  strategy = tf.distribute.get_strategy()
  visited = set()
  for grad in grads:
    if grad is None:
      continue
    start = tensors.values(strategy.experimental_local_results(grad)[0])
    seen_by = _READS[kind].get(start.graph, {})
    pending = [start] if seen_by else []
    while pending:  # Depth first; each tensor once (loops have cycles).
      tensor = pending.pop()
      if id(tensor) not in visited:
        visited.add(id(tensor))
        if tensor.ref() in seen_by:
          return seen_by[tensor.ref()]
        pending.extend(tensor.op.inputs)
  return None
