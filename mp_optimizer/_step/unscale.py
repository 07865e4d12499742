"""Gradients times 1/S: stacked, and held in 16 bits until the step applies.

Small gradients of one shape, dtype and device are unscaled together: they
are stacked, the stack is multiplied by 1/S once, and each variable gets its
slice back (`tf.unstack`, whose slices share the product's buffer). A model
of a few thousand small variables then runs a few kernels for the unscale,
not one per variable, and the finite check reads the stacks whole
(`managers.all_finite` finds them in the record). A group is cut into
`STACK_CHUNKS` stacks of consecutive gradients (which backprop makes
together in a stack of layers), each made once its own gradients exist:
a constant number of kernels, and the float32 tensor of one stack that the
check sums before the gate is an eighth of the group's. A group of eight
or fewer held gradients (see below) is stacked only if they are tiny, in
runs of about `HELD_STACK_ELEMENTS` entries (a layer's biases): a stack
costs six kernels in all (its copy, the check's two, and behind the gate
the cast, the multiply and the unstack), where each held gradient alone
costs four, and its copy is a few KiB.
Gradients of several variables that are equal (one tensor backprop handed
to every input of an add, or the same casts and reshapes of it:
`_step.equal_values`) are unscaled once, and each of those variables gets
that one product.
Gradients above `managers.finite.GROUP_MAX_ELEMENTS` entries, or of unknown
shape (most sparse gradients), are multiplied one by one: stacking them
would cost a copy and save no kernel worth it.

A step that may be skipped must hold every gradient until the finite
verdict is known. Most float32 gradients of a mixed-precision model are the
cast of a 16-bit one (the gradient of a float32 variable read through a
cast to float16 or bfloat16), so what is held is that 16-bit source, half
the bytes:

```
before the verdict:  held  = stack of the 16-bit sources (or one alone)
                     what the check reads: see below
behind the gate:     cast(held, float32) * (1/S), unstacked  # what applies
```

The product behind the gate is the arithmetic the unscale of the float32
gradients does (a cast of a 16-bit number to float32 is exact, and stacking
before or after it moves the same bits), so the update gets the same bits.
What the check reads of a held source before the gate (the source's own
bits where the manager's least scale allows it, else the sum of the
product) is `_step.held_check`'s to decide.

`unscale` records each held form and what the check reads of it in the
graph's record (`provenance.Held`); `behind_gate`, called by the step
under the gate's pivot, builds the product for the gradients that are still the ones
`unscale` made. Only a step that may be skipped stacks or holds
(its updates wait for the check anyway); one that applies every step
unscales each gradient on its own, so that each update can start as soon
as its gradient exists.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from mp_optimizer._internal import provenance
from mp_optimizer._step import equal_values
from mp_optimizer._step import held_check
from mp_optimizer._step import pacing
from mp_optimizer._internal import tensors
from mp_optimizer._internal.tensors import Gradient
from mp_optimizer.managers import finite

# float32's smallest normal number, 2**-126. A scale above 2**126 has a
# subnormal reciprocal, which TensorFlow flushes to zero on CPU: every unscaled
# gradient would be exactly 0 and the step would pass as finite.
SMALLEST_NORMAL_RECIPROCAL = 2.0**-126

# Stacks per group of alike gradients, at most (see the module docstring).
STACK_CHUNKS = 8
# Eight or fewer held gradients of one shape, each of at most this many
# entries, are stacked in runs of about this many: a stack of fewer than
# twice as many entries (4 KiB of float16, 8 KiB of float32 behind the
# gate) saves about three kernels per member. Larger groups are cut into
# `STACK_CHUNKS` runs whatever their size (docs/performance-history.md,
# "twelfth").
HELD_STACK_ELEMENTS = 1024

_SIXTEEN_BITS = (tf.float16, tf.bfloat16)


def _source_16_bit(value: Optional[tf.Tensor]) -> Optional[tf.Tensor]:
  """The 16-bit tensor a float32 gradient is the cast of, else None."""
  if (value is None or value.dtype != tf.float32 or value.op.type != "Cast" or
      value.op.inputs[0].dtype not in _SIXTEEN_BITS):
    return None
  return value.op.inputs[0]


def _unscale_dense(grad: tf.Tensor, inverse: tf.Tensor) -> tf.Tensor:
  if grad.dtype == tf.float32:
    return grad * inverse
  if grad.dtype == tf.float64:
    return grad * tf.cast(inverse, tf.float64)
  # 16-bit gradients: 1/S may not be representable there; multiply in float32.
  return tf.cast(tf.cast(grad, tf.float32) * inverse, grad.dtype)


def _from_held(held: provenance.Held) -> tf.Tensor:
  return tf.cast(held.source, tf.float32) * held.inverse


def _chunks(indices: List[int], held: bool, size: int) -> List[List[int]]:
  """`indices` (of gradients of `size` entries each) cut into at most
  `STACK_CHUNKS` runs of consecutive indices, of about equal length.

  Not `held`: at least two indices a run. `held`: at most one run per
  index, so that eight or fewer are not stacked (their float32 product
  waits for its sum, the smaller the better, and a stack is a copy), unless
  they are tiny (a few layers' biases): then no more runs than keep each
  near `HELD_STACK_ELEMENTS` entries. Runs of one are left out (not
  stacked).
  """
  if held:
    count = min(STACK_CHUNKS, len(indices))
    if count == len(indices):  # Eight or fewer: stacked only if tiny.
      count = min(count, -(-count * size // HELD_STACK_ELEMENTS))
  else:
    count = min(STACK_CHUNKS, len(indices) // 2)
  if not count:
    return []
  bounds = [len(indices) * i // count for i in range(count + 1)]
  runs = [indices[start:end] for start, end in zip(bounds, bounds[1:])]
  return [run for run in runs if len(run) > 1]


def _stack_groups(values: Sequence[Optional[tf.Tensor]],
                  sources: Sequence[Optional[tf.Tensor]]) -> List[List[int]]:
  """Indices of the values to unscale together (two or more alike each).

  Alike: one shape, dtype and device, and one dtype of 16-bit source (or
  none), so that a stack is all held or all not.
  """
  groups: Dict[Tuple, List[int]] = {}
  for index, (value, source) in enumerate(zip(values, sources)):
    key = None if value is None else finite.group_key(value)
    if key is not None:
      key += (None if source is None else source.dtype,)
      groups.setdefault(key, []).append(index)
  return [chunk for key, indices in groups.items()
          for chunk in _chunks(indices, key[-1] is not None,
                               values[indices[0]].shape.num_elements())]


def _stack(values: List[tf.Tensor], sources: List[Optional[tf.Tensor]],
           inverse: tf.Tensor, chain: held_check.Chain) -> tf.Tensor:
  """The product of the stacked `values` and 1/S (held, if `sources`)."""
  if sources[0] is None:
    return _unscale_dense(tf.stack(values, name="stacked_gradients"), inverse)
  return chain.product(tf.stack(sources, name="stacked_gradients"))


def unscale(grads: Sequence[Gradient], loss_scale: tf.Tensor,
            stack: bool = True,
            scale_floor: Optional[float] = None) -> List[Gradient]:
  """Returns `grads` multiplied by 1/S, in float32.

  `None` stays `None`. A `tf.IndexedSlices` stays sparse: only `.values` is
  multiplied, its indices and dense shape are passed through. If 1/S is not a
  normal float32 (S > 2**126, reachable with float32 gradients), 1/S is
  replaced by NaN: the step then counts as an overflow (skipped, and the scale
  shrinks) instead of applying all-zero gradients as if it were finite.

  Args:
    grads: Gradients of the scaled loss.
    loss_scale: The float32 scalar scale that loss was multiplied by.
    stack: Unscale small gradients of one shape together, and hold the
      16-bit sources of cast ones until the gate (see the module
      docstring); False multiplies each gradient on its own. The values are
      the same either way.
    scale_floor: The least S the manager can give (`scale_floor` of
      `managers.LossScaleManager`), or None if not known. At or above a
      16-bit dtype's `held_check.LOWEST_SCALE_ON_BITS`, held sources of
      that dtype are checked on their own bits (see `_step.held_check`).

  Returns:
    A new list, one entry per gradient.
  """
  inverse = tf.math.reciprocal(loss_scale)
  inverse = tf.where(inverse >= SMALLEST_NORMAL_RECIPROCAL, inverse,
                     float("nan"), name="inverse_loss_scale")
  values = [None if grad is None else
            tf.convert_to_tensor(tensors.values(grad)) for grad in grads]
  # Equal gradients of several variables are unscaled once, the first's
  # product handed to the others (`_step.equal_values`).
  first = equal_values.first_equal(values)
  values = [value if first[index] == index else None
            for index, value in enumerate(values)]
  sources = [_source_16_bit(value) if stack else None for value in values]
  record = provenance.of()  # Of the default graph, where all this is built.
  chain = held_check.Chain(record, inverse, scale_floor if stack else None)
  unscaled = list(values)
  # Last variables first: backprop makes their gradients first.
  groups = _stack_groups(values, sources) if stack else []
  for indices in sorted(groups, key=lambda indices: -indices[0]):
    whole = _stack([values[i] for i in indices],
                   [sources[i] for i in indices], inverse, chain)
    made = provenance.Stack(whole, tuple(tf.unstack(
        whole, num=len(indices), name="unscaled_gradients")))
    for position, (index, piece) in enumerate(zip(indices, made.slices)):
      unscaled[index] = piece
      record.stacks[piece.ref()] = (made, position)
  for index in reversed(range(len(values))):
    value, source = values[index], sources[index]
    if value is None or unscaled[index] is not value:
      continue
    unscaled[index] = (_unscale_dense(value, inverse) if source is None
                       else chain.product(source))
  unscaled = [unscaled[index] for index in first]
  for value in unscaled:
    if value is not None:
      record.unscaled[value.ref()] = loss_scale
  return [None if grad is None else tensors.with_values(grad, new)
          for grad, new in zip(grads, unscaled)]


def behind_gate(grads: Sequence[Gradient]
                ) -> Tuple[List[Gradient], List[pacing.Unit]]:
  """`grads`, each one `unscale` made from a held form made again here.

  Called under the gate's pivot, so the float32 products exist only once
  the step applies; the ones `unscale` made are then read by the finite
  check alone. The values are the same bits. Other gradients (clipped,
  accumulated, computed by hand) are returned as they are.

  Returns:
    The gradients, and the products made here, in the order made, for
    `pacing.pace` once the inner optimizer has read them.
  """
  values = [None if grad is None else tensors.values(grad) for grad in grads]
  if not any(isinstance(value, tf.Tensor) for value in values):
    return list(grads), []
  record = provenance.recorded(next(
      value for value in values if isinstance(value, tf.Tensor)).graph)
  remade: Dict[int, List[tf.Tensor]] = {}  # id(stack) -> its slices, again
  singles: Dict[Any, tf.Tensor] = {}  # held gradient's ref -> its product
  units: List[pacing.Unit] = []
  result = list(grads)
  for index, value in enumerate(values):
    if not isinstance(value, tf.Tensor):
      continue
    stack, position = record.stacks.get(value.ref(), (None, None))
    if stack is not None and stack.whole.ref() in record.held:
      if id(stack) not in remade:
        product = _from_held(record.held[stack.whole.ref()])
        remade[id(stack)] = tf.unstack(product, num=len(stack.slices),
                                       name="unscaled_gradients")
        units.append(pacing.Unit(product.op.inputs[0].op,
                                 tuple(remade[id(stack)])))
      new = remade[id(stack)][position]
    elif value.ref() in record.held:
      if value.ref() not in singles:  # Equal gradients share one product.
        singles[value.ref()] = _from_held(record.held[value.ref()])
        units.append(pacing.Unit(singles[value.ref()].op.inputs[0].op,
                                 (singles[value.ref()],)))
      new = singles[value.ref()]
    else:
      continue
    result[index] = tensors.with_values(grads[index], new)
  return result, units
