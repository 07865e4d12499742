"""TF2's door: `MixedPrecisionLossScaleOptimizer` and the graph-rewrite switch.

Same names and arguments as `tf.compat.v1.mixed_precision`, same numbers as
TF's built-in for a dynamic scale, on the one `LossScaleOptimizer`.
"""

from typing import Any, Optional

import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer import optimizer as optimizer_lib

class MixedPrecisionLossScaleOptimizer(optimizer_lib.LossScaleOptimizer):
  """`tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer`, fixed.

  Accepts what TF's optimizer accepts and behaves the same for a dynamic
  scale: the same loss-scale arithmetic and the same skipped steps, bit for
  bit. The differences: a fixed scale skips NaN/Inf steps instead of writing
  NaN into the weights (`managers.FixedLossScale(v, skip_nonfinite_steps=False)`
  restores TF's behaviour), and contrib's fixes (None and sparse gradients,
  managers used across graphs) apply.

  Example:

  ```python
  opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(
      tf.compat.v1.train.AdamOptimizer(1e-3), "dynamic")
  train_op = opt.minimize(loss)
  ```

  Args:
    opt: A `tf.compat.v1.train.Optimizer`.
    loss_scale: "dynamic", an int/float (a fixed scale), a `managers.LossScale`
      or any `managers.LossScaleManager`, or one of TF's own
      `tf.compat.v1.mixed_precision.FixedLossScale`/`DynamicLossScale`
      objects (rebuilt from their config).
    initial_scale: Keyword-only Keras alias, with `loss_scale="dynamic"` only:
      the starting scale.
    dynamic_growth_steps: Keyword-only Keras alias, with `loss_scale="dynamic"`
      only: finite steps between increases.
    **options: Keyword-only `clipnorm`, `clipvalue`, `global_clipnorm` and
      `gradient_accumulation_steps`, as for `LossScaleOptimizer`.

  Raises:
    TypeError: If `opt` is not a v1 optimizer.
    ValueError: For a `loss_scale` that is None, of another type, an unknown
      string or a number below 1 (TF's class for these), aliases given with a
      loss scale that is not "dynamic", or an `opt` that is already wrapped
      (by this class or by TensorFlow's).
  """

  def __init__(self, opt: tf.compat.v1.train.Optimizer, loss_scale: Any, *,
               initial_scale: Optional[float] = None,
               dynamic_growth_steps: Optional[int] = None,
               **options):
    aliases = {k: v for k, v in (("initial_scale", initial_scale),
                                 ("dynamic_growth_steps", dynamic_growth_steps))
               if v is not None}
    if aliases:
      if not (isinstance(loss_scale, str) and loss_scale == "dynamic"):
        raise ValueError(
            f"`{next(iter(aliases))}` only applies with loss_scale='dynamic', "
            f"got loss_scale={loss_scale!r}. Pass a managers.DynamicLossScale "
            "with those settings instead.")
      manager = managers.DynamicLossScale(**aliases)
    else:
      manager = managers.get(loss_scale)
    super().__init__(opt, manager, **options)


def enable_mixed_precision_graph_rewrite(
    opt: tf.compat.v1.train.Optimizer,
    loss_scale: Any = "dynamic") -> MixedPrecisionLossScaleOptimizer:
  """Wraps `opt` in our optimizer and turns on TF's float16 graph rewrite.

  Sessions created afterwards run TensorFlow's `auto_mixed_precision` Grappler
  pass, which turns float32 ops that are safe in float16 into float16 ops on
  GPU, so an fp32 model trains in mixed precision without code changes; loss
  scaling keeps its small gradients alive. Sessions that already exist are not
  changed. `disable_mixed_precision_graph_rewrite` turns the pass off again.

  The pass touches only nodes placed on a GPU and does nothing on a machine
  without one. To see the rewrite on a CPU, give the Session (or an
  Estimator's `RunConfig(session_config=...)`) a config with
  `graph_options.rewrite_options.auto_mixed_precision_cpu = ON`: Grappler then
  rounds the inputs and outputs of float16-safe ops through float16 `Cast`
  nodes (or, with the environment variable
  `TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_EMULATE_FP16=0`, runs them as float16
  CPU kernels), so overflow and precision loss are those of float16. That
  option lives in each Session's config, which this function cannot reach,
  so it is not an argument here.

  TensorFlow's only public switch for Sessions is its own
  `tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite`; it is
  called here with a throwaway optimizer and a fixed scale of 1 (which builds
  nothing), so TF's own checks (e.g. against a Keras mixed-precision policy)
  still run. TF logs a deprecation warning for that call.

  Args:
    opt: A `tf.compat.v1.train.Optimizer`, not already wrapped.
    loss_scale: As for `MixedPrecisionLossScaleOptimizer`; default "dynamic".

  Returns:
    The wrapped optimizer.

  Raises:
    TypeError, ValueError: As `MixedPrecisionLossScaleOptimizer`; ValueError
      also if a Keras mixed-precision policy is already set.
  """
  wrapped = MixedPrecisionLossScaleOptimizer(opt, loss_scale)
  tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(
      tf.compat.v1.train.GradientDescentOptimizer(1.0), loss_scale=1)
  return wrapped


def disable_mixed_precision_graph_rewrite() -> None:
  """Turns the float16 graph rewrite off for Sessions created from now on.

  Optimizers already wrapped keep scaling the loss, which is harmless.
  """
  tf.compat.v1.mixed_precision.disable_mixed_precision_graph_rewrite()
