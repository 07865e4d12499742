"""The finite check: one boolean over every gradient of a step.

TensorFlow's built-in check builds two ops per gradient (`is_finite`, then
`reduce_all`) and writes a boolean tensor as large as the gradient. Here every
gradient is read once, and a sum stands in for the test: any NaN makes a sum
NaN, any Inf makes it Inf or (with an Inf of the other sign) NaN, and neither
ever turns finite again, so one `is_finite` on the grand total catches every
non-finite entry.

Gradients that are all the slices of one stack the optimizer's unscale made
(it hands out small gradients as slices of one product, and records each
stack in the graph's `_internal.provenance` record) are checked on that
product: one `reduce_sum` for all of them. Where the unscale made the
check's reading already (for a stack or a gradient cast from 16 bits, which
it holds in 16 bits until the gate: `_internal.provenance.Held`), that is
read instead: a sum (of the product, or of the 16-bit source itself), and
boolean flags where it checked the source's bits (`_step.held_check`); the
flags are joined to the verdict with one `reduce_all`. Only recorded stacks
count: the slices of any other `tf.unstack` are checked as gradients of
their own. Other gradients of
one static shape, dtype and device are first added elementwise with `add_n`,
then reduced with one `reduce_sum` per group, so a model with many variables
of a few shapes costs a few ops, not a few per variable (per-op overhead, not
arithmetic, dominates small tensors). Gradients with more than
`GROUP_MAX_ELEMENTS` entries, or whose static shape is not fully known (e.g.
the `.values` of most sparse gradients), are reduced on their own: for them
an `add_n` would only add memory traffic. No `add_n` takes more than
`ADD_N_MAX_INPUTS` tensors (larger sums become a tree): one op with thousands
of inputs made Grappler's first optimization of the graph grow with the
square of their number (BENCHMARKS.md, "First step").

float32 and float64 gradients are summed in their own dtype; 16-bit ones are
cast to float32 first, so their sums do not overflow near 65504. The only
extra verdict: a step whose finite gradients add up, elementwise or in total,
beyond the range of that dtype (about 3.4e38 for float32) is treated as
non-finite and skipped; with such gradients the update itself would overflow
(Adam squares them), and a clip by global norm would see an Inf norm. Held
16-bit gradients checked on their bits are exempt: their verdict is the
elementwise one.

Sparse gradients (`tf.IndexedSlices`) are checked on `.values` only, never
densified. `None` gradients are ignored, and a tensor given more than once
(the gradient of several variables) is read once.
"""

from typing import Any, Dict, Iterable, List, Optional, Tuple

import tensorflow as tf

from mp_optimizer._internal import provenance
from mp_optimizer._internal import tensors
from mp_optimizer._internal.tensors import Gradient

# Gradients of up to this many entries are added to others of their shape
# before the reduction (see BENCHMARKS.md for the measurement behind it).
GROUP_MAX_ELEMENTS = 2**16

# Inputs of one `add_n`, at most (see the module docstring).
ADD_N_MAX_INPUTS = 256

_SUM_DTYPES = (tf.float32, tf.float64)


def _summable(values: tf.Tensor) -> tf.Tensor:
  values = tf.convert_to_tensor(values)
  if values.dtype not in _SUM_DTYPES:
    # float16/bfloat16 sums would overflow near 65504; sum in float32.
    values = tf.cast(values, tf.float32)
  return values


def group_key(values: tf.Tensor) -> Optional[Tuple]:
  """(shape, dtype, device) of a tensor small enough to add to others, else None."""
  shape = values.shape
  if not shape.is_fully_defined() or shape.num_elements() > GROUP_MAX_ELEMENTS:
    return None
  return (tuple(shape.as_list()), values.dtype, values.device)


def _groups(grads: Iterable[Gradient]
            ) -> Tuple[List[List[tf.Tensor]], List[tf.Tensor], List[tf.Tensor]]:
  """Splits non-None gradients into lists that `add_n` can add, the sums
  the unscale made already (`provenance.total_of`), and the finite flags it
  made from 16-bit sources (`provenance.flags_of`)."""
  # One tensor given for several variables is read once: its entries are
  # finite or not once, and added to itself it could overflow.
  values = list({value.ref(): value for value in (
      tensors.values(grad) for grad in grads if grad is not None)}.values())
  stacks = provenance.whole_stacks(values)
  groups: List[List[tf.Tensor]] = []
  totals: List[tf.Tensor] = []
  flags: Dict[Any, tf.Tensor] = {}  # by ref: one guard serves many sources

  def made_already(value: tf.Tensor) -> bool:
    total, found = provenance.total_of(value), provenance.flags_of(value)
    if total is not None:
      totals.append(total)
    flags.update((flag.ref(), flag) for flag in found)
    return total is not None or bool(found)

  for whole, _ in stacks:
    if not made_already(whole):
      groups.append([_summable(whole)])
  stacked = {index for _, indices in stacks for index in indices}
  grouped: Dict[Tuple, List[tf.Tensor]] = {}
  for index, value in enumerate(values):
    if index in stacked or made_already(value):
      continue
    value = _summable(value)
    key = group_key(value)
    if key is None:
      groups.append([value])
    elif key in grouped:
      grouped[key].append(value)
    else:
      grouped[key] = [value]
      groups.append(grouped[key])
  return groups, totals, list(flags.values())


def _add(tensors: List[tf.Tensor]) -> tf.Tensor:
  """Their sum, by `add_n`s of at most `ADD_N_MAX_INPUTS` inputs each."""
  while len(tensors) > 1:
    tensors = [chunk[0] if len(chunk) == 1 else tf.add_n(chunk)
               for chunk in (tensors[i:i + ADD_N_MAX_INPUTS]
                             for i in range(0, len(tensors), ADD_N_MAX_INPUTS))]
  return tensors[0]


def all_finite(grads: Iterable[Gradient]) -> tf.Tensor:
  """Returns a scalar bool tensor: True iff every gradient entry is finite.

  Args:
    grads: Gradients as returned by `compute_gradients` (Tensors,
      `tf.IndexedSlices` or None), in one replica.

  Returns:
    A scalar `tf.bool` tensor. With no non-None gradient it is constant True.
    It is also False when finite gradients add up beyond the range of their
    summing dtype, except held 16-bit ones checked on their bits (see the
    module docstring).
  """
  sums_by_dtype: Dict[tf.DType, List[tf.Tensor]] = {}
  groups, totals, flags = _groups(grads)
  for group_sum in totals + [tf.reduce_sum(_add(group)) for group in groups]:
    sums_by_dtype.setdefault(group_sum.dtype, []).append(group_sum)
  totals = [_add(sums) for sums in sums_by_dtype.values()]  # float32, 64
  if not flags:
    if not totals:
      return tf.constant(True, name="all_finite")
    if len(totals) == 1:
      return tf.math.is_finite(totals[0], name="all_finite")
    return tf.math.logical_and(tf.math.is_finite(totals[0]),
                               tf.math.is_finite(totals[1]), name="all_finite")
  # A held source's flags come with its sum or with the flag on 1/S: two
  # or more, so always a stack.
  flags += [tf.math.is_finite(total) for total in totals]
  return tf.reduce_all(tf.stack(flags), name="all_finite")


def all_finite_in_sync(grads: Iterable[Any]) -> tf.Tensor:
  """Like `all_finite`, but one verdict shared by every replica.

  In cross-replica context under a `tf.distribute` strategy, `grads` hold
  per-replica values. Each replica checks its own gradients, the flags are
  summed across replicas (and workers), and the step counts as finite only if
  every replica was finite. Elsewhere this is `all_finite`.

  Args:
    grads: Gradients (possibly per-replica values), None allowed.

  Returns:
    A scalar `tf.bool` tensor, identical on every replica.
  """
  grads = list(grads)
  if not tensors.in_cross_replica_context():
    return all_finite(grads)
  strategy = tf.distribute.get_strategy()
  if strategy.num_replicas_in_sync == 1:
    return all_finite(
        None if g is None else strategy.experimental_local_results(g)[0]
        for g in grads)
  flags = strategy.extended.call_for_each_replica(
      lambda *local: tf.cast(all_finite(local), tf.float32), args=tuple(grads))
  finite_count = strategy.reduce(tf.distribute.ReduceOp.SUM, flags, axis=None)
  return tf.equal(finite_count, float(strategy.num_replicas_in_sync),
                  name="all_replicas_finite")
