"""Float16 loss scaling for `tf.compat.v1` graph code on TensorFlow 2.x.

`LossScaleOptimizer(opt, manager)` is the `tf.contrib.mixed_precision` API
(also importable name for name from `mp_optimizer.contrib`);
`MixedPrecisionLossScaleOptimizer(opt, loss_scale)` is TF's
`tf.compat.v1.mixed_precision` API. Both are one optimizer. The loss-scale
policies live in the sibling package `managers`. `mp_optimizer.signals` and
`LossScaleHook` show which steps were skipped.
"""

from mp_optimizer import contrib
from mp_optimizer import signals
from mp_optimizer.hooks import LossScaleHook
from mp_optimizer.optimizer import LossScaleOptimizer
from mp_optimizer.signals import add_summaries
from mp_optimizer.signals import skipped_steps
from mp_optimizer.signals import step_applied
from mp_optimizer.tf2 import MixedPrecisionLossScaleOptimizer
from mp_optimizer.tf2 import disable_mixed_precision_graph_rewrite
from mp_optimizer.tf2 import enable_mixed_precision_graph_rewrite

__version__ = "0.1.0"

__all__ = [
    "LossScaleHook",
    "LossScaleOptimizer",
    "MixedPrecisionLossScaleOptimizer",
    "add_summaries",
    "contrib",
    "disable_mixed_precision_graph_rewrite",
    "enable_mixed_precision_graph_rewrite",
    "signals",
    "skipped_steps",
    "step_applied",
]
