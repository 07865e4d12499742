"""TF2's door: `MixedPrecisionLossScaleOptimizer` and the graph-rewrite switch.

Same names and arguments as `tf.compat.v1.mixed_precision`, same numbers as
TF's built-in for a dynamic scale, on the one `LossScaleOptimizer`.
"""

from typing import Any, Optional

import tensorflow as tf

from mp_optimizer import _arguments
from mp_optimizer.errors import ArgumentTypeError
from mp_optimizer._internal import tf_private
from mp_optimizer._internal import validation
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
    clipnorm: Keyword-only, as for `LossScaleOptimizer`.
    clipvalue: Keyword-only, as for `LossScaleOptimizer`.
    global_clipnorm: Keyword-only, as for `LossScaleOptimizer`.
    gradient_accumulation_steps: Keyword-only, as for `LossScaleOptimizer`.
    overflow_report: Keyword-only, as for `LossScaleOptimizer`.
    precision_telemetry: Keyword-only, as for `LossScaleOptimizer`.
    compensated_update: Keyword-only, as for `LossScaleOptimizer`.

  Raises:
    TypeError: If `opt` is not a v1 optimizer, or `loss_scale` is missing, a
      class or a manager-like object from another `managers` (these errors
      are also ValueErrors, the class TF raised), or an option is not a
      number.
    ValueError: For a `loss_scale` that is None, of another type, an unknown
      string or a number below 1 (TF's class for these), aliases given with a
      loss scale that is not "dynamic", an option out of range, or an `opt`
      that is already wrapped (by this class or by TensorFlow's).
  """

  def __init__(self, opt: tf.compat.v1.train.Optimizer,
               loss_scale: Any = _arguments.REQUIRED, *,
               initial_scale: Optional[float] = None,
               dynamic_growth_steps: Optional[int] = None,
               clipnorm: Optional[float] = None,
               clipvalue: Optional[float] = None,
               global_clipnorm: Optional[float] = None,
               gradient_accumulation_steps: Optional[int] = None,
               overflow_report: Any = False,
               precision_telemetry: bool = False,
               compensated_update: Any = False):
    """Wraps `opt`; the arguments are described in the class docstring."""
    _arguments.check_optimizer(type(self).__name__, opt, loss_scale)
    _arguments.check_loss_scale(type(self).__name__, loss_scale)
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
    super().__init__(opt, manager, clipnorm=clipnorm, clipvalue=clipvalue,
                     global_clipnorm=global_clipnorm,
                     gradient_accumulation_steps=gradient_accumulation_steps,
                     overflow_report=overflow_report,
                     precision_telemetry=precision_telemetry,
                     compensated_update=compensated_update)


def enable_mixed_precision_graph_rewrite(
    opt: Any, loss_scale: Any = "dynamic") -> Any:
  """Wraps `opt` for loss scaling and turns on TF's float16 graph rewrite.

  Sessions created afterwards run TensorFlow's `auto_mixed_precision` Grappler
  pass, which turns float32 ops that are safe in float16 into float16 ops on
  GPU, so an fp32 model trains in mixed precision without code changes; loss
  scaling keeps its small gradients alive. Sessions that already exist are not
  changed (TF logs a warning when one exists).
  `disable_mixed_precision_graph_rewrite` turns the pass off again.

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
  `tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite`. For a
  v1 optimizer it is called here with a throwaway optimizer and a fixed scale
  of 1 (which builds nothing), so TF's own checks (e.g. against a Keras
  mixed-precision policy) and its warning still run; TF logs a deprecation
  warning for that call. A Keras optimizer that TF's function wraps itself
  (an `OptimizerV2`: `tf.keras.optimizers.legacy.*` on TF <= 2.15, or TF's
  frozen Keras copy `tensorflow.python.keras.optimizer_v2` on any version;
  TF's own registry decides) is handed to TF's function, which wraps it in
  Keras's `LossScaleOptimizer` with `loss_scale` converted by Keras. TF
  refuses Keras 3 optimizers (`tf.keras` on TF >= 2.16) and Keras 2's newer
  `tf.keras.optimizers.*`, and so does this function.

  Args:
    opt: A `tf.compat.v1.train.Optimizer` or a Keras `OptimizerV2`, not
      already wrapped.
    loss_scale: As for `MixedPrecisionLossScaleOptimizer`; default "dynamic".
      With a Keras optimizer: "dynamic", a number, or TF's own
      `FixedLossScale`/`DynamicLossScale` (multiplier 2), as Keras converts.

  Returns:
    A `MixedPrecisionLossScaleOptimizer` for a v1 optimizer; Keras's
    `LossScaleOptimizer` for a Keras 2 optimizer.

  Raises:
    TypeError: As `MixedPrecisionLossScaleOptimizer`, for a v1 optimizer.
    ValueError: If `opt` is neither kind of optimizer (a TypeError too) or is
      already wrapped, for a bad `loss_scale` (Keras's checks for a Keras
      optimizer), or if a Keras mixed-precision policy is already set.
  """
  if not isinstance(opt, tf.compat.v1.train.Optimizer):
    _check_keras_arguments(opt, loss_scale)
    return tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(
        opt, loss_scale)
  wrapped = MixedPrecisionLossScaleOptimizer(opt, loss_scale)
  tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(
      tf.compat.v1.train.GradientDescentOptimizer(1.0), loss_scale=1)
  return wrapped


def _tf_refusal(opt: Any) -> str:
  """TensorFlow's own first sentence when its switch refuses `opt`.

  TF's tests (and code written against TF) match these words, so every
  refusal here starts with them and goes on in this library's words.
  """
  wrapped = [cls for cls in tf_private.wrapper_classes()
             if isinstance(opt, cls)]
  if wrapped:
    return (f'"opt" must not already be an instance of a '
            f"{wrapped[0].__name__}.")
  if isinstance(opt, tf_private.keras_optimizer_classes()):
    # TF hands it to Keras's wrapper, whose constructor refuses it.
    return ("LossScaleOptimizer cannot wrap another LossScaleOptimizer, but "
            f"got: {opt}.")
  return ('"opt" must be an instance of a tf.train.Optimizer or a '
          f"tf.keras.optimizers.Optimizer, but got: {opt}.")


def _check_keras_arguments(opt: Any, loss_scale: Any) -> None:
  """Lets through what TF's built-in wraps for Keras, with clear errors else.

  TF's own registry of optimizer wrappers (`mp_optimizer._internal.tf_private`)
  decides, as it does inside TF's switch; each message starts with TF's own
  words (`_tf_refusal`).
  """
  wrappers = tf_private.wrapper_classes()
  if hasattr(opt, "inner_optimizer") or isinstance(opt, wrappers):
    raise ArgumentTypeError(
        f"{_tf_refusal(opt)} `opt` is already a {type(opt).__name__} "
        "(Keras's loss-scale optimizer); enable_mixed_precision_graph_rewrite "
        "wraps the optimizer itself. Pass `opt.inner_optimizer` instead, got "
        f"{opt!r}.")
  if not isinstance(opt, tf_private.keras_optimizer_classes()):
    keras_hint = (
        " TensorFlow's own enable_mixed_precision_graph_rewrite refuses this "
        "optimizer too (it wraps only the optimizer classes registered with "
        "it); with Keras use "
        "tf.keras.mixed_precision.set_global_policy('mixed_float16') and "
        "tf.keras.mixed_precision.LossScaleOptimizer."
        if hasattr(opt, "apply_gradients") else "")
    raise ArgumentTypeError(
        f"{_tf_refusal(opt)} Here that means a tf.compat.v1.train.Optimizer "
        "or a Keras optimizer that TensorFlow's graph rewrite wraps (an "
        "OptimizerV2: tf.keras.optimizers.legacy, up to TensorFlow 2.15), got "
        f"{validation.describe(opt)}." + keras_hint)
  if isinstance(loss_scale, managers.LossScaleManager):
    raise ValueError(  # Keras's first sentence, then ours.
        "Invalid value passed to loss_scale. With a Keras optimizer, "
        "`loss_scale` goes to Keras's "
        "LossScaleOptimizer, which takes 'dynamic', a number, or "
        "tf.compat.v1.mixed_precision.FixedLossScale/DynamicLossScale; got "
        f"{loss_scale!r}.")


def disable_mixed_precision_graph_rewrite() -> None:
  """Turns the float16 graph rewrite off for Sessions created from now on.

  Optimizers already wrapped keep scaling the loss, which is harmless.
  """
  tf.compat.v1.mixed_precision.disable_mixed_precision_graph_rewrite()
