"""Which read of the loss scale S a tensor saw, found from the gradients.

A manager's scale may be read more than once per step, and another train op
of the same manager may change it between two reads. So `scaling` records
the read that scaled each loss and unscaled each gradient (in the graph's
`_internal.provenance` record), and whatever needs "the S these gradients
saw" walks back to them (`read_behind`) instead of reading again: the
step's signals, telemetry and overflow report, and `get_unscaled_gradients`
for the S of its loss.
"""

from typing import Dict, Iterable, Optional

import tensorflow as tf

from mp_optimizer._internal import graph_walk
from mp_optimizer._internal import provenance
from mp_optimizer._internal import tensors
from mp_optimizer._internal.tensors import Gradient


def _seen_by(kind: str, graph: tf.Graph) -> Dict[object, tf.Tensor]:
  """The tensors of `kind` that saw S in `graph` -> the read each saw."""
  record = provenance.recorded(graph)
  return record.unscaled if kind == "unscaled" else record.multipliers


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
  starts = [tensors.values(strategy.experimental_local_results(grad)[0])
            for grad in grads if grad is not None]
  starts = [start for start in starts if _seen_by(kind, start.graph)]
  for tensor in graph_walk.walk_back(starts, graph_walk.tensor_inputs):
    found = _seen_by(kind, tensor.graph).get(tensor.ref())
    if found is not None:
      return found
  return None
