"""Hand-built exact skips: the floor every contender is measured against.

An exact skip applies a step only if every gradient entry is finite, and
then applies exactly what bare training would (gradients multiplied by
1/S); on a skipped step no update runs. These are built here from public
parts and `managers.all_finite`, around any `tf.compat.v1` optimizer, with a
fixed scale (the dynamic scale's update comes on top of any of them):

* `switch`: the loss times S, `compute_gradients`, each gradient
  multiplied by 1/S on its own (TensorFlow may do that in place), one
  `managers.all_finite` over them, and every update behind one Switch on
  that flag (`mp_optimizer._step.gate`). One multiply per gradient: O(N)
  kernels, and no gradient is copied.
* `chunked`: the same check and Switch, but gradients of one shape are
  unscaled in at most `CHUNKS` stacks, each of consecutive variables, so
  the unscale is O(1) kernels in N (3 per stack) while only one chunk's
  gradients are held twice at a time, and each chunk waits only for its own
  gradients, not the last of the group. A design for the library's unscale
  (see BENCHMARKS.md, "Step memory"), prototyped here.
* `hold16`: what no design holding float32 gradients can reach. A float32
  gradient made by casting a 16-bit one (the gradient of a float32
  variable read through a cast) is held in 16 bits until the flag: the
  check sums each gradient in float32 on its own (a copy freed at once),
  and the cast to float32 and the multiply by 1/S are built behind the
  Switch, so the float32 gradients exist only while the updates run.
  Exact: the values applied are bare's bits; the check sees S times the
  unscaled values, which changes nothing below float32's range. O(N)
  kernels (a cast and a sum per gradient).
* `scaled`: the floor with the least a dynamic scale adds to a clean step:
  S read from a variable (so backprop's seed and 1/S are computed each
  step, not folded into constants) and the clean step counted (one
  `assign_add` behind the Switch). It never grows or shrinks S, so it is
  not a loss scale: it is a lower bound, since the dynamic scales this
  library reproduces (contrib's, TF's) read S and count clean steps, and
  also decide on growth each step.
  While S stays at its initial value it applies the floor's values bit for
  bit.

`LeastDynamicManager` is the same least as a `managers.LossScaleManager`:
the library's step around it (`floor.py`'s "ours_least") costs what ours
would with a dynamic scale that did nothing but read S and count clean
steps; ours with contrib's dynamic scale costs that plus its growth and
overflow logic.
"""

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer._internal import tensors
from mp_optimizer._step import gate
from mp_optimizer.managers import finite

v1 = tf.compat.v1
INITIAL_SCALE = 2**12
CHUNKS = 8  # Stacks per group of like gradients, at most.


def _unscale_each(values: Sequence[Optional[tf.Tensor]],
                  inverse: tf.Tensor) -> List[Optional[tf.Tensor]]:
  return [None if value is None else value * inverse for value in values]


def _unscale_chunked(values: Sequence[Optional[tf.Tensor]],
                     inverse: tf.Tensor) -> List[Optional[tf.Tensor]]:
  groups: Dict[Tuple, List[int]] = {}
  for index, value in enumerate(values):
    key = None if value is None else finite.group_key(value)
    if key is not None:
      groups.setdefault(key, []).append(index)
  unscaled = _unscale_each(values, inverse)
  for indices in groups.values():
    size = -(-len(indices) // CHUNKS)  # Ceiling: at most CHUNKS stacks.
    for start in range(0, len(indices), size):
      chunk = indices[start:start + size]
      if len(chunk) < 2:
        continue
      stacked = tf.stack([values[i] for i in chunk]) * inverse
      for index, piece in zip(chunk, tf.unstack(stacked, num=len(chunk))):
        unscaled[index] = piece
  return unscaled


UNSCALES = {"switch": _unscale_each, "chunked": _unscale_chunked}
LABELS = {"switch": "floor: one Switch on all_finite, each gradient unscaled",
          "chunked": "prototype: the floor, unscale in <= 8 stacks per shape",
          "hold16": "prototype: 16-bit gradients held, cast behind the Switch",
          "scaled": "prototype: the floor, S read from a variable and clean "
                    "steps counted (a dynamic scale's least)"}


def _held_16_bit(value: Optional[tf.Tensor]) -> Optional[tf.Tensor]:
  """The 16-bit tensor a float32 gradient is a cast of, else None."""
  if (value is not None and value.dtype == tf.float32 and
      value.op.type == "Cast" and
      value.op.inputs[0].dtype in (tf.float16, tf.bfloat16)):
    return value.op.inputs[0]
  return None


def _hold16_train_op(pairs, scale: tf.Tensor, global_step: tf.Variable,
                     inner: v1.train.Optimizer) -> tf.Operation:
  values = [None if grad is None else tf.convert_to_tensor(
      tensors.values(grad)) for grad, _ in pairs]
  held = [value if _held_16_bit(value) is None else _held_16_bit(value)
          for value in values]
  sums = [tf.reduce_sum(tf.cast(value, tf.float32)) for value in held
          if value is not None]
  flag = tf.math.is_finite(tf.reduce_sum(tf.stack(sums)) if sums else 0.0)

  def apply(pivot: tf.Tensor) -> tf.Operation:
    del pivot  # `gate` builds this under a dependency on it.
    inverse = tf.math.reciprocal(scale)
    unscaled = [(None if grad is None else tensors.with_values(
        grad, tf.cast(value, tf.float32) * inverse), var)
                for (grad, var), value in zip(pairs, held)]
    return inner.apply_gradients(unscaled, global_step)

  return gate.gate(flag, apply, tf.no_op)


def _least_variables() -> Tuple[tf.Variable, tf.Variable]:
  """S (float32, `INITIAL_SCALE`) and a count of clean steps (int64).

  Made outside any control dependencies of the caller (a train op is built
  under the model's UPDATE_OPS), so initializing them reads no other
  variable.
  """
  with tf.control_dependencies(None), \
       v1.variable_scope("least_dynamic_scale"):
    return (v1.get_variable("scale", initializer=float(INITIAL_SCALE),
                            trainable=False, use_resource=True),
            v1.get_variable("clean_steps",
                            initializer=tf.constant(0, tf.int64),
                            trainable=False, use_resource=True))


class LeastDynamicManager(managers.LossScaleManager):
  """S read from a variable, clean steps counted; S never changes.

  Made while the graph it serves is the default (`floor.py` makes one per
  train op). Not a loss scale to train with: it never grows or shrinks S.
  """

  def __init__(self):
    self._scale, self._clean_steps = _least_variables()

  def get_loss_scale(self) -> tf.Variable:
    return self._scale

  def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
    return self._clean_steps.assign_add(tf.cast(finite_grads, tf.int64),
                                        read_value=False)

  @property
  def dynamic(self) -> bool:
    return True

  @property
  def scale_floor(self) -> float:
    return float(INITIAL_SCALE)  # S never moves.

  def variables(self) -> List[tf.Variable]:
    return [self._scale, self._clean_steps]


def _scaled_train_op(loss: tf.Tensor, global_step: tf.Variable,
                     inner: v1.train.Optimizer) -> tf.Operation:
  scale_variable, clean_steps = _least_variables()
  scale = scale_variable.read_value()
  pairs = inner.compute_gradients(loss * tf.cast(scale, loss.dtype))
  inverse = tf.math.reciprocal(scale)
  pairs = [(None if grad is None else tensors.with_values(
      grad, tf.convert_to_tensor(tensors.values(grad)) * inverse), var)
           for grad, var in pairs]

  def apply(pivot: tf.Tensor) -> tf.Operation:
    del pivot  # `gate` builds this under a dependency on it.
    return tf.group(inner.apply_gradients(pairs, global_step),
                    clean_steps.assign_add(1, read_value=False))

  return gate.gate(managers.all_finite([grad for grad, _ in pairs]), apply,
                   tf.no_op)


def train_op(loss: tf.Tensor, global_step: tf.Variable,
             inner: v1.train.Optimizer, design: str) -> tf.Operation:
  """The exact skip `design` (a key of `LABELS`) around `inner`."""
  if design == "scaled":
    return _scaled_train_op(loss, global_step, inner)
  scale = tf.constant(float(INITIAL_SCALE))
  pairs = inner.compute_gradients(loss * tf.cast(scale, loss.dtype))
  if design == "hold16":
    return _hold16_train_op(pairs, scale, global_step, inner)
  values = [None if grad is None else tf.convert_to_tensor(
      tensors.values(grad)) for grad, _ in pairs]
  unscaled = UNSCALES[design](values, tf.math.reciprocal(scale))
  pairs = [(None if grad is None else tensors.with_values(grad, new), var)
           for (grad, var), new in zip(pairs, unscaled)]
  finite_flag = managers.all_finite([grad for grad, _ in pairs])
  return gate.gate(finite_flag,
                   lambda pivot: inner.apply_gradients(pairs, global_step),
                   tf.no_op)


def maker(design: str) -> Callable:
  """(loss, global_step, inner) -> `train_op(..., design)`."""
  return lambda loss, step, inner: train_op(loss, step, inner, design)
