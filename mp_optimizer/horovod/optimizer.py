"""`DistributedOptimizer`: gradients combined over the ranks, then applied.

As Horovod's TF1 optimizer: `compute_gradients` asks the wrapped optimizer
for this rank's gradients and returns every rank's average (or sum);
`apply_gradients` is the wrapped optimizer's. Around a `LossScaleOptimizer`
(`hvd.DistributedOptimizer(LossScaleOptimizer(opt, manager))`), whose
gradients come out unscaled, `Compression.fp16` carries them multiplied by
the loss scale again, as the other wrapping order does
(`LossScaleOptimizer(hvd.DistributedOptimizer(opt), manager)`), so both
orders send the same float16 numbers; Horovod there sends the unscaled
gradients, and float16 turns the small ones into zeros.
"""

from typing import Any, List, Optional, Tuple

import tensorflow as tf

from mp_optimizer import optimizer as loss_scale_optimizer
from mp_optimizer._internal import tensors
from mp_optimizer._internal import validation
from mp_optimizer.horovod import compression as compressions
from mp_optimizer.horovod import ops

Optimizer = tf.compat.v1.train.Optimizer


def _check_options(backward_passes_per_step: Any, options: dict) -> None:
  """Refuses Horovod options this drop-in does not implement, by name."""
  validation.check_positive_int("backward_passes_per_step",
                                backward_passes_per_step)
  if backward_passes_per_step > 1:
    raise NotImplementedError(
        "`backward_passes_per_step` > 1 is not supported by "
        "mp_optimizer.horovod; accumulate with mp_optimizer.LossScaleOptimizer("
        "hvd.DistributedOptimizer(opt), manager, gradient_accumulation_steps="
        f"{backward_passes_per_step}) (it applies the mean of the micro-steps, "
        "Horovod's average_aggregated_gradients=True).")
  defaults = {"gradient_predivide_factor": 1.0, "num_groups": 0,
              "groups": None, "process_set": None,
              "average_aggregated_gradients": False}
  for name, value in options.items():
    if value != defaults[name]:
      raise NotImplementedError(
          f"`{name}` of hvd.DistributedOptimizer is not supported by "
          f"mp_optimizer.horovod (got {value!r}); leave it out: gradients of "
          "one dtype are reduced together over every rank.")


class DistributedOptimizer(Optimizer):
  """Wraps an optimizer so its gradients are combined over every rank first.

  Example:

  ```python
  # fragment: part of a program, not runnable on its own
  import mp_optimizer.horovod as hvd
  hvd.init()
  opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.1, 0.9))
  opt = mp_optimizer.LossScaleOptimizer(opt, managers.DynamicLossScale())
  train_op = opt.minimize(loss, global_step=global_step)
  ```

  Args:
    optimizer: The `tf.compat.v1.train.Optimizer` to wrap.
    name: Optional name; "Distributed" + the wrapped class's name.
    use_locking: Passed to `tf.compat.v1.train.Optimizer`.
    device_dense: Device of the gradients' reduction (sparse ones too).
    device_sparse: Accepted and not used: see `device_dense`.
    compression: `Compression.none` (default) or `Compression.fp16`.
    sparse_as_dense: Make `tf.IndexedSlices` gradients dense and reduce them
      (by default they are gathered, as Horovod does).
    backward_passes_per_step: Only 1 is supported.
    op: `Average` (default) or `Sum`.
    gradient_predivide_factor, average_aggregated_gradients, num_groups,
      groups, process_set: Horovod's; only their defaults are supported.

  Raises:
    NotImplementedError: For a Horovod option this drop-in does not
      implement (the message names what to use instead).
    TypeError: If `optimizer` is not a `tf.compat.v1.train.Optimizer`.
    ValueError: For an unknown `op` or `compression`, or a bad
      `backward_passes_per_step`.
  """

  def __init__(self, optimizer: Optimizer, name: Optional[str] = None,
               use_locking: bool = False, device_dense: str = "",
               device_sparse: str = "", compression: Any = None,
               sparse_as_dense: bool = False,
               backward_passes_per_step: int = 1, op: Any = None,
               gradient_predivide_factor: float = 1.0,
               average_aggregated_gradients: bool = False,
               num_groups: int = 0, groups: Any = None,
               process_set: Any = None):
    if not isinstance(optimizer, Optimizer):
      raise TypeError(
          "`optimizer` of mp_optimizer.horovod.DistributedOptimizer must be a "
          "tf.compat.v1.train.Optimizer (the TF1 graph API), got "
          f"{validation.describe(optimizer)}.")
    _check_options(backward_passes_per_step, {
        "gradient_predivide_factor": gradient_predivide_factor,
        "average_aggregated_gradients": average_aggregated_gradients,
        "num_groups": num_groups, "groups": groups,
        "process_set": process_set})
    self._op = compressions.check_op(op)
    self._compression = compressions.check_compression(
        compression or compressions.NoneCompressor)
    self._sparse_as_dense = validation.check_bool("sparse_as_dense",
                                                  sparse_as_dense)
    del device_sparse  # Gathered on device_dense, as documented.
    self._device = device_dense
    super().__init__(name=name or f"Distributed{type(optimizer).__name__}",
                     use_locking=use_locking)
    self._optimizer = optimizer

  def compute_gradients(self, *args: Any, **kwargs: Any
                        ) -> List[Tuple[Any, tf.Variable]]:
    """The wrapped optimizer's gradients, combined over every rank.

    Takes `tf.compat.v1.train.Optimizer.compute_gradients`'s arguments.

    Raises:
      RuntimeError: Under eager execution.
    """
    tensors.require_graph("hvd.DistributedOptimizer.compute_gradients")
    grads_and_vars = self._optimizer.compute_gradients(*args, **kwargs)
    carry_scale = None
    if (self._compression is compressions.FP16Compressor and isinstance(
        self._optimizer, loss_scale_optimizer.LossScaleOptimizer)):
      carry_scale = self._optimizer.get_loss_scale()
    with tf.name_scope(f"{self.get_name()}_Allreduce"), tf.device(
        self._device):
      grads = ops.reduce_gradients(
          [g for g, _ in grads_and_vars], self._op, self._compression,
          self._sparse_as_dense, carry_scale)
    return list(zip(grads, [v for _, v in grads_and_vars]))

  def apply_gradients(self, grads_and_vars: Any,
                      global_step: Optional[tf.Variable] = None,
                      name: Optional[str] = None) -> tf.Operation:
    """The wrapped optimizer's `apply_gradients`."""
    return self._optimizer.apply_gradients(grads_and_vars,
                                           global_step=global_step, name=name)

  def get_slot(self, *args: Any, **kwargs: Any) -> Optional[tf.Variable]:
    """The wrapped optimizer's `get_slot`."""
    return self._optimizer.get_slot(*args, **kwargs)

  def get_slot_names(self, *args: Any, **kwargs: Any) -> List[str]:
    """The wrapped optimizer's `get_slot_names`."""
    return self._optimizer.get_slot_names(*args, **kwargs)

  def variables(self, *args: Any, **kwargs: Any) -> List[tf.Variable]:
    """The wrapped optimizer's `variables`."""
    return self._optimizer.variables(*args, **kwargs)
