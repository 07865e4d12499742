"""Gradients of several variables that are the same values.

Backprop hands one tensor to every input of an add (`tf.add_n`, `+`): the
gradients of variables whose reads are added up (embeddings summed, as in a
BERT-style input layer or a bag of features) are that tensor, or a cast and
a reshape of it made once per variable. Those copies are equal entry for
entry. Stacked, they would be copied into one tensor per stack (Grappler
turns a stack of one tensor repeated into a `Tile`), unscaled and checked
as many times as there are variables; `unscale` makes each distinct value
once and hands it to every variable that has it.

Equal here is structural and exact: the same tensor, or the same chain of
`Cast`, `Reshape` and `Identity` ops with fully known static shapes applied
to the same tensor (each a pure function of its input and its static
output), unless that tensor may change with when it is read (a TF1
variable's reference or snapshot, a stateful op's output: `may_change`).
Anything else is taken as distinct.
"""

from typing import Hashable, List, Optional, Sequence

import tensorflow as tf

# Ops whose output has their first input's entries, in another shape or the
# same (some sharing its buffer).
SAME_ENTRIES = ("Reshape", "ExpandDims", "Squeeze", "Identity")
# Ops whose output is a function of their first input and their static
# output shape and dtype alone (with `Truncate` for `Cast`).
_PURE = ("Cast", "Reshape", "Identity")
# Ops that pass their first input's entries on, converted or not.
_PASSING_ON = SAME_ENTRIES + ("Cast",)
# How many such ops a key looks through.
_DEPTH = 4


def may_change(value: tf.Tensor) -> bool:
  """Whether `value` may hold other entries depending on when it is read: a
  TF1 variable's reference, its snapshot (an `Identity` sharing the
  variable's buffer) and what passes them on (`_PASSING_ON`), or the
  output of a stateful op."""
  while True:
    if value.dtype.base_dtype != value.dtype or value.op.op_def.is_stateful:
      return True
    if value.op.type not in _PASSING_ON:
      return False
    value = value.op.inputs[0]


def _key(value: tf.Tensor, depth: int = _DEPTH) -> Hashable:
  """A key equal for two tensors only if their values are equal (see the
  module docstring)."""
  op = value.op
  if (depth and op.type in _PURE and value.shape.is_fully_defined() and
      not may_change(value)):
    truncate = op.get_attr("Truncate") if op.type == "Cast" else None
    return (op.type, _key(op.inputs[0], depth - 1),
            tuple(value.shape.as_list()), value.dtype, truncate)
  return value.ref()


def first_equal(values: Sequence[Optional[tf.Tensor]]) -> List[int]:
  """For each of `values`, the index of the first one equal to it (its own
  index if none before it is; None entries keep theirs)."""
  seen = {}
  return [index if value is None else seen.setdefault(_key(value), index)
          for index, value in enumerate(values)]
