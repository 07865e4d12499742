"""Behind the gate, a bounded number of held products alive at a time.

A gradient held in 16 bits (`_step.unscale`) becomes float32 only behind
the gate: `cast(held) * (1/S)`, one product per held stack or per large
held gradient (a unit). When the gate opens every unit is ready at once,
and the executor may make all their products before the updates that read
them run: a whole group's float32 gradients alive together (up to 1.35x
bare's step memory on the benchmark's many small variables). `pace` orders
the casts instead, in the order `unscale` made them:

```
budget = IN_FLIGHT * (the largest unit's bytes)
for each unit k:
  window(k) = the longest run of units ending at k within budget (k alone
              if it is larger)
  cast(k) waits for cast(k - 1), and for every op that reads the product
  of each unit that is in window(k - 1) but not in window(k)
```

An op that reads a product is an update (or whatever the inner optimizer
reads the gradient with); once all of them ran, that product's buffer is
free. By induction over the casts, each waiting for the one before, every
unit before window(k) is done when cast(k) runs, so once it has run the
products alive are window(k)'s: at most the budget's bytes, or one unit
larger than it (the multiply by 1/S reuses the cast's buffer; where it
could not, one more product's bytes for a moment). With a budget of two,
one unit's updates run while the next unit's product is made. No kernel is added, only
control edges: about one per update.

A product of unknown shape is left out (its bytes are not known), and
products adding up to less than `MIN_BYTES` are left unordered: all of
them alive cost less than a quarter MiB, while ordering units of one small
update each costs more time than that memory is worth (at 10 variables of
64x64, 82 KiB of products, it made an Adam step up to 1.2x slower).

An edge from a reader to a later cast is only sound if that reader runs
whenever the cast's step applies, and does not itself wait for that cast.
`pace` adds none unless both hold, checked over the ops built since the
first cast (the inner optimizer's): none of them may be a control-flow op (a
Switch makes a reader that may not run; a Merge, a loop frame or a
functional If/While another schedule), no reader may read the products of
two of the units (a global norm of every gradient, or an all-reduce of them
packed together: the order would wait for itself), and every reader is on
its unit's device (an edge across devices would cost a Send and a Recv).
Otherwise the units are left unordered. Under `MirroredStrategy` a product
is read by the sum of every replica's same gradient, on one device: that
replica's casts wait for those sums, which wait for the other replicas'
products of the same units, never later ones.
"""

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from mp_optimizer._internal import graph_walk
from mp_optimizer._internal import tf_private

# The budget of products alive at a time, in units of the largest one.
IN_FLIGHT = 2
# Products adding up to fewer bytes than this are not ordered.
MIN_BYTES = 256 * 1024

_CONTROL_FLOW_TYPES = frozenset((
    "Switch", "RefSwitch", "Merge", "RefMerge", "Enter", "RefEnter", "Exit",
    "RefExit", "NextIteration", "RefNextIteration", "LoopCond", "If",
    "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase"))
_MANY = -1  # Reads the products of more than one unit.


@dataclasses.dataclass(frozen=True)
class Unit:
  """One product made behind the gate.

  Attributes:
    cast: The op casting the held 16-bit tensor to float32 (the first op of
      the product).
    outputs: What the inner optimizer is given of it: the product, or the
      slices of a stack's product (which share its buffer).
  """
  cast: tf.Operation
  outputs: Tuple[tf.Tensor, ...]

  @property
  def bytes(self) -> Optional[int]:
    """The product's bytes, or None if its shape is not known."""
    size = self.cast.outputs[0].shape.num_elements()
    return None if size is None else 4 * size


def _reach(new_ops: Sequence[tf.Operation],
           units: Sequence[Unit]) -> Optional[Dict[tf.Operation, int]]:
  """For each op of `new_ops` that reads a unit's product, that unit's index
  (`_MANY` for more than one); None if a control-flow op is among them."""
  reach: Dict[tf.Operation, int] = {
      unit.cast: index for index, unit in enumerate(units)}
  for op in new_ops:
    if op.type in _CONTROL_FLOW_TYPES:
      return None
    found = {reach[source]
             for source in graph_walk.op_and_control_inputs(op)
             if source in reach}
    if op in reach:
      found.add(reach[op])
    if found:
      reach[op] = found.pop() if len(found) == 1 else _MANY
  return reach


def _window_starts(sizes: Sequence[int], budget: int) -> List[int]:
  """For each unit k, where window(k) begins (see the module docstring)."""
  starts, first, total = [], 0, 0
  for k, size in enumerate(sizes):
    total += size
    while first < k and total > budget:
      total -= sizes[first]
      first += 1
    starts.append(first)
  return starts


def _readers(units: Sequence[Unit],
             start: int) -> Optional[List[List[tf.Operation]]]:
  """Each unit's readers, or None if an edge from them would not be sound
  (see the module docstring)."""
  reach = _reach(units[0].cast.graph.get_operations()[start:], units)
  if reach is None:
    return None
  readers = []
  for index, unit in enumerate(units):
    ops = {reader for output in unit.outputs for reader in output.consumers()}
    if any(reach.get(op) != index or op.device != unit.cast.device
           for op in ops):
      return None
    readers.append(sorted(ops, key=lambda op: op.name))
  return readers


def pace(units: Sequence[Unit], start: int) -> bool:
  """Orders the casts of `units` as the module docstring says, if sound.

  Args:
    units: The products made behind the gate, in the order made.
    start: `graph.version` before the first of them was made; every op
      built since (the inner optimizer's too) is checked.

  Returns:
    Whether any edge was added.
  """
  units = [unit for unit in units if unit.bytes is not None]
  sizes = [unit.bytes for unit in units]
  if sum(sizes) < MIN_BYTES:
    return False
  starts = _window_starts(sizes, IN_FLIGHT * max(sizes))
  if not any(starts):  # Every unit fits in the first window.
    return False
  readers = _readers(units, start)
  if readers is None:
    return False
  for index in range(1, len(units)):
    cast = units[index].cast
    tf_private.add_control_input(cast, units[index - 1].cast)
    for done in range(starts[index - 1], starts[index]):
      for reader in readers[done]:
        tf_private.add_control_input(cast, reader)
  return True
