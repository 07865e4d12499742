"""Which gradients overflowed: a report printed on skipped steps only.

With `LossScaleOptimizer(..., overflow_report=True)` a skipped step prints
one line naming the variables whose gradients held NaN or Inf, for example

```
mp_optimizer: step skipped at loss scale 32768: 1 of 12 gradients non-finite: dense_3/kernel:0 Inf
```

which tells NaN in the data (every gradient NaN) from one layer overflowing
(a few Inf) from a scale that is too high (many Inf). Under
`MirroredStrategy` each entry names the replica whose gradient it was (and
under multi-worker strategies the worker, e.g. "worker 1 replica 0"); with
gradient accumulation the line says "micro-step dropped".

The report is built on the skipped side of the step's gate
(`mp_optimizer._step.gate`): on a finite step its ops are dead and none runs, so
a clean step pays nothing beyond the finite check. It is printed by a
`tf.print` op inside the step: no value goes back to the Python caller and
nothing waits on the host. Gradients of one shape, dtype and device are
stacked, so a model with many variables of a few shapes adds a few ops.

```
per gradient g:  code = 1 if any(isnan(g)) + 2 if any(isinf(g))   (0: finite)
print "<prefix> at loss scale S: <count> of <total> gradients non-finite:"
      first N of (name, code != 0) as "name NaN" / "name Inf" / "name NaN+Inf"
```

A step can also be skipped with no NaN/Inf entry (finite gradients whose
sum exceeds float32, see `mp_optimizer.managers.finite`, or an overflow on
another worker's replicas); the line then says so.
"""

import dataclasses
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import tensorflow as tf

from mp_optimizer.managers import finite
from mp_optimizer._internal import tensors
from mp_optimizer._internal import validation
from mp_optimizer._step import origin

_KINDS = ("finite", "NaN", "Inf", "NaN+Inf")


@dataclasses.dataclass(frozen=True)
class OverflowReport:  # Public as mp_optimizer.overflow.OverflowReport.
  """How skipped steps are reported (`overflow_report=` of the optimizer).

  `overflow_report=True` is `OverflowReport()`.

  Example:

  ```python
  from mp_optimizer.overflow import OverflowReport
  opt = mp_optimizer.LossScaleOptimizer(
      adam, manager, overflow_report=OverflowReport(
          max_variables=3, output_stream=tf.compat.v1.logging.warning))
  ```

  Attributes:
    max_variables: At most this many variables are named per line (the
      count of all non-finite ones is always given).
    output_stream: Where the line goes, as `tf.print` takes it: `sys.stderr`
      (the default), `sys.stdout`, a `tf.compat.v1.logging` or
      `absl.logging` function (TensorFlow's C++ log, subject to
      `TF_CPP_MIN_LOG_LEVEL`), or a string `"file://<path>"` (appended to).
      `tf.print` refuses anything else when the step is built.
    first_nonfinite_op: Also print a second line naming the first op of the
      step's forward and backward pass whose output was NaN or Inf (see
      `mp_optimizer._step.origin`). Costs no op on a finite step, but the
      step may hold its tensors longer (measured in BENCHMARKS.md).

  Raises:
    TypeError: If `max_variables` is not an int or `first_nonfinite_op` not
      a bool.
    ValueError: If `max_variables` is < 1.
  """
  max_variables: int = 10
  output_stream: Any = sys.stderr
  first_nonfinite_op: bool = False

  def __post_init__(self) -> None:
    validation.check_positive_int("max_variables", self.max_variables)
    validation.check_bool("first_nonfinite_op", self.first_nonfinite_op)


def check_option(value: Union[bool, OverflowReport, None]
                 ) -> Optional[OverflowReport]:
  """Validates `overflow_report`: returns the report settings or None.

  Raises:
    TypeError: If `value` is not a bool, None or an `OverflowReport`.
  """
  if value is None or value is False:
    return None
  if value is True:
    return OverflowReport()
  if isinstance(value, OverflowReport):
    return value
  raise TypeError(
      "`overflow_report` must be True, False or an "
      "mp_optimizer.overflow.OverflowReport, got "
      f"{validation.describe(value)}.")


def _local_gradients(grads: tensors.GradsAndVars
                     ) -> List[Tuple[str, tf.Tensor]]:
  """(label prefix, tensor) for every non-None gradient on every replica."""
  strategy = (tf.distribute.get_strategy()
              if tensors.in_cross_replica_context() else None)
  several = strategy is not None and strategy.num_replicas_in_sync > 1
  # Multi-worker: replicas are numbered per worker, so name the worker too.
  resolver = getattr(strategy, "cluster_resolver", None)
  worker = (f"{resolver.task_type} {resolver.task_id} "
            if several and resolver is not None and resolver.task_type
            else "")
  out = []
  for grad, var in grads:
    if grad is None:
      continue
    components = (strategy.experimental_local_results(grad)
                  if strategy is not None else [grad])
    for replica, component in enumerate(components):
      component = tensors.values(component)
      prefix = f"{worker}replica {replica}: " if several else ""
      out.append((f"{prefix}{var.name}", tf.convert_to_tensor(component)))
  return out


def _codes(tensors: List[tf.Tensor]) -> tf.Tensor:
  """int32 code per tensor (1 NaN, 2 Inf, 3 both, 0 finite), one group."""
  with tf.device(tensors[0].device):
    stacked = tf.stack(tensors) if len(tensors) > 1 else tensors[0][None]
    flat = tf.reshape(stacked, [len(tensors), -1])
    nan = tf.reduce_any(tf.math.is_nan(flat), axis=1)
    inf = tf.reduce_any(tf.math.is_inf(flat), axis=1)
    return tf.cast(nan, tf.int32) + 2 * tf.cast(inf, tf.int32)


def _grouped_codes(labelled: List[Tuple[str, tf.Tensor]]
                   ) -> Tuple[List[str], tf.Tensor]:
  """Codes of all tensors, grouped by the finite check's rule.

  Same shape, dtype and device, and small enough that stacking costs little
  (`finite.GROUP_MAX_ELEMENTS`); larger tensors are checked on their own.
  """
  groups: Dict[Any, List[Tuple[str, tf.Tensor]]] = {}
  for index, (label, tensor) in enumerate(labelled):
    key = finite.group_key(tensor)
    groups.setdefault(index if key is None else key, []).append(
        (label, tensor))
  labels, codes = [], []
  for members in groups.values():
    labels.extend(label for label, _ in members)
    codes.append(_codes([tensor for _, tensor in members]))
  return labels, codes[0] if len(codes) == 1 else tf.concat(codes, 0)


def _host(tensor: tf.Tensor) -> str:
  """The CPU of the machine (job and task) that holds `tensor`."""
  return tf.DeviceSpec.from_string(tensor.device).replace(
      device_type="CPU", device_index=0).to_string()


def _report(settings: OverflowReport, prefix: str,
            grads: tensors.GradsAndVars, scale: tf.Tensor) -> tf.Operation:
  labelled = _local_gradients(grads)
  labels, codes = _grouped_codes(labelled)
  with tf.device(_host(labelled[0][1])):  # String ops run on CPUs only.
    bad = tf.where(codes > 0)[:, 0]
    shown = bad[:settings.max_variables]
    items = tf.strings.join([tf.gather(tf.constant(labels), shown),
                             tf.gather(tf.constant(_KINDS),
                                       tf.gather(codes, shown))], " ")
    count = tf.size(bad)
    listing = tf.strings.reduce_join(items, separator=", ")
    more = tf.where(count > settings.max_variables, ", ...", "")
    listing = tf.where(
        count > 0, tf.strings.join([listing, more]),
        "none has a NaN/Inf entry here (their sum overflowed float32, the "
        "scale is below 2**-112, or 1 for bfloat16 gradients, or another "
        "worker's replicas overflowed)")
    line = tf.strings.join([
        f"mp_optimizer: {prefix} at loss scale ",
        tf.strings.as_string(scale, shortest=True), ": ",
        tf.strings.as_string(count), f" of {len(labels)} gradients "
        "non-finite: ", listing])
    return tf.print(line, output_stream=settings.output_stream)


def when_skipped(settings: OverflowReport, prefix: str,
                 count: Callable[[], tf.Operation],
                 grads_and_vars: tensors.GradsAndVars,
                 scale: tf.Tensor) -> Callable[[], tf.Operation]:
  """The skipped side of the step's gate: the skip count, and the report.

  Args:
    settings: The report's settings.
    prefix: What the line says happened ("step skipped", "micro-step
      dropped").
    count: Builds the op that counts the skip.
    grads_and_vars: The step's (gradient, variable) pairs, per replica under
      a strategy (cross-replica context).
    scale: The loss scale the step used.

  Returns:
    A function building the skipped side's op.
  """
  if all(g is None for g, _ in grads_and_vars):
    return count
  found = (origin.candidates(g for g, _ in grads_and_vars)
           if settings.first_nonfinite_op else [])

  def skipped() -> tf.Operation:
    with tf.name_scope("overflow_report"):
      report = _report(settings, prefix, grads_and_vars, scale)
      if found:
        with tf.control_dependencies([report]):  # The second line second.
          report = origin.report(found, settings.output_stream)
    return tf.group(count(), report)

  return skipped
