"""Arguments of legacy calls whose meaning changes, and what to do about it.

`flow.LegacyCalls` applies these rules to each call of a legacy name:

* Step counts written as float literals (`incr_every_n_steps=1000.0`,
  `increment_period=1e3`) become ints when whole; contrib failed on them at
  graph build (int32 counters). Any other float is reported.
* A fixed scale of TensorFlow's own API (`FixedLossScale(128)`, a number given
  as `loss_scale`) now skips NaN/Inf steps, where TensorFlow applied them: a
  notice names the spelling that keeps TensorFlow's behaviour. (Not for a
  Keras optimizer: Keras's LossScaleOptimizer wraps it, as TF's did.)
* An optimizer wrapped twice in the same function (`opt =
  enable_mixed_precision_graph_rewrite(opt)` then `LossScaleOptimizer(opt,
  manager)`) is reported: the replacement refuses an optimizer that is
  already wrapped.
* A Keras optimizer (`tf.keras.optimizers.Adam()`, also reached through a
  name, a `from ... import` or an alias such as `tfk = tf.keras`) given to the
  graph rewrite is converted (the replacement does what TensorFlow's did) and
  reported: TensorFlow 2.x's rewrite takes only Keras 2's legacy optimizers,
  so such code fails there unless it is moved to Keras's own mixed
  precision. With a loss-scale object it is reported as such.
"""

from typing import Callable, Dict, List, Optional

import libcst as cst

from mp_optimizer.migrate import names
from mp_optimizer.migrate.resolve import source_text

WRAPPERS = frozenset({"LossScaleOptimizer", "MixedPrecisionLossScaleOptimizer",
                      "enable_mixed_precision_graph_rewrite"})
# Legacy name -> {argument: position} of its step counts.
_STEP_COUNTS: Dict[str, Dict[str, int]] = {
    "ExponentialUpdateLossScaleManager": {"incr_every_n_steps": 1,
                                          "decr_every_n_nan_or_inf": 2},
    "DynamicLossScale": {"increment_period": 1},
}
_KERAS_ALIASES = tuple(f"{package}{compat}.optimizers."
                       for package in ("tensorflow", "tensorflow_core")
                       for compat in ("", ".compat.v2"))
_NUMBERS = (cst.Integer, cst.Float, cst.BinaryOperation, cst.UnaryOperation)
_FIXED_SKIPS = ("now skips steps with NaN/Inf gradients where TensorFlow "
                "applied them; to keep TensorFlow's behaviour write ")


def argument(call: cst.Call, position: int,
             keyword: str) -> Optional[cst.Arg]:
  """The argument `call` passes as `keyword` (or at `position`), if any."""
  for index, arg in enumerate(call.args):
    if arg.keyword is not None:
      if arg.keyword.value == keyword:
        return arg
    elif arg.star:
      return None
    elif index == position:
      return arg
  return None


def keras_rewrite_finding(opt_text: str) -> str:
  """Why a Keras optimizer given to the graph rewrite needs a human."""
  return (f"`{opt_text}` is a Keras optimizer: TensorFlow 2.x's "
          "enable_mixed_precision_graph_rewrite (and the replacement, which "
          "does the same) accepts only Keras 2's legacy optimizers "
          "(tf.keras.optimizers.legacy, up to TensorFlow 2.15) and raises "
          "ValueError for any other; for Keras use "
          "tf.keras.mixed_precision.set_global_policy('mixed_float16'), and "
          "model.compile wraps the optimizer in Keras's LossScaleOptimizer")


def is_keras_optimizer(paths: List[str]) -> bool:
  """True if a callee resolving to `paths` makes a Keras optimizer (also
  through TF 2.x's `tf.optimizers`, or Keras's LossScaleOptimizer)."""
  return any(("keras" in p.split(".") and ("optimizers" in p.split(".") or
                                           p.endswith("LossScaleOptimizer")))
             or p.startswith(_KERAS_ALIASES) for p in paths)


def is_v1_optimizer(paths: List[str]) -> bool:
  """True if a callee resolving to `paths` makes a tf.compat.v1 optimizer."""
  return any(p.split(".")[0] in ("tensorflow", "tensorflow_core") and
             ".train." in p and p.endswith("Optimizer") and
             "experimental" not in p for p in paths)


def fix_step_counts(call: cst.Call, target: names.Target,
                    report: Callable[[str], None]) -> cst.Call:
  """Returns `call` with whole float step counts written as ints."""
  args = list(call.args)
  for keyword, position in _STEP_COUNTS.get(target.name, {}).items():
    arg = argument(call, position, keyword)
    if arg is None or not isinstance(arg.value, cst.Float):
      continue
    value = float(arg.value.value.replace("_", ""))
    if value.is_integer():
      args[args.index(arg)] = arg.with_changes(
          value=cst.Integer(str(int(value))))
    else:
      report(f"`{keyword}={arg.value.value}` is not a whole number of steps "
             "(the counters are integers): write the int you mean")
  return call.with_changes(args=args)


def fixed_scale_notice(call: cst.Call, target: names.Target, managers: str,
                       is_scale_object: Callable[[cst.BaseExpression], bool],
                       opt_is_v1: bool) -> Optional[str]:
  """The notice for a fixed scale of TensorFlow's API in `call`, if any.

  Args:
    call: A call of a legacy name, as written.
    target: What it refers to.
    managers: The name the file reaches the `managers` package by.
    is_scale_object: Whether an expression makes or names a legacy
      loss-scale object (a `FixedLossScale` has its own notice where it is
      made).
    opt_is_v1: Whether the optimizer is known to be a tf.compat.v1 one. The
      graph rewrite hands a Keras optimizer and its number to Keras's
      LossScaleOptimizer, where nothing changes, so for an optimizer of
      unknown kind the notice says it holds for a tf.compat.v1 one.
  """
  if target.family != names.TF:
    return None
  if target.name == "FixedLossScale":
    value = argument(call, 0, "loss_scale_value")
    shown = source_text(value.value) if value else "..."
    return (f"`FixedLossScale({shown})` " + _FIXED_SKIPS +
            f"`{managers}.FixedLossScale({shown}, skip_nonfinite_steps=False)`")
  if target.name not in ("MixedPrecisionLossScaleOptimizer",
                         "enable_mixed_precision_graph_rewrite"):
    return None
  scale = argument(call, 1, "loss_scale")
  if scale is None or is_scale_object(scale.value):
    return None  # "dynamic" by default; a loss-scale object speaks for itself.
  if isinstance(scale.value, (cst.SimpleString, cst.ConcatenatedString)):
    return None  # "dynamic" is the only string accepted.
  shown = source_text(scale.value)
  conditions = []
  opt = argument(call, 0, "opt")
  if (target.name == "enable_mixed_precision_graph_rewrite" and not opt_is_v1
      and opt is not None):
    conditions.append(f"`{source_text(opt.value)}` is a tf.compat.v1 "
                      "optimizer (a Keras one goes to Keras's "
                      "LossScaleOptimizer, unchanged)")
  if not isinstance(scale.value, _NUMBERS):
    conditions.append(f"`{shown}` is a number")
  maybe = f"if {' and '.join(conditions)}, " if conditions else ""
  return (f"{maybe}the fixed scale `loss_scale={shown}` " + _FIXED_SKIPS +
          f"`loss_scale={managers}.FixedLossScale({shown}, "
          "skip_nonfinite_steps=False)`")
