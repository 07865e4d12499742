"""Checks of what `apply_gradients` is given, made while the graph is built.

* Malformed `grads_and_vars`, with TensorFlow's own messages (and exception
  class) for an empty list and all-None gradients; gradients converted as
  TF's `apply_gradients` converts them.
* Trainable 16-bit variables updated without float32 master weights (a
  warning that points at `float32_master_weights`).
* A bfloat16-only model: bfloat16 has float32's exponent range, so its
  gradients do not underflow and loss scaling only costs time (a warning).

Gradients that do not match the loss scale are `ancestry`'s. Nothing here
adds an op to a step.
"""

import numbers
import os
import sys
import warnings
import weakref

import numpy as np
import tensorflow as tf


_16BIT_FLOATS = (tf.float16, tf.bfloat16)
_NAMES_SHOWN = 5
# Inner optimizers already warned about (one warning per optimizer).
_warned = weakref.WeakSet()
# Frames in these folders are not the user's code a warning points at.
_LIBRARY_DIRS = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
    os.path.dirname(os.path.abspath(tf.__file__)) + os.sep)

_GRADIENT_TYPES = (tf.Tensor, tf.IndexedSlices, tf.Variable, np.ndarray,
                   np.number)

def check_grads_and_vars(grads_and_vars) -> tuple:
  """Returns `grads_and_vars` as a tuple of pairs, gradients as tensors.

  Accepts what TF's `apply_gradients` accepts: a gradient may be a tensor
  (a ref tensor too), an `IndexedSlices`, a variable (such as what
  `accumulator.assign_add(g)` returns), a NumPy array or number (converted
  with `tf.convert_to_tensor`, as TF does), or None. Nothing is built unless
  every pair passes.

  Raises:
    TypeError: If an entry is not a (gradient, variable) pair, or a gradient
      is none of the above.
    ValueError: If there are no pairs, or every gradient is None (with
      TensorFlow's messages for both).
  """
  pairs = tuple(grads_and_vars)
  if not pairs:
    raise ValueError("No variables provided. (`grads_and_vars` is empty: "
                     "pass the pairs `compute_gradients` returned.)")
  for pair in pairs:  # Check everything before building anything.
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
      raise TypeError("`grads_and_vars` must hold (gradient, variable) pairs, "
                      f"got the entry {pair!r}.")
    grad, var = pair
    if not (grad is None or isinstance(grad, _GRADIENT_TYPES) or
            isinstance(grad, numbers.Number) and not isinstance(grad, bool)):
      raise TypeError(
          "Gradient must be convertible to a Tensor or IndexedSlices, or "
          f"None: the gradient for {getattr(var, 'name', var)} is {grad!r} "
          f"(type {type(grad).__name__}); expected a tf.Tensor, "
          "tf.IndexedSlices, tf.Variable, NumPy array or None.")
  converted = [(g if g is None or isinstance(g, (tf.Tensor, tf.IndexedSlices))
                else tf.convert_to_tensor(g), v) for g, v in pairs]
  if all(grad is None for grad, _ in converted):
    raise ValueError(
        "No gradients provided for any variable: "
        f"{[str(var) for _, var in converted]}. (Every gradient in "
        "`grads_and_vars` is None: the loss does not depend on these "
        "variables, or an op between them has no gradient.)")
  return tuple(converted)


def warn_if_16bit_variables(optimizer, grads_and_vars) -> None:
  """Warns once per `optimizer` about trainable 16-bit variables being updated.

  Such a variable has no float32 master copy: its updates are rounded to its
  own dtype, and small ones are lost.
  """
  if optimizer in _warned:
    return
  names = [var.name for grad, var in grads_and_vars
           if grad is not None and var.dtype.base_dtype in _16BIT_FLOATS]
  if not names:
    return
  _warned.add(optimizer)
  shown = ", ".join(names[:_NAMES_SHOWN])
  more = (f" and {len(names) - _NAMES_SHOWN} more"
          if len(names) > _NAMES_SHOWN else "")
  # Point at the first caller outside this package and TensorFlow.
  level, frame = 1, sys._getframe(0)  # pylint: disable=protected-access
  while frame is not None and frame.f_code.co_filename.startswith(
      _LIBRARY_DIRS):
    level, frame = level + 1, frame.f_back
  warnings.warn(
      f"LossScaleOptimizer is updating {len(names)} 16-bit float variable(s) "
      f"without float32 master weights: {shown}{more}. Updates smaller than "
      "half the float16 spacing (about 5e-4 of a weight near 1) are rounded "
      "away. Build the model under `with mp_optimizer.float32_master_weights():"
      "` (or `variable_scope(..., custom_getter=mp_optimizer."
      "float32_variable_getter)`) to store them in float32.",
      UserWarning, stacklevel=level)


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
