"""The bfloat16 mode's manager as the codemod writes it: `NoLossScale(...)`.

A float16 script's loss-scale manager with state becomes
`managers.NoLossScale(keep_state_of=<that manager>)`: the bfloat16 run keeps
the float16 run's scale state (never read nor updated), so checkpoints move
between the two with every key. A fixed scale has no state: plain
`NoLossScale()`. TF2's `loss_scale` argument is kept as what
`MixedPrecisionLossScaleOptimizer` makes of it (`tf2_mode`).
"""

import dataclasses
from typing import List, Optional

import libcst as cst

KEEP_STATE_OF = "keep_state_of"
KEPT = ("the manager's scale state is kept, never read nor updated, so the "
        "float16 run's checkpoints restore here and this run's restore in "
        "float16 with the scale it had")


@dataclasses.dataclass(frozen=True)
class Mode:
  """One `NoLossScale(...)` call the codemod writes.

  Attributes:
    call: The call.
    keeps_state: Whether it passes `keep_state_of`.
  """
  call: cst.Call
  keeps_state: bool


def no_loss_scale(package: str, kept: Optional[cst.BaseExpression]
                  ) -> cst.Call:
  """`package.NoLossScale()`, or with `keep_state_of=kept`."""
  args = [] if kept is None else [cst.Arg(
      kept, keyword=cst.Name(KEEP_STATE_OF),
      equal=cst.AssignEqual(cst.SimpleWhitespace(""),
                            cst.SimpleWhitespace("")))]
  return cst.Call(func=cst.parse_expression(f"{package}.NoLossScale"),
                  args=args)


def tf2_mode(package: str, loss_scale: Optional[cst.BaseExpression],
             aliases: List[cst.Arg]) -> Mode:
  """The bfloat16 mode for TF2's `loss_scale` (None: not passed).

  "dynamic" (TF's default) keeps a `DynamicLossScale`, made with the Keras
  aliases (`initial_scale=`, `dynamic_growth_steps=`) that set it; a number
  keeps nothing (a fixed scale has no state); any other expression keeps
  what `managers.get` makes of it, as the optimizer did.

  Args:
    package: How the file names `mp_optimizer`.
    loss_scale: The `loss_scale` argument's value, or None.
    aliases: The call's Keras alias arguments.
  """
  managers = f"{package}.managers"
  kept: Optional[cst.Call] = None
  if loss_scale is None or (isinstance(loss_scale, cst.SimpleString) and
                            loss_scale.evaluated_value == "dynamic"):
    if aliases:
      aliases = aliases[:-1] + [aliases[-1].with_changes(
          comma=cst.MaybeSentinel.DEFAULT)]
    kept = cst.Call(func=cst.parse_expression(f"{managers}.DynamicLossScale"),
                    args=aliases)
  elif not isinstance(loss_scale, (cst.Integer, cst.Float)):
    kept = cst.Call(func=cst.parse_expression(f"{managers}.get"),
                    args=[cst.Arg(loss_scale)])
  return Mode(no_loss_scale(managers, kept), kept is not None)
