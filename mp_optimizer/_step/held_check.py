"""What the finite check reads of a gradient held in 16 bits.

A float32 gradient that is the cast of a 16-bit one is held as that source
until the verdict (`_step.unscale`); its float32 product with 1/S is made
behind the gate. Before the gate the check reads either the source's own
bits or the sum of the product, depending on the least scale the manager
can give (`scale_floor`, a `managers.LossScaleManager` property). The
product itself is made before the gate only if something else reads it
there (a clip whose result is checked, telemetry, the amax manager's
`gradient_amax`):

- At or above `LOWEST_SCALE_ON_BITS` for the source's dtype (2**-112 for
  float16, 1 for bfloat16: every finite 16-bit value times 1/S is then a
  finite float32), the source is read: `reduce_all(is_finite(held))`
  (through its reshapes: `_entries_of`) for a held tensor (a stack or one
  gradient) for which `reads_bits` holds
  (small ones, large ones), the float32 `reduce_sum(cast(held))` for a
  float16 one in between (where `is_finite` on 16 bits costs more on CPU;
  finite iff every entry is: float16 values cannot add up past float32's
  range). A flag
  `1/S <= 2**112` (float16) or `1/S <= 1` (bfloat16), one per step and
  dtype, joins them, so a scale found under that bound when the step runs
  (a restored or assigned value) skips the step instead of trusting the
  bits; it is False for a NaN 1/S too (`unscale` makes 1/S NaN unless it
  is a normal, positive float32). The verdict on these gradients is the
  elementwise one.
- Otherwise (a lower floor, a hand-written manager, which gives none, or a
  bfloat16 source in between, whose sum could overflow where its products
  would not) it is `reduce_sum(cast(held) * (1/S))`, the sum of the product
  itself, as for any other gradient.

Each float32 tensor a sum reads, and each product, waits for the sum made
before it (last variables first, as backprop makes them), so whatever
order the executor picks, one of them at a time waits for its sum. A
source read by `is_finite` makes no float32 tensor before the gate, and
waits for nothing.
"""

from typing import Dict, List, Optional

import tensorflow as tf

from mp_optimizer._internal import provenance
from mp_optimizer._step import equal_values
from mp_optimizer.managers import finite

# Per 16-bit dtype, the least S at which float32(x) * (1/S) is finite for
# every finite x of that dtype: float16's largest, 65504 < 2**16, times
# 2**112 stays below float32's largest (2**128 - 2**104); bfloat16 reaches
# float32's largest, so 1/S must not exceed 1.
LOWEST_SCALE_ON_BITS = {tf.float16: 2.0**-112, tf.bfloat16: 1.0}

# Held tensors of at most this many entries are read by `is_finite` (see the
# module docstring): there it costs what the float32 sum costs, and keeps
# that sum's float32 copy and its wait on the sum before out of the step
# (docs/performance-history.md, "seventh").
SMALL_BITS_MAX_ELEMENTS = 8192
# Float16 held tensors above this many entries are read by `is_finite`
# again. On CPU, TensorFlow (2.15 and 2.21) runs the float32 `Sum` of the
# cast on one thread up to about 108,000 entries, but `All` over the flags
# only up to about 21,000; in between, handing half of `All` to a second
# thread costs more than the whole cast and sum (at 106,496 entries, 2
# cores: `IsFinite` + `All` 57.5 us, `Cast` + `Sum` 9 us). Above the bound
# both reductions split, and `is_finite` makes no float32 copy
# (docs/performance-history.md, "eighth").
FLOAT16_SUM_MAX_ELEMENTS = 104 * 1024


def _entries_of(tensor: tf.Tensor) -> tf.Tensor:
  """The tensor whose entries `tensor` holds in another shape (through
  `Reshape`, `ExpandDims`, `Squeeze` and `Identity`), else `tensor`.

  A bias's gradient is a sum reshaped; `is_finite` of the reshape would be
  moved ahead of it by Grappler, which then reshapes the flags too: one
  more kernel per bias for the same entries. The control inputs of the ops
  passed (`tf.tuple`'s, on the gradients of one op) are not waited for:
  kept, they cost more kernels than the reshapes
  (docs/performance-history.md, "eleventh"). A tensor that may change with
  when it is read (a TF1 variable's reference or snapshot, a stateful op's
  output: `equal_values.may_change`) is read as it is.
  """
  if equal_values.may_change(tensor):  # Read it when the step reads it.
    return tensor
  while tensor.op.type in equal_values.SAME_ENTRIES:
    tensor = tensor.op.inputs[0]
  return tensor


def reads_bits(dtype: tf.DType, size: int) -> bool:
  """Whether a held `dtype` tensor of `size` entries is read by `is_finite`
  (where the scale allows it) rather than by a float32 sum.

  Small ones are. A float16 one is summed (exactly: see the module
  docstring) up to `FLOAT16_SUM_MAX_ELEMENTS`; a bfloat16 one has its
  products summed, which can overflow where the elementwise verdict would
  not, so it returns to its bits above the largest stack
  (`managers.finite.GROUP_MAX_ELEMENTS`).
  """
  if size <= SMALL_BITS_MAX_ELEMENTS:
    return True
  if dtype == tf.float16:
    return size > FLOAT16_SUM_MAX_ELEMENTS
  return size > finite.GROUP_MAX_ELEMENTS


class Chain:
  """Makes the held products and what the finite check reads of them
  (see the module docstring), for one `unscale` call."""

  def __init__(self, record: provenance.Provenance, inverse: tf.Tensor,
               scale_floor: Optional[float]):
    self._record, self._inverse = record, inverse
    self._floor = scale_floor
    self._last_total: List[tf.Tensor] = []
    self._guards: Dict[tf.DType, tf.Tensor] = {}

  def _guard(self, dtype: tf.DType) -> Optional[tf.Tensor]:
    """The flag `1/S <= 1/LOWEST_SCALE_ON_BITS[dtype]` (one per dtype), or
    None if `scale_floor` does not promise it."""
    lowest = LOWEST_SCALE_ON_BITS[dtype]
    if self._floor is None or not self._floor >= lowest:
      return None
    if dtype not in self._guards:  # False for a NaN 1/S too.
      self._guards[dtype] = tf.less_equal(
          self._inverse, 1.0 / lowest, name="inverse_loss_scale_in_range")
    return self._guards[dtype]

  def product(self, source: tf.Tensor) -> tf.Tensor:
    """`cast(source) * 1/S`, recorded with what the check reads of it."""
    guard = self._guard(source.dtype)
    size = source.shape.num_elements()
    with tf.control_dependencies(self._last_total):
      cast = tf.cast(source, tf.float32)
    whole = cast * self._inverse
    if (guard is not None and size is not None and
        reads_bits(source.dtype, size)):
      flags = (tf.reduce_all(tf.math.is_finite(_entries_of(source))), guard)
      self._record.held[whole.ref()] = provenance.Held(
          source, self._inverse, flags=flags)
      return whole
    if guard is not None and source.dtype == tf.float16:
      # A float32 sum of float16 values is finite iff they all are: 65504
      # times fewer than 2**100 entries stays in range.
      total, flags = tf.reduce_sum(cast), (guard,)
    else:
      total, flags = tf.reduce_sum(whole), ()
    self._last_total = [total]
    self._record.held[whole.ref()] = provenance.Held(
        source, self._inverse, total, flags)
    return whole
