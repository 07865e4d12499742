"""Calls of legacy names, judged with what flowed into their arguments.

The expression pass tells `LegacyCalls` about each assignment and function as
it passes them, in source order, and hands it each call of a legacy name to
rewrite (`calls.fix_step_counts`, continuation lines re-aligned) and report
on (fixed-scale notices, an optimizer wrapped twice, a Keras optimizer with a
loss-scale object). Only names bound in the same function (or at module
level) are followed, by the text they are written as (`opt`, `self.opt`).
"""

from typing import Callable, Dict, List, Optional, Set, Tuple

import libcst as cst

from mp_optimizer.migrate import calls
from mp_optimizer.migrate import layout
from mp_optimizer.migrate import names
from mp_optimizer.migrate import resolve
from mp_optimizer.migrate.resolve import source_text

_BLOCKS = (cst.IndentedBlock, cst.SimpleStatementSuite, cst.Module)
_NAMED = (cst.Name, cst.Attribute)


class LegacyCalls:
  """What each name was last bound to, and the checks that use it.

  Args:
    resolver: The expression pass's `resolve.Resolver`.
    managers: The name the file reaches the `managers` package by.
    report: `report(node, reason, needs_human=True)` records a finding.
  """

  def __init__(self, resolver: resolve.Resolver, managers: str,
               report: Callable[..., None]):
    self._resolve, self._managers, self._report = resolver, managers, report
    # Per scope: name -> [(kind, line, id of the block it was bound in)].
    self._scopes: List[Dict[str, List[Tuple[str, int, int]]]] = [{}]

  def enter_scope(self) -> None:
    self._scopes.append({})

  def leave_scope(self) -> None:
    self._scopes.pop()

  def bind(self, assign: cst.Assign) -> None:
    """Records `name = value` for each simple target of `assign`."""
    kind = self._kind(assign.value)
    block = self._resolve.parent(self._resolve.parent(assign))
    for target in assign.targets:
      if isinstance(target.target, _NAMED):
        self._scopes[-1].setdefault(source_text(target.target), []).append(
            (kind, self._resolve.line(assign), id(block)))

  def _bound(self, name: str, kinds: Set[str],
             blocks: Optional[Set[int]] = None) -> Optional[int]:
    """The line where `name` was last bound to one of `kinds`, if it was.

    With `blocks` (ids of the blocks around the use), only bindings made in
    one of them count: those ran before the use on every path.
    """
    for kind, line, block in reversed(self._scopes[-1].get(name, [])):
      if blocks is None or block in blocks:
        return line if kind in kinds else None
    return None

  def _ever(self, name: str, kind: str) -> bool:
    return any(k == kind for k, _, _ in self._scopes[-1].get(name, []))

  def _kind(self, value: cst.BaseExpression) -> str:
    """"wrapped", "scale", "keras" or "v1" (an optimizer), or "other"."""
    if not isinstance(value, cst.Call):
      return "other"
    target = self._resolve.target(value.func)
    if target is not None and target.name in calls.WRAPPERS:
      return "wrapped"
    if target is not None and target.package == "managers":
      return "scale"
    if calls.is_keras_optimizer(self._resolve.paths(value.func)):
      return "keras"
    if calls.is_v1_optimizer(self._resolve.paths(value.func)):
      return "v1"
    return "other"

  def _blocks_around(self, node: cst.CSTNode) -> Set[int]:
    """Ids of the blocks that hold `node`, up to its function or module."""
    blocks = set()
    while not isinstance(node, (cst.Module, cst.FunctionDef)):
      node = self._resolve.parent(node)
      if isinstance(node, _BLOCKS):
        blocks.add(id(node))
    return blocks

  def library_call(self, original: cst.Call, updated: cst.Call,
                   target: names.Target) -> cst.Call:
    """Returns a call of this library's name for a legacy one (converted
    code), whole float step counts written as ints; reports what is still
    to do there: the findings a legacy call gets, not its notices."""
    updated = calls.fix_step_counts(
        updated, target, lambda reason: self._report(original, reason))
    if target.name in calls.WRAPPERS:
      self._check_wrapped(original, target, self._opt_is_keras(original))
    return updated

  def _opt_is_keras(self, call: cst.Call) -> bool:
    opt = calls.argument(call, 0, "opt")
    return opt is not None and self._is_keras(opt.value)

  def legacy_call(self, original: cst.Call, updated: cst.Call,
                  target: names.Target) -> cst.Call:
    """Returns the rewritten call of a legacy name; reports what it must."""
    updated = self.library_call(original, updated, target)
    # A Keras optimizer is wrapped by Keras's LossScaleOptimizer, as TF did.
    opt = calls.argument(original, 0, "opt")
    notice = None if self._opt_is_keras(original) else (
        calls.fixed_scale_notice(
            original, target, self._managers, self._is_scale_object,
            opt is not None and self._is_v1(opt.value)))
    if notice:
      self._report(original, notice, needs_human=False)
    position = self._resolve.position(original.func).end
    bracket = position.column + len(source_text(original.whitespace_after_func))
    statement = original
    while not isinstance(statement, (cst.SimpleStatementLine,
                                     cst.BaseCompoundStatement)):
      statement = self._resolve.parent(statement)
    indent = self._resolve.position(statement).start.column
    return layout.realign(original, updated, bracket, indent)

  def _is_scale_object(self, node: cst.BaseExpression) -> bool:
    """Whether `node` makes or names a legacy manager or loss scale."""
    if isinstance(node, cst.Call):
      return self._kind(node) == "scale"
    return isinstance(node, _NAMED) and self._bound(
        source_text(node), {"scale"}) is not None

  def _is_v1(self, opt: cst.BaseExpression) -> bool:
    """Whether `opt` makes, or names something bound only to, a v1 one."""
    if isinstance(opt, cst.Call):
      return self._kind(opt) == "v1"
    return isinstance(opt, _NAMED) and self._ever(source_text(opt), "v1") and (
        not self._ever(source_text(opt), "other"))

  def _is_keras(self, opt: cst.BaseExpression) -> bool:
    """Whether `opt` makes, or names something once bound to, a Keras one."""
    return self._kind(opt) == "keras" or (
        isinstance(opt, _NAMED) and self._ever(source_text(opt), "keras"))

  def _check_wrapped(self, call: cst.Call, target: names.Target,
                     keras: bool) -> None:
    """Reports an optimizer wrapped twice, or a Keras one with a scale object."""
    arg = calls.argument(call, 0, "opt")
    if arg is None:
      return
    opt, text = arg.value, source_text(arg.value)
    line = None
    if isinstance(opt, cst.Call) and self._kind(opt) == "wrapped":
      line = self._resolve.line(opt)
    elif isinstance(opt, _NAMED):
      line = self._bound(text, {"wrapped"}, self._blocks_around(call))
    if line is not None:
      self._report(call, f"`{text}` is already wrapped for loss scaling (line "
                   f"{line}) and is wrapped again here by `{target.name}`: "
                   "the replacement refuses to wrap twice (TensorFlow scaled "
                   "the loss twice); keep one wrapper")
      return
    scale = calls.argument(call, 1, "loss_scale")
    if (target.name == "enable_mixed_precision_graph_rewrite" and keras and
        scale is not None and self._is_scale_object(scale.value)):
      self._report(call, f"`{text}` is a Keras optimizer and "
                   f"`{source_text(scale.value)}` a loss-scale object: Keras's "
                   "LossScaleOptimizer takes \"dynamic\" or a number here; "
                   "use tf.keras.mixed_precision.LossScaleOptimizer(opt, "
                   "initial_scale=..., dynamic_growth_steps=...)")
    elif target.name == "enable_mixed_precision_graph_rewrite" and keras:
      self._report(call, calls.keras_rewrite_finding(text))
