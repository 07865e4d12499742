"""What `apply_gradients` accepts, checked before anything is built.

`check_grads_and_vars` takes the (gradient, variable) pairs as TF's
`apply_gradients` does; `check_before_step` adds the loss-scaling checks
(gradients that never saw S, 16-bit variables, the replica context), all in
replica context, before the step (`step.StepBuilder`) is built.
"""

import numbers
from typing import Iterable

import numpy as np
import tensorflow as tf

from mp_optimizer._internal import tensors
from mp_optimizer._internal import validation
from mp_optimizer._internal.tensors import GradsAndVars
from mp_optimizer._step import checks
from mp_optimizer._step import scaling
from mp_optimizer._step import settings


_GRADIENT_TYPES = (tf.Tensor, tf.IndexedSlices, tf.Variable, np.ndarray,
                   np.number)


def check_grads_and_vars(grads_and_vars: Iterable) -> GradsAndVars:
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
          f"None: the gradient for {getattr(var, 'name', var)} is "
          f"{validation.describe(grad)}; expected a tf.Tensor, "
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


def check_before_step(grads_and_vars: Iterable,
                      step_settings: settings.StepSettings) -> GradsAndVars:
  """Checks `apply_gradients`' pairs for a loss-scaling step; returns them.

  Args:
    grads_and_vars: What `apply_gradients` was given.
    step_settings: The optimizer's; its 16-bit variables get a warning,
      but bfloat16 ones with compensated updates.

  Returns:
    The pairs, as `check_grads_and_vars` returns them.

  Raises:
    RuntimeError: In cross-replica context.
    TypeError: As `check_grads_and_vars`.
    ValueError: As `check_grads_and_vars`, or if a gradient never saw S or
      kept it (`checks.check_unscaled`).
  """
  grads_and_vars = check_grads_and_vars(grads_and_vars)
  manager, compensated = step_settings.manager, step_settings.compensated
  if manager.scales_loss:  # Without a scale, no gradient can miss it.
    scaling.record_scale_source(manager.get_loss_scale())
    checks.check_unscaled(grads_and_vars)
  checks.warn_if_16bit_variables(step_settings.wrapped, [
      (g, v) for g, v in grads_and_vars
      if compensated is None or v.dtype.base_dtype != tf.bfloat16])
  if tensors.in_cross_replica_context():
    raise RuntimeError(
        "LossScaleOptimizer.apply_gradients must be called in replica "
        "context: call it inside `strategy.run` (or a model_fn), not "
        "directly under `strategy.scope()`.")
  return grads_and_vars
