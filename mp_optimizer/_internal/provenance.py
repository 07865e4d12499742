"""What the step built in a graph, for the parts that read it later.

Scaling a loss and unscaling its gradients happen in `compute_gradients`;
the parts that need to know what they made run later, in `apply_gradients`
or a user's `get_unscaled_gradients`: the checks of the gradients
(`_step.checks`), the S a step uses (`_step.reads`), the finite check and
the telemetry (the stacks to read whole), the overflow report (the losses
behind the gradients), the apply behind the gate (the 16-bit forms to
unscale again there). They learn it here, from one record per graph that
`_step.scaling` and `_step.unscale` write as they build, never by matching the graph's op types.

```
record = provenance.of(graph)        # made on first use: the writers
record.unscaled[grad.ref()] = S      # which read of S unscaled this gradient
provenance.recorded(graph)           # the readers: the record, or an empty one
```

The record lives here, below the managers, because the finite check
(`managers.finite`, layer 1) reads the stacks and must not import the step.
"""

import dataclasses
from typing import Dict, List, Optional, Set, Tuple

import tensorflow as tf

from mp_optimizer._internal.keyed import PerGraph

Ref = object  # What `tf.Tensor.ref()` returns: hashable, one per tensor.


@dataclasses.dataclass(frozen=True)
class Stack:
  """Gradients unscaled as one tensor: slice i of `whole` is `slices[i]`.

  Attributes:
    whole: The product [k, ...] of the stacked gradients and 1/S.
    slices: The k gradients `tf.unstack` handed out, in order.
  """
  whole: tf.Tensor
  slices: Tuple[tf.Tensor, ...]


@dataclasses.dataclass(frozen=True)
class Held:
  """What an unscaled gradient (or stack) is made from, held until the gate.

  The float32 product is `cast(source, float32) * inverse`; a step that
  applies it makes that product again behind its gate (`_step.unscale`).

  Attributes:
    source: The 16-bit gradient (or stack of them) the product is cast from.
    inverse: The float32 scalar 1/S it is multiplied by (NaN for an S whose
      reciprocal is not a normal float32).
    total: A float32 sum the finite check reads rather than summing the
      product again: of the product's entries, or of the source's where
      `flags` guard it (`_step.held_check`); or None.
    flags: Scalar bools the check also reads, all True only if every entry
      of the product is finite (made from `source` and 1/S alone, so the
      product is needed only behind the gate), or empty.
  """
  source: tf.Tensor
  inverse: tf.Tensor
  total: Optional[tf.Tensor] = None
  flags: Tuple[tf.Tensor, ...] = ()


@dataclasses.dataclass
class Provenance:
  """What scaling and unscaling made in one graph.

  Attributes:
    scaled_losses: Each `loss * S`, and the multiplier (S cast to the loss's
      dtype) it was made with.
    multipliers: Each multiplier -> the read of S it was cast from.
    unscaled: Each unscaled gradient (a sparse one's values) -> the read of S
      it was unscaled with.
    stacks: Each slice of a stack `unscale` made -> that stack and the
      slice's position in it.
    held: Each unscaled gradient or stack product that is the cast of a
      16-bit source times 1/S -> that source and 1/S.
    scale_sources: `id`s of the optimizers' scale tensors and scale
      variables' handles (hand-written scaling reads them).
    allowed: How many `allow_unscaled_gradients()` blocks are open.
  """
  scaled_losses: List[tf.Tensor] = dataclasses.field(default_factory=list)
  multipliers: Dict[Ref, tf.Tensor] = dataclasses.field(default_factory=dict)
  unscaled: Dict[Ref, tf.Tensor] = dataclasses.field(default_factory=dict)
  stacks: Dict[Ref, Tuple[Stack, int]] = dataclasses.field(
      default_factory=dict)
  held: Dict[Ref, Held] = dataclasses.field(default_factory=dict)
  scale_sources: Set[int] = dataclasses.field(default_factory=set)
  allowed: int = 0


_RECORDS: PerGraph[Provenance] = PerGraph(Provenance)


def of(graph: Optional[tf.Graph] = None) -> Provenance:
  """The record of `graph` (default: the default graph), made on first use."""
  return _RECORDS.of(graph)


def recorded(graph: Optional[tf.Graph] = None) -> Provenance:
  """The record of `graph`, or an empty one (not kept) if it has none."""
  found = _RECORDS.peek(graph)
  return Provenance() if found is None else found


def total_of(value: tf.Tensor) -> Optional[tf.Tensor]:
  """The recorded sum of `value`'s entries (see `Held.total`), else None."""
  held = recorded(value.graph).held.get(value.ref())
  return None if held is None else held.total


def flags_of(value: tf.Tensor) -> Tuple[tf.Tensor, ...]:
  """The recorded finite flags of `value` (see `Held.flags`), else ()."""
  held = recorded(value.graph).held.get(value.ref())
  return () if held is None else held.flags


def whole_stacks(values: List[tf.Tensor]) -> List[Tuple[tf.Tensor, List[int]]]:
  """The recorded stacks whose every slice is in `values` exactly once.

  Returns (the stack's whole tensor, the indices into `values` of its
  slices in slice order) for each, so that the whole tensor can stand for
  those values (one reduction over it instead of one per slice).
  """
  if not values:
    return []
  stacks = recorded(values[0].graph).stacks
  found: Dict[int, Tuple[Stack, Dict[int, List[int]]]] = {}  # by id(stack)
  for index, value in enumerate(values):
    stack, position = stacks.get(value.ref(), (None, None))
    if stack is not None:
      places = found.setdefault(id(stack), (stack, {}))[1]
      places.setdefault(position, []).append(index)
  return [(stack.whole, [places[i][0] for i in range(len(stack.slices))])
          for stack, places in found.values()
          if len(places) == len(stack.slices) and
          all(len(at) == 1 for at in places.values())]
