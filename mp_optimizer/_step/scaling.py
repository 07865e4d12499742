"""Scaling a loss up and gradients back down, recording what saw S.

`read_loss_scale` reads the scale once, for a step that must use one S for
both directions. Both directions write what they made in the graph's
record (`_internal.provenance`): the scaled loss, its multiplier and the
read of S it was cast from; the unscaled gradients, the read of S each was
unscaled with, and the stacks; `apply_gradients` adds the optimizer's scale
(its variable's handles, or a fixed scale's constant), so hand-written
scaling with `opt.get_loss_scale()` is recognised, and
`allow_unscaled_gradients()` counts its open blocks there, in which
gradients that never saw S are let through. `_step.checks` and
`_step.reads` walk back from the gradients to what the record names. A
loss computed in bfloat16 only gets a warning (`warn_if_bfloat16_only`):
its gradients cannot underflow.

The unscale itself (stacks, and the 16-bit forms held until the gate) is
`_step.unscale`.
"""

import contextlib
import warnings
from typing import Any, Iterable, Iterator, Optional, Union

import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer._internal import graph_walk
from mp_optimizer._internal import provenance
from mp_optimizer._internal import tensors
from mp_optimizer._step import reads
from mp_optimizer._internal.tensors import Gradient


def record_scale_source(loss_scale: Union[tf.Tensor, tf.Variable]) -> None:
  """Remembers the optimizer's scale (a variable or a tensor) in its graph.

  A gradient whose ancestry reads it was scaled by hand
  (`tf.gradients(loss * opt.get_loss_scale(), ...)`), and a division by it
  unscales by hand (see `_step.checks`).
  """
  if isinstance(loss_scale, tf.Tensor):
    provenance.of(loss_scale.graph).scale_sources.add(id(loss_scale))
    return
  strategy = tf.distribute.get_strategy()
  for component in strategy.experimental_local_results(loss_scale):
    handle = component.handle  # Lives (and keeps its id) with its graph.
    provenance.of(handle.graph).scale_sources.add(id(handle))


@contextlib.contextmanager
def allow_unscaled_gradients() -> Iterator[None]:
  """Lets `apply_gradients` built inside it take gradients that never saw S.

  `apply_gradients` refuses gradients computed from a loss that was not
  multiplied by the loss scale. Where that is deliberate (a float32 loss
  term whose gradients cannot underflow, a reference run), build the apply
  inside this block. It covers every `apply_gradients` built in the current
  graph while it is open, replica functions of a `tf.distribute` strategy
  included. Gradients of a scaled loss that were never unscaled are refused
  even here: they would be applied S times too large.

  Example:

  ```python
  with mp_optimizer.allow_unscaled_gradients():
    train_op = opt.apply_gradients(zip(tf.gradients(loss, variables),
                                       variables))
  ```

  Raises:
    RuntimeError: Under eager execution.
  """
  record = provenance.of(
      tensors.require_graph("mp_optimizer.allow_unscaled_gradients"))
  record.allowed += 1
  try:
    yield
  finally:
    record.allowed -= 1


def read_loss_scale(manager: managers.LossScaleManager) -> tf.Tensor:
  """Returns one read of `manager`'s scale as a float32 tensor.

  `get_loss_scale()` may return the scale variable itself (as contrib did),
  which reads anew wherever it is used; a step that must use one S for
  several things (scale the loss, unscale the gradients) reads it here once.
  """
  return tf.convert_to_tensor(manager.get_loss_scale(), name="loss_scale_read")


def step_loss_scale(manager: managers.LossScaleManager,
                    grads: Iterable[Optional[Gradient]]) -> tf.Tensor:
  """Returns the S the step's gradients were unscaled with.

  That is the read `unscale` was given (the one the loss was scaled with,
  `reads.read_behind`): another read could see a scale that another train
  op of the manager changed since. Gradients that lead to none (scaled by
  hand with `opt.get_loss_scale()`, or let through by
  `allow_unscaled_gradients()`) get a new read of the manager's scale.

  Args:
    manager: The step's manager.
    grads: The step's gradients (per-replica values in cross-replica
      context); None entries are passed over.
  """
  found = reads.read_behind("unscaled", grads)
  return read_loss_scale(manager) if found is None else found


def check_loss(loss: Any) -> tf.Tensor:
  """Returns `loss` if it is a floating-point tensor; adds nothing to a graph.

  Raises:
    TypeError: Otherwise, saying what was received.
  """
  if not isinstance(loss, tf.Tensor) or not loss.dtype.is_floating:
    dtype = getattr(getattr(loss, "dtype", None), "name", type(loss).__name__)
    raise TypeError(
        f"`loss` must be a floating-point tf.Tensor, got {dtype} ({loss!r}). "
        "Cast the loss to float32 before minimizing it.")
  return loss


def scale_loss(loss: tf.Tensor, loss_scale: tf.Tensor) -> tf.Tensor:
  """Returns `loss * S`, with S cast to the loss's dtype.

  The result is one `Mul` op whose second input is that multiplier. Both
  are recorded, and the read of S behind the multiplier: for a loss of
  static shape `tf.gradients` builds its seed from a constant shape and
  never reads the product, but the gradient of `loss * S` always reads S.

  Args:
    loss: A floating-point tensor (float16 losses stay float16), as accepted
      by `check_loss`.
    loss_scale: The float32 scalar scale.
  """
  multiplier = tf.cast(loss_scale, loss.dtype)
  scaled = tf.multiply(loss, multiplier, name="scaled_loss")
  multiplier = scaled.op.inputs[1]  # The cast, or S itself if it was one.
  record = provenance.of(scaled.graph)
  record.scaled_losses += [scaled, multiplier]
  record.multipliers[multiplier.ref()] = loss_scale
  return scaled


def warn_if_bfloat16_only(loss: tf.Tensor) -> None:
  """Warns when the ops behind `loss` use bfloat16 and never float16."""
  dtypes = {t.dtype.base_dtype
            for op in graph_walk.walk_back([loss.op], graph_walk.op_inputs)
            for t in op.outputs}
  if tf.bfloat16 in dtypes and tf.float16 not in dtypes:
    warnings.warn(
        f"The loss {loss.name} is computed in bfloat16 without any float16 "
        "op. bfloat16 has float32's exponent range, so its gradients do not "
        "underflow and loss scaling only adds work: use managers.NoLossScale() "
        "(the bfloat16 mode: no scale, non-finite steps still skipped).",
        UserWarning, stacklevel=tensors.user_stacklevel())
