"""Catches call-order mistakes when the graph is built, not after hours of training.

* Malformed `grads_and_vars` for `apply_gradients`.
* Scaled gradients reaching `apply_gradients`: gradients of a scaled loss that
  never went through `compute_gradients` / `get_unscaled_gradients` would be
  applied S times too large. The optimizer records, per graph, the scaled
  losses (and their multipliers) it made and the unscaled gradients it
  returned; `apply_gradients` walks back from each gradient over data edges,
  stops at unscaled gradients, and raises if it reaches a scaled loss.
* A bfloat16-only model: bfloat16 has float32's exponent range, so its
  gradients do not underflow and loss scaling only costs time (a warning).

All of it runs once, while the graph is built; nothing is added to a step.
"""

import warnings
import weakref
from typing import Iterable

import tensorflow as tf

_RECORDS = weakref.WeakKeyDictionary()  # graph -> {"scaled": set, "unscaled": set}


def _record(kind: str, tensors: Iterable) -> None:
  for tensor in tensors:
    if tensor is None:
      continue
    if isinstance(tensor, tf.IndexedSlices):
      tensor = tensor.values
    _RECORDS.setdefault(tensor.graph, {"scaled": set(), "unscaled": set()})[
        kind].add(tensor.ref())


def record_scaled_loss(scaled_loss: tf.Tensor) -> None:
  """Remembers a scaled loss `loss * S` and its multiplier S.

  The multiplier matters more: for a loss of static shape `tf.gradients`
  builds its seed from a constant shape and never reads the product, but the
  gradient of `loss * S` always reads S.
  """
  _record("scaled", [scaled_loss, scaled_loss.op.inputs[1]])


def record_unscaled(grads: Iterable) -> None:
  """Remembers gradients that were divided by the loss scale."""
  _record("unscaled", grads)


def check_grads_and_vars(grads_and_vars) -> tuple:
  """Returns `grads_and_vars` as a tuple after checking its shape and types.

  Raises:
    TypeError: If an entry is not a (gradient, variable) pair, or a gradient
      is not a Tensor, IndexedSlices or None.
    ValueError: If there are no pairs.
  """
  pairs = tuple(grads_and_vars)
  if not pairs:
    raise ValueError("`grads_and_vars` is empty: no variables provided.")
  for pair in pairs:
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
      raise TypeError("`grads_and_vars` must hold (gradient, variable) pairs, "
                      f"got the entry {pair!r}.")
    grad, var = pair
    if grad is not None and not isinstance(grad, (tf.Tensor, tf.IndexedSlices)):
      raise TypeError(
          f"The gradient for {getattr(var, 'name', var)} must be a tf.Tensor, "
          f"tf.IndexedSlices or None, got {grad!r} "
          f"(type {type(grad).__name__}).")
  return pairs


def _starts(grad):
  if isinstance(grad, tf.IndexedSlices):
    return [grad.values]
  return [grad] if isinstance(grad, tf.Tensor) else []


def check_unscaled(grads_and_vars) -> None:
  """Raises if a gradient was taken of a scaled loss and never unscaled.

  One depth-first walk serves all gradients: a tensor already visited has had
  all its ancestors visited without meeting a scaled loss.

  Raises:
    ValueError: Naming the variable whose gradient is still scaled.
  """
  seen = set()
  for grad, var in grads_and_vars:
    stack = _starts(grad)
    records = _RECORDS.get(stack[0].graph) if stack else None
    if not records or not records["scaled"]:
      continue
    while stack:
      tensor = stack.pop()
      ref = tensor.ref()
      if ref in seen or ref in records["unscaled"]:
        continue
      seen.add(ref)
      if ref in records["scaled"]:
        raise ValueError(
            f"The gradient for {var.name} was computed from a scaled loss "
            f"(it depends on {tensor.name}) but never divided by the loss "
            "scale, so it would "
            "be applied S times too large. Take gradients with "
            "`opt.compute_gradients(loss)`, or pass them through "
            "`opt.get_unscaled_gradients(grads)` before `apply_gradients`.")
      stack.extend(tensor.op.inputs)


def warn_if_bfloat16_only(loss: tf.Tensor) -> None:
  """Warns when the ops behind `loss` use bfloat16 and never float16."""
  seen, stack, dtypes = set(), [loss.op], set()
  while stack:
    op = stack.pop()
    if op in seen:
      continue
    seen.add(op)
    dtypes.update(t.dtype.base_dtype for t in op.outputs)
    stack.extend(t.op for t in op.inputs)
  if tf.bfloat16 in dtypes and tf.float16 not in dtypes:
    warnings.warn(
        f"The loss {loss.name} is computed in bfloat16 without any float16 "
        "op. bfloat16 has float32's exponent range, so its gradients do not "
        "underflow and loss scaling only adds work: use the inner optimizer "
        "directly.", UserWarning, stacklevel=3)
