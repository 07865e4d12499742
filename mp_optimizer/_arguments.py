"""Checks of the optimizers' constructor arguments, with messages that tell the fix.

Every mistake gets its own message: arguments swapped, a class where an
instance belongs, a string or number given to the contrib constructor, a
missing manager, an object from a user's own `managers` folder. A wrong type
raises `ArgumentTypeError`, which is both a `TypeError` (this project's rule)
and a `ValueError` (what TensorFlow's `MixedPrecisionLossScaleOptimizer` and
`enable_mixed_precision_graph_rewrite` raise), so code written against either
keeps catching it.
"""

import inspect
from typing import Any, Optional

import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer.errors import ArgumentTypeError
from mp_optimizer._internal import validation

_OPTIMIZER = tf.compat.v1.train.Optimizer
_TF_WRAPPER = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer
_TF_LOSS_SCALE = tf.compat.v1.mixed_precision.LossScale


KERAS_HINT = (
    " [a tf.compat.v1 graph-mode optimizer: a Keras model needs a Keras "
    "optimizer, wrapped as tf.keras.mixed_precision.LossScaleOptimizer(...), "
    "with tf.keras.mixed_precision.set_global_policy('mixed_float16')]")
_NO_GRADIENTS_HINT = (
    "(No variable got a gradient: the loss does not depend on them, an op "
    "between them has no gradient (an integer cast, tf.argmax, "
    "tf.stop_gradient), or `var_list` names other variables than the "
    "model's.)")
_NO_GRADIENTS_UNDER_STRATEGY = (
    " (Under tf.distribute, also: tensors made from the variables outside "
    "the replica function, such as the float16 casts of "
    "`float32_master_weights()` or another custom getter when the variables "
    "are created directly under `strategy.scope()`, reach one replica's "
    "copies only. Create the variables inside the function given to "
    "`strategy.run`, or in the model_fn.)")


def no_gradients_hint() -> str:
  """What `minimize` adds to TF's error when no variable got a gradient."""
  return _NO_GRADIENTS_HINT + (_NO_GRADIENTS_UNDER_STRATEGY
                               if tf.distribute.has_strategy() else "")


class _Required:
  """Default of an argument that must be given; it reads `<required>`."""

  def __repr__(self) -> str:
    return "<required>"


REQUIRED = _Required()


class ClassSignature:
  """A class's `__signature__`: its `__init__`'s, with `REQUIRED` required.

  `REQUIRED` lets a constructor explain a missing argument itself instead of
  Python's "missing 1 required positional argument"; `help()` and `inspect`
  still show that argument as required, with no default, for each class.
  """

  def __get__(self, instance, owner) -> inspect.Signature:
    signature = inspect.signature(owner.__init__)
    parameters = list(signature.parameters.values())[1:]  # Drop `self`.
    return signature.replace(parameters=[
        p.replace(default=p.empty) if p.default is REQUIRED else p
        for p in parameters])


def _is_loss_scale(value: Any) -> bool:
  """True for what either constructor takes as its second argument."""
  if isinstance(value, bool):
    return False
  return (isinstance(value, (managers.LossScaleManager, _TF_LOSS_SCALE,
                             int, float)) or
          isinstance(value, str) and value == "dynamic")


def _foreign_manager_message(argument: str, value: Any) -> Optional[str]:
  """Explains an object with a manager's methods that is not a manager."""
  if not all(hasattr(value, name) for name in ("get_loss_scale",
                                               "update_loss_scale")):
    return None
  cls = value if isinstance(value, type) else type(value)
  return (f"`{argument}` is {cls.__name__} from {cls.__module__}, which has "
          "the methods of a loss-scale manager but is not a "
          "managers.LossScaleManager. Subclass "
          "`mp_optimizer.managers.LossScaleManager`, or use one of its "
          "classes (`from mp_optimizer import managers`).")


def check_optimizer(api: str, opt: Any, second: Any) -> None:
  """Checks `opt`, an unwrapped `tf.compat.v1.train.Optimizer` instance.

  Args:
    api: The public name of the constructor, quoted in messages.
    opt: The first argument.
    second: The second argument (the manager or loss scale), to recognize
      swapped arguments.

  Raises:
    ArgumentTypeError: If `opt` is not an optimizer instance.
    ValueError: If `opt` is already wrapped by a loss-scale optimizer, or is
      a `SyncReplicasOptimizer` (it must wrap ours instead).
  """
  if isinstance(opt, _OPTIMIZER):
    if hasattr(opt, "loss_scale_manager") or isinstance(opt, _TF_WRAPPER):
      raise ValueError(  # TF's words first: its tests match them.
          f'"opt" must not already be an instance of a {type(opt).__name__}. '
          f"`opt` is already a {type(opt).__name__}; wrapping it again would "
          "scale the loss twice. Pass the optimizer it wraps instead "
          "(`opt.inner_optimizer` for ours), got "
          f"{validation.describe(opt)}.")
    if isinstance(opt, tf.compat.v1.train.SyncReplicasOptimizer):
      raise ValueError(
          "`opt` is a SyncReplicasOptimizer, whose chief applies gradients "
          "from a queue runner that cannot see this step's finite check. "
          "Wrap the other way round: SyncReplicasOptimizer("
          f"{api}(opt, ...), ...). Got {validation.describe(opt)}.")
    return
  if isinstance(second, _OPTIMIZER) and _is_loss_scale(opt):
    shown = (repr(opt) if isinstance(opt, (str, int, float))
             else f"{type(opt).__name__}(...)")
    raise ArgumentTypeError(
        f"The arguments of {api} are swapped: it takes the optimizer first, "
        f"then the loss scale, as in {api}(opt, {shown}); got "
        f"opt={validation.describe(opt)}.")
  if isinstance(opt, type) and issubclass(opt, _OPTIMIZER):
    raise ArgumentTypeError(
        f"`opt` must be an optimizer instance, got the class {opt.__name__}. "
        f"Create one first, e.g. {api}({opt.__name__}(learning_rate=1e-3), "
        "...).")
  raise ArgumentTypeError(
      "`opt` must be a tf.compat.v1.train.Optimizer, got "
      f"{validation.describe(opt)}. For a Keras optimizer use "
      "tf.keras.mixed_precision.LossScaleOptimizer.")


def check_manager(api: str, manager: Any) -> None:
  """Checks the contrib constructor's `loss_scale_manager`.

  Raises:
    ArgumentTypeError: If it is missing or not a `managers.LossScaleManager`.
  """
  if isinstance(manager, managers.LossScaleManager):
    return
  example = "managers.ExponentialUpdateLossScaleManager(2**15, 2000)"
  if manager is REQUIRED:
    raise ArgumentTypeError(
        f"{api} needs a loss-scale manager as its second argument, e.g. "
        f"{api}(opt, {example}) or {api}(opt, "
        "managers.FixedLossScaleManager(128)). For TensorFlow's default "
        "dynamic scale use "
        "mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, 'dynamic').")
  if isinstance(manager, type) and issubclass(manager, managers.LossScaleManager):
    raise ArgumentTypeError(
        "`loss_scale_manager` must be a manager instance, got the class "
        f"{manager.__name__}: call it to create one ({manager.__name__}(...)).")
  if isinstance(manager, (str, int, float, _TF_LOSS_SCALE)):
    raise ArgumentTypeError(
        "`loss_scale_manager` must be a managers.LossScaleManager, got "
        f"{validation.describe(manager)}. For 'dynamic', a number or "
        "TensorFlow's loss scales use "
        "mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, "
        f"{manager!r}); {api} (contrib's constructor) takes a manager such "
        f"as {example}.")
  raise ArgumentTypeError(
      _foreign_manager_message("loss_scale_manager", manager) or
      "`loss_scale_manager` must be a managers.LossScaleManager (e.g. "
      f"{example}), got {validation.describe(manager)}.")


def check_loss_scale(api: str, loss_scale: Any) -> None:
  """Checks what `managers.get` cannot explain in the TF2 constructor.

  Everything else (strings, numbers, TF's loss scales) is `managers.get`'s.

  Raises:
    ArgumentTypeError: If `loss_scale` is missing, a class, or a manager-like
      object that is not one of this library's.
  """
  if loss_scale is REQUIRED:
    raise ArgumentTypeError(
        f"{api} needs `loss_scale` as its second argument: 'dynamic' "
        f"(TensorFlow's default dynamic scale), a number, or a manager, e.g. "
        f"{api}(opt, 'dynamic').")
  if isinstance(loss_scale, type):
    raise ArgumentTypeError(
        f"`loss_scale` must be a loss-scale instance, got the class "
        f"{loss_scale.__name__}: call it to create one "
        f"({loss_scale.__name__}(...)), or pass 'dynamic'.")
  if not isinstance(loss_scale, (managers.LossScaleManager, _TF_LOSS_SCALE)):
    message = _foreign_manager_message("loss_scale", loss_scale)
    if message:
      raise ArgumentTypeError(message)


def optimizer_repr(optimizer: Any, options: dict) -> str:
  """The constructor call that builds `optimizer`: every non-default option.

  Args:
    optimizer: A `LossScaleOptimizer` (or subclass).
    options: The keyword options as the constructor stored them; None and
      False are the defaults and are left out.

  Returns:
    E.g. `LossScaleOptimizer(<AdamOptimizer 'Adam'>,
    ExponentialUpdateLossScaleManager(...), clipnorm=1.0)`.
  """
  inner = optimizer.inner_optimizer
  parts = [f"<{type(inner).__name__} {inner.get_name()!r}>",
           repr(optimizer.loss_scale_manager)]
  parts += [f"{name}={value!r}" for name, value in options.items()
            if value is not None and value is not False]
  return f"{type(optimizer).__name__}({', '.join(parts)})"
