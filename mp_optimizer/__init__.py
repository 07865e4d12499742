"""Float16 loss scaling for `tf.compat.v1` graph code on TensorFlow 2.x.

`LossScaleOptimizer(opt, manager)` is the `tf.contrib.mixed_precision` API
(also importable name for name from `mp_optimizer.contrib`);
`MixedPrecisionLossScaleOptimizer(opt, loss_scale)` is TF's
`tf.compat.v1.mixed_precision` API. Both are one optimizer. The loss-scale
policies live in `mp_optimizer.managers` (`from mp_optimizer import
managers`). `mp_optimizer.signals` and `LossScaleHook` show which steps were
skipped.

The names below load on first use, so `python -m mp_optimizer.migrate` (which
needs no TensorFlow) starts without importing TensorFlow. Type checkers see
them as ordinary imports, and a misspelt name is an error for them too.
"""

import importlib
from typing import TYPE_CHECKING, Any, List

__version__ = "0.1.0"

if TYPE_CHECKING:  # What type checkers see; at run time `__getattr__` loads these.
  from mp_optimizer import contrib as contrib
  from mp_optimizer import errors as errors
  from mp_optimizer import managers as managers
  from mp_optimizer import overflow as overflow
  from mp_optimizer import signals as signals
  from mp_optimizer._step.scaling import allow_unscaled_gradients as allow_unscaled_gradients
  from mp_optimizer.bfloat16_rewrite import bfloat16_cpu_flags as bfloat16_cpu_flags
  from mp_optimizer.bfloat16_rewrite import bfloat16_session_config as bfloat16_session_config
  from mp_optimizer.bfloat16_rewrite import disable_bfloat16_graph_rewrite as disable_bfloat16_graph_rewrite
  from mp_optimizer.bfloat16_rewrite import enable_bfloat16_graph_rewrite as enable_bfloat16_graph_rewrite
  from mp_optimizer.hooks import LossScaleHook as LossScaleHook
  from mp_optimizer.master_weights import float32_master_weights as float32_master_weights
  from mp_optimizer.master_weights import float32_variable_getter as float32_variable_getter
  from mp_optimizer.nvidia_environment import honour_nvidia_environment as honour_nvidia_environment
  from mp_optimizer.optimizer import LossScaleOptimizer as LossScaleOptimizer
  from mp_optimizer.resume import ResumeCheckHook as ResumeCheckHook
  from mp_optimizer.saver import Saver as Saver
  from mp_optimizer.signals import add_summaries as add_summaries
  from mp_optimizer.signals import skipped_steps as skipped_steps
  from mp_optimizer.signals import step_applied as step_applied
  from mp_optimizer.tf2 import MixedPrecisionLossScaleOptimizer as MixedPrecisionLossScaleOptimizer
  from mp_optimizer.tf2 import disable_mixed_precision_graph_rewrite as disable_mixed_precision_graph_rewrite
  from mp_optimizer.tf2 import enable_mixed_precision_graph_rewrite as enable_mixed_precision_graph_rewrite

# Public name -> module that defines it.
_EXPORTS = {
    "LossScaleHook": "mp_optimizer.hooks",
    "LossScaleOptimizer": "mp_optimizer.optimizer",
    "MixedPrecisionLossScaleOptimizer": "mp_optimizer.tf2",
    "ResumeCheckHook": "mp_optimizer.resume",
    "Saver": "mp_optimizer.saver",
    "add_summaries": "mp_optimizer.signals",
    "allow_unscaled_gradients": "mp_optimizer._step.scaling",
    "bfloat16_cpu_flags": "mp_optimizer.bfloat16_rewrite",
    "bfloat16_session_config": "mp_optimizer.bfloat16_rewrite",
    "disable_bfloat16_graph_rewrite": "mp_optimizer.bfloat16_rewrite",
    "enable_bfloat16_graph_rewrite": "mp_optimizer.bfloat16_rewrite",
    "disable_mixed_precision_graph_rewrite": "mp_optimizer.tf2",
    "enable_mixed_precision_graph_rewrite": "mp_optimizer.tf2",
    "float32_master_weights": "mp_optimizer.master_weights",
    "float32_variable_getter": "mp_optimizer.master_weights",
    "honour_nvidia_environment": "mp_optimizer.nvidia_environment",
    "skipped_steps": "mp_optimizer.signals",
    "step_applied": "mp_optimizer.signals",
}
_SUBMODULES = ("contrib", "errors", "managers", "overflow", "signals")

__all__ = [
    "LossScaleHook",
    "LossScaleOptimizer",
    "MixedPrecisionLossScaleOptimizer",
    "ResumeCheckHook",
    "Saver",
    "add_summaries",
    "allow_unscaled_gradients",
    "bfloat16_cpu_flags",
    "bfloat16_session_config",
    "contrib",
    "disable_bfloat16_graph_rewrite",
    "disable_mixed_precision_graph_rewrite",
    "enable_bfloat16_graph_rewrite",
    "enable_mixed_precision_graph_rewrite",
    "errors",
    "float32_master_weights",
    "float32_variable_getter",
    "honour_nvidia_environment",
    "managers",
    "overflow",
    "signals",
    "skipped_steps",
    "step_applied",
]

if not TYPE_CHECKING:  # Hidden from type checkers: a typo stays an error.

  def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
      value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBMODULES:
      value = importlib.import_module(f"mp_optimizer.{name}")
    else:
      raise AttributeError(f"module 'mp_optimizer' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> List[str]:
  # Only the public names: not the helpers imported here, nor the internal
  # submodules Python binds on this package once something imports them.
  return sorted([*__all__, "__version__"])
