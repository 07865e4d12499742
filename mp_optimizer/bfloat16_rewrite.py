"""TensorFlow's oneDNN bfloat16 graph rewrite, with the bfloat16 mode's step.

On CPUs with AVX512-BF16 or AMX, TensorFlow's Grappler pass
`auto_mixed_precision_onednn_bfloat16` turns float32 ops that are safe in
bfloat16 (MatMul, convolutions and their gradients; softmax, reductions and
the loss stay float32) into bfloat16 oneDNN kernels, with casts around them:
an fp32 model then computes in bfloat16 without code changes. bfloat16 needs
no loss scale, but a step can still be non-finite, so the optimizer is
wrapped with `managers.NoLossScale()`: one finite check, a skipped step, the
signals and reports, as `enable_mixed_precision_graph_rewrite` does for
float16.

```
enable_bfloat16_graph_rewrite(opt):
    tf.config.optimizer.set_experimental_options(
        {"auto_mixed_precision_onednn_bfloat16": True})   # Sessions made later
    return MixedPrecisionLossScaleOptimizer(opt, managers.NoLossScale())
```

A `tf.compat.v1.Session` built without a config takes that option; one given
its own `ConfigProto` (and an Estimator's `RunConfig(session_config=...)`)
does not: pass it through `bfloat16_session_config(config)`. On a CPU
without either instruction set TensorFlow skips the pass (the graph stays
float32), so the switch warns when the CPU's flags say so.
"""

import os
import warnings
from typing import Any, FrozenSet, Optional

import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer import tf2
from mp_optimizer._internal import tensors

OPTION = "auto_mixed_precision_onednn_bfloat16"
# The flags of /proc/cpuinfo that oneDNN's bfloat16 kernels need (one of).
CPU_FLAGS = frozenset(("avx512_bf16", "amx_bf16"))
# Where Linux lists them; `enable_bfloat16_graph_rewrite` reads it.
CPUINFO = "/proc/cpuinfo"


def bfloat16_cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> Optional[FrozenSet[str]]:
  """The bfloat16 flags the CPU reports (`CPU_FLAGS` it has), or None.

  Args:
    cpuinfo: The file to read (Linux's `/proc/cpuinfo`).

  Returns:
    A frozenset (empty when the CPU has neither), or None where the file
    does not exist (not Linux): then nothing is known.
  """
  text = _read(cpuinfo)
  return None if text is None else _bfloat16_flags_in(text)


def warn_unless_bfloat16_cpu(cpuinfo_text: str, source: str) -> None:
  """Warns that TensorFlow skips the rewrite when no `CPU_FLAGS` are listed.

  `enable_bfloat16_graph_rewrite` calls it with the text of
  `/proc/cpuinfo`; any text of that shape (a `flags : ...` line per
  processor) can be checked the same way.

  Args:
    cpuinfo_text: The text of a `/proc/cpuinfo`.
    source: Where the text was read, named in the warning.
  """
  if _bfloat16_flags_in(cpuinfo_text):
    return
  warnings.warn(
      "This CPU has neither AVX512-BF16 nor AMX (no avx512_bf16 or "
      f"amx_bf16 in {source}): TensorFlow skips the bfloat16 rewrite here "
      "and the model computes in float32.", UserWarning,
      stacklevel=tensors.user_stacklevel())


def _read(path: str) -> Optional[str]:
  """The text of the file at `path`, or None where it does not exist."""
  if not os.path.exists(path):
    return None
  with open(path) as lines:
    return lines.read()


def _bfloat16_flags_in(cpuinfo_text: str) -> FrozenSet[str]:
  """The `CPU_FLAGS` named on the `flags` lines of a `/proc/cpuinfo` text."""
  flags = set()
  for line in cpuinfo_text.splitlines():
    key, _, value = line.partition(":")
    if key.strip() == "flags":
      flags.update(value.split())
  return frozenset(flags & CPU_FLAGS)


def bfloat16_session_config(
    config: Optional[tf.compat.v1.ConfigProto] = None
) -> tf.compat.v1.ConfigProto:
  """Returns a copy of `config` (or a new one) with the bfloat16 rewrite ON.

  For a `Session(config=...)` or `RunConfig(session_config=...)`, which do
  not take the option `enable_bfloat16_graph_rewrite` sets.

  Raises:
    TypeError: If `config` is not a `tf.compat.v1.ConfigProto`.
  """
  if config is not None and not isinstance(config, tf.compat.v1.ConfigProto):
    raise TypeError("`config` must be a tf.compat.v1.ConfigProto or None, "
                    f"got {type(config).__name__}.")
  copy = tf.compat.v1.ConfigProto()
  if config is not None:
    copy.CopyFrom(config)
  rewrite_options = copy.graph_options.rewrite_options
  setattr(rewrite_options, OPTION, type(rewrite_options).ON)
  return copy


def enable_bfloat16_graph_rewrite(
    opt: tf.compat.v1.train.Optimizer,
    compensated_update: Any = False) -> tf2.MixedPrecisionLossScaleOptimizer:
  """Wraps `opt` in the bfloat16 mode and turns on the oneDNN bfloat16 rewrite.

  Sessions created afterwards without a config of their own run the rewrite
  (see the module docstring); `disable_bfloat16_graph_rewrite` turns it off.

  Example:

  ```python
  opt = mp_optimizer.enable_bfloat16_graph_rewrite(
      tf.compat.v1.train.AdamOptimizer(1e-3))
  ```

  Args:
    opt: A `tf.compat.v1.train.Optimizer`, not already wrapped.
    compensated_update: As for `LossScaleOptimizer` (the rewrite keeps
      variables float32, so it only matters for bfloat16 variables).

  Returns:
    `MixedPrecisionLossScaleOptimizer(opt, managers.NoLossScale())`.

  Raises:
    TypeError: As `MixedPrecisionLossScaleOptimizer` for a wrong `opt`.
    ValueError: As `MixedPrecisionLossScaleOptimizer` for a wrapped `opt`.
  """
  wrapped = tf2.MixedPrecisionLossScaleOptimizer(
      opt, managers.NoLossScale(), compensated_update=compensated_update)
  tf.config.optimizer.set_experimental_options({OPTION: True})
  cpuinfo_text = _read(CPUINFO)
  if cpuinfo_text is not None:  # Elsewhere nothing is known: no warning.
    warn_unless_bfloat16_cpu(cpuinfo_text, CPUINFO)
  return wrapped


def disable_bfloat16_graph_rewrite() -> None:
  """Turns the oneDNN bfloat16 rewrite off for Sessions created from now on."""
  tf.config.optimizer.set_experimental_options({OPTION: False})
