"""Compensated (Kahan) updates of bfloat16 variables (`compensated_update=`).

A bfloat16 weight has 8 significant bits: near 1.0 its spacing is 2**-7, so
an update below 2**-8 (about 0.004) rounds away and the weight never moves.
Where a variable must stay bfloat16 (float32 master weights are the other
fix), Kahan summation keeps what rounding lost in a compensation slot `c`
and adds it back on the next step:

```
exact = float32(w) + float32(c)            # the weight as if never rounded
w     = 0                                  # the inner optimizer's update u
inner.apply_gradients(...)                 #   lands on 0: w == bfloat16(u),
u     = float32(w)                         #   rounded relative to u, not to w
total = exact + u
w     = bfloat16(total)
c     = total - float32(w)                 # what this rounding lost
```

The inner optimizer applies its own update (its slots, its learning rate,
its `global_step`); only where the update lands changes. This assumes the
update does not read the weight, which holds for gradient descent, momentum,
Adagrad, Adadelta and RMSProp; optimizers whose update reads it (FTRL, the
proximal ones) are refused. So is TensorFlow's `AdamOptimizer`: it computes
its update in the variable's dtype, where 1 - beta2 (1 - 0.999) rounds to 0
in bfloat16, the second moment stays 0 and the update divides by epsilon.
All of it is built inside the step's gate: a skipped step moves neither `w`
nor `c`.

`c` is a slot of `Compensation` (`<variable>/kahan_compensation`), float32 or
bfloat16, saved by `Saver` and `tf.train.Checkpoint` with the optimizer.
Variables of other dtypes go to the inner optimizer untouched.
"""

from typing import Any, List, Optional, Sequence

import tensorflow as tf

from mp_optimizer._internal import tensors

SLOT = "kahan_compensation"
_DTYPES = {"float32": tf.float32, "bfloat16": tf.bfloat16}
# Their updates read the weight: an update applied to 0 is not theirs.
_REFUSED = (tf.compat.v1.train.FtrlOptimizer,
            tf.compat.v1.train.ProximalGradientDescentOptimizer,
            tf.compat.v1.train.ProximalAdagradOptimizer)


def check_option(value: Any,
                 inner: tf.compat.v1.train.Optimizer) -> Optional[tf.DType]:
  """Returns the compensation's dtype for `compensated_update=value`, or None.

  Args:
    value: False (none), True or "float32" (a float32 slot), or "bfloat16".
    inner: The wrapped optimizer.

  Raises:
    TypeError: For another type.
    ValueError: For another string, or an `inner` whose update reads the
      weight, or an `AdamOptimizer` (see the module docstring).
  """
  if value is False:
    return None
  if value is True:
    value = "float32"
  if not isinstance(value, str):
    raise TypeError("`compensated_update` must be a bool, 'float32' or "
                    f"'bfloat16', got {value!r}.")
  if value not in _DTYPES:
    raise ValueError("`compensated_update` must be True, False, 'float32' or "
                     f"'bfloat16', got {value!r}.")
  if isinstance(inner, tf.compat.v1.train.AdamOptimizer):
    raise ValueError(
        "`compensated_update` cannot help AdamOptimizer: it computes its "
        "update in the variable's dtype, and in bfloat16 1 - beta2 rounds to "
        "0, so its first updates divide by epsilon. Keep Adam's variables in "
        "float32 (`mp_optimizer.float32_master_weights()`).")
  if isinstance(inner, _REFUSED):
    raise ValueError(
        f"`compensated_update` needs an update that does not read the "
        f"weight, got {type(inner).__name__}, whose update does. Use float32 "
        "master weights (`mp_optimizer.float32_master_weights()`) instead.")
  return _DTYPES[value]


class Compensation(tf.compat.v1.train.Optimizer):
  """Applies through `inner`, with Kahan compensation for bfloat16 variables.

  An optimizer only so that its slots are made and checkpointed as every
  optimizer's are; it is the `inner` of the step (`_step.step.StepSettings`).

  Example:

  ```python
  opt = mp_optimizer.LossScaleOptimizer(
      tf.compat.v1.train.GradientDescentOptimizer(1e-3),
      managers.NoLossScale(), compensated_update=True)
  ```
  """

  def __init__(self, inner: tf.compat.v1.train.Optimizer, dtype: tf.DType):
    super().__init__(use_locking=False, name=inner.get_name() + "Kahan")
    self._inner = inner
    self._dtype = dtype

  def _slot_for(self, var: tf.Variable) -> tf.Variable:
    with tf.init_scope():  # Outside the gate, as TF makes its slots.
      return self._get_or_make_slot_with_initializer(
          var, tf.compat.v1.zeros_initializer(), var.shape, self._dtype,
          SLOT, SLOT)

  def apply_gradients(self, grads_and_vars: Sequence,
                      global_step: Optional[tf.Variable] = None,
                      name: Optional[str] = None) -> tf.Operation:
    """`inner.apply_gradients`, each bfloat16 update compensated (module)."""
    pairs = list(grads_and_vars)
    targets = [v for g, v in pairs
               if g is not None and v.dtype.base_dtype == tf.bfloat16]
    if not targets:
      return self._inner.apply_gradients(pairs, global_step, name)
    slots = [self._slot_for(v) for v in targets]
    with tf.name_scope("kahan_summation"):
      exact = [tf.cast(v.read_value(), tf.float32) + tf.cast(c, tf.float32)
               for v, c in zip(targets, slots)]
      with tf.control_dependencies(exact):
        cleared = [v.assign(tf.zeros_like(v), read_value=False)
                   for v in targets]
    with tf.control_dependencies(cleared):
      applied = self._inner.apply_gradients(pairs, global_step, name)
    writes = []
    with tf.name_scope("kahan_summation"), tf.control_dependencies([applied]):
      for var, slot, before in zip(targets, slots, exact):
        total = before + tf.cast(var.read_value(), tf.float32)
        rounded = tf.cast(total, tf.bfloat16)
        writes.append(var.assign(rounded, read_value=False))
        writes.append(slot.assign(
            tf.cast(total - tf.cast(rounded, tf.float32), self._dtype),
            read_value=False))
    return tf.group(applied, *writes)

  def get_slot(self, var: tf.Variable, name: str) -> Optional[tf.Variable]:
    """This optimizer's compensation slot, else the inner optimizer's slot."""
    if name == SLOT:
      return super().get_slot(var, name)
    return self._inner.get_slot(var, name)

  def get_slot_names(self) -> List[str]:
    """The compensation slot's name (the inner optimizer lists its own)."""
    return super().get_slot_names()

  def variables(self) -> List[tf.Variable]:
    """The compensation slots of the current graph."""
    graph = tensors.require_graph("Compensation.variables")
    return [slot for slots in self._slots.values()
            for slot in slots.values() if slot.graph is graph]
