"""The OpenSeq2Seq pass: its loss scaling, reported where a file chooses it.

It finds the places, reads what is written there (`literals`), and reports
each one with the manager that does the same (`reasons`; nothing is
rewritten: OpenSeq2Seq's scaler, optimizer wrapper and `optimize_loss` have
interfaces of their own):

* a call of `AutomaticLossScaler(algorithm, params)`, `BackoffScaler(params)`
  or `LogMaxScaler(params)`;
* `loss_scaling=` (with `loss_scaling_params=`) of `optimize_loss`, and
  `loss_scale=` of `MixedPrecisionOptimizerWrapper`; a scaler made in place,
  or bound to a name in the same function, is reported where it is made;
* a model config's `"loss_scaling"` entry (with the same dict's
  `"loss_scaling_params"`), in a dict display, `dict(loss_scaling=...)` or
  `params["loss_scaling"] = ...`, in a file that imports from open_seq2seq;
* any other use of the scaler classes (`AutomaticLossScaler.check_grads`,
  `isinstance(x, AutomaticLossScaler)`).

Values are read where they are literal: a string, a number (arithmetic on
numbers included: `2.**15`), a dict display of them. No loss scaling
(`loss_scaling` absent, None or 1) is left alone.
"""

from typing import List, Optional, Set

import libcst as cst

from mp_optimizer.migrate import passes
from mp_optimizer.migrate import resolve
from mp_optimizer.migrate.openseq2seq import api
from mp_optimizer.migrate.openseq2seq import equivalents
from mp_optimizer.migrate.openseq2seq import literals
from mp_optimizer.migrate.openseq2seq import reasons
from mp_optimizer.migrate.openseq2seq.literals import shown
from mp_optimizer.migrate.resolve import source_text

_DICT = "builtins.dict"
_SCALE_KEY, _PARAMS_KEY = "loss_scaling", "loss_scaling_params"


class OpenSeq2SeqPass(passes.ReportingPass, cst.CSTVisitor):
  """Collects a finding for each place that chooses OpenSeq2Seq's scaling.

  It visits only a file that may use OpenSeq2Seq (`api.mentions`): it looks
  at every name.
  """

  METADATA_DEPENDENCIES = resolve.METADATA_DEPENDENCIES

  def __init__(self, conversion: passes.Conversion):
    super().__init__(conversion)
    self._reported: Set[int] = set()  # Callees whose call was reported.
    # Per scope: its parameters, and the other names bound to a scaler there.
    self._parameters: List[Set[str]] = [set()]
    self._scalers: List[Set[str]] = [set()]
    self._configs: List[passes.Finding] = []  # Kept if open_seq2seq is.
    self._imports_package = False

  @classmethod
  def applies_to(cls, conversion: passes.Conversion) -> bool:
    return api.mentions(conversion.data)

  def _kind(self, node: cst.CSTNode) -> Optional[str]:
    for path in self._resolve.paths(node):
      found = api.kind(path)
      if found:
        return found
    return None

  # Module, imports, scopes ---------------------------------------------------

  def leave_Module(self, original_node: cst.Module) -> None:
    if self._imports_package:
      self.findings.extend(self._configs)

  def visit_Import(self, node: cst.Import) -> bool:
    self._imports_package |= any(source_text(a.name).split(".")[0] ==
                                 "open_seq2seq" for a in node.names)
    return False

  def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
    self._imports_package |= not node.relative and node.module is not None and (
        source_text(node.module).split(".")[0] == "open_seq2seq")
    return False

  def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
    self._scalers.append(set())
    self._parameters.append({p.name.value for p in (
        *node.params.posonly_params, *node.params.params,
        *node.params.kwonly_params)})

  def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
    self._scalers.pop()
    self._parameters.pop()

  # Calls and configs ---------------------------------------------------------

  def visit_Assign(self, node: cst.Assign) -> None:
    value = node.value
    if isinstance(value, cst.Call) and (
        self._kind(value.func) in api.SCALERS):
      self._scalers[-1].update(
          source_text(t.target) for t in node.targets
          if source_text(t.target) not in self._parameters[-1])
    for target in node.targets:
      subscript = target.target
      index = (subscript.slice[0].slice
               if isinstance(subscript, cst.Subscript) and
               len(subscript.slice) == 1 else None)
      if isinstance(index, cst.Index) and (
          literals.string(index.value) == _SCALE_KEY):
        # Its params may be set anywhere: not known here.
        self._config(node, f"{shown(subscript)} = {shown(value)}", value,
                     cst.Ellipsis())

  def visit_Dict(self, node: cst.Dict) -> None:
    entries = {literals.string(e.key): e for e in node.elements
               if isinstance(e, cst.DictElement)}
    if _SCALE_KEY in entries:
      entry, params = entries[_SCALE_KEY], entries.get(_PARAMS_KEY)
      if params is not None:
        params = params.value
      elif len(entries) < len(node.elements):
        params = cst.Ellipsis()  # `{**base, ...}`: maybe in `base`.
      self._config(entry, f"{shown(entry.key)}: {shown(entry.value)}",
                   entry.value, params)

  def visit_Call(self, node: cst.Call) -> None:
    kind = self._kind(node.func)
    if kind in api.SCALERS:
      self._reported.add(id(node.func))
      self._scaler_call(node, kind)
    elif kind in (api.OPTIMIZE_LOSS, api.WRAPPER):
      name = "loss_scaling" if kind == api.OPTIMIZE_LOSS else "loss_scale"
      scale = self._keyword(node, name)
      if scale is None:
        starred = next((a for a in node.args if a.star), None)
        if starred is None:
          return  # No loss scaling.
        scale = starred.value
      label = f"`{shown(node.func)}(..., {name}={shown(scale)})`"
      self._chosen(node, label, scale, self._keyword(node, _PARAMS_KEY),
                   mixed_only=kind == api.OPTIMIZE_LOSS)
    elif self._is_dict(node.func):
      scale, params = (self._keyword(node, _SCALE_KEY),
                       self._keyword(node, _PARAMS_KEY))
      if scale is not None and params is None and any(
          a.keyword is None for a in node.args):
        params = cst.Ellipsis()  # `dict(base, ...)`: maybe in `base`.
      if scale is not None:
        self._config(node, f"{_SCALE_KEY}={shown(scale)}", scale, params)

  @staticmethod
  def _keyword(call: cst.Call, name: str) -> Optional[cst.BaseExpression]:
    return next((a.value for a in call.args
                 if a.keyword is not None and a.keyword.value == name), None)

  def _config(self, node: cst.CSTNode, shown: str, scale: cst.BaseExpression,
              params: Optional[cst.BaseExpression]) -> None:
    label = f"`{shown}` (an OpenSeq2Seq model config)"
    self._chosen(node, label, scale, params, mixed_only=True,
                 into=self._configs)

  def _scaler_call(self, node: cst.Call, kind: str) -> None:
    label = f"`{shown(node.func)}(...)`"
    algorithm = api.SCALERS[kind]
    params = self._keyword(node, "params")
    if params is None:
      params = next((a.value for a in node.args[0 if algorithm else 1:][:1]
                     if a.keyword is None and not a.star), None)
    if any(a.star for a in node.args):
      self._report(node, reasons.not_literal_reason(label, shown(node),
                                                    False))
      return
    if algorithm is None:
      given = self._keyword(node, "algorithm")
      if given is None:
        given = next((a.value for a in node.args[:1] if a.keyword is None),
                     None)
      text = literals.string(given) if given is not None else "Backoff"
      if text is None:
        self._report(node, reasons.not_literal_reason(label, shown(given),
                                                      False))
        return
      algorithm = text.lower().strip()
      if algorithm not in api.ALGORITHMS:
        self._report(node, reasons.unknown_algorithm_reason(label,
                                                            shown(given)))
        return
    self._report(node, reasons.algorithm_reason(label, algorithm,
                                                self._params(params)))

  def _chosen(self, node: cst.CSTNode, label: str, scale: cst.BaseExpression,
              params: Optional[cst.BaseExpression], mixed_only: bool,
              into: Optional[List[passes.Finding]] = None) -> None:
    """Reports a `loss_scaling`/`loss_scale` value (with its params), into
    `into` if given (else `findings`)."""
    text, value = literals.string(scale), literals.number(scale)
    if text is not None:
      algorithm = text.lower().strip()
      reason = (reasons.algorithm_reason(label, algorithm,
                                         self._params(params), mixed_only)
                if algorithm in api.ALGORITHMS else
                reasons.unknown_algorithm_reason(label, shown(scale)))
    elif value is not None:
      if value == 1:
        return  # A scale of 1: no loss scaling.
      reason = reasons.fixed_reason(label, shown(scale), mixed_only)
    elif (isinstance(scale, cst.Name) and scale.value == "None") or (
        isinstance(scale, cst.Call) and self._kind(scale.func) in
        api.SCALERS) or source_text(scale) in self._scalers[-1]:
      return  # No scaling, or a scaler reported where it is made.
    else:
      reason = reasons.not_literal_reason(label, shown(scale), True,
                                          mixed_only)
    (self.findings if into is None else into).append(
        self._finding(node, reason))

  def _params(self, node: Optional[cst.BaseExpression]
              ) -> equivalents.Params:
    return literals.params(node, self._is_dict)

  def _is_dict(self, func: cst.BaseExpression) -> bool:
    return _DICT in {q.name for q in self._resolve.qualified_names(func)}

  # Other uses of the scaler classes -----------------------------------------

  def leave_Name(self, original_node: cst.Name) -> None:
    self._reference(original_node)

  def leave_Attribute(self, original_node: cst.Attribute) -> None:
    self._reference(original_node)

  def _reference(self, node: cst.BaseExpression) -> None:
    parent = self._resolve.parent(node)
    if id(node) in self._reported or (
        isinstance(parent, cst.Attribute) and parent.value is node):
      return  # A reported call, or part of a longer name.
    for path in self._resolve.paths(node):
      owner = path.rpartition(".")[0]
      if api.kind(path) in api.SCALERS or (
          api.kind(owner) in api.SCALERS):
        self._report(node, reasons.member_reason(shown(node)))
        return
