"""The expression pass: legacy references rewritten where they are used.

A dotted legacy reference (`tf.train.experimental.DynamicLossScale`, under any
alias `resolve.Resolver` sees through) becomes `managers.X`/`mp_optimizer.X`,
and a contrib module used as a value becomes `mp_optimizer.contrib`. A bare
name bound by an import is left as it is: the import pass rewrites the import.
Where a reference cannot be converted safely (it reaches a Keras API, it is a
TensorFlow namespace used as a value, a `getattr` hides the name) it is left
as written and reported as a `Finding`; a converted name whose meaning shifts
(in a type check, as the base of a loss-scale subclass that does not
implement the manager's two methods) is reported too, and so is this
library's name for it in converted code, run again.
"""

from typing import Optional

import libcst as cst

from mp_optimizer.migrate import findings
from mp_optimizer.migrate import flow
from mp_optimizer.migrate import names
from mp_optimizer.migrate import passes
from mp_optimizer.migrate import resolve
from mp_optimizer.migrate import subclasses
from mp_optimizer.migrate.resolve import source_text

_TYPE_CHECKS = frozenset({"builtins.isinstance", "builtins.issubclass"})
_GETATTR = "builtins.getattr"
_TF_LOSS_SCALES = frozenset({"LossScale", "FixedLossScale", "DynamicLossScale"})
_MANAGER_METHODS = ("get_loss_scale", "update_loss_scale")
_BY_HAND = "use managers.*/mp_optimizer.* names directly"


class ExpressionPass(passes.ReportingPass, cst.CSTTransformer):
  """Rewrites dotted legacy references; reports those it leaves alone.

  It writes to its `passes.Conversion` the packages the rewritten code
  refers to (`needed`) and whether it converted one of TensorFlow's own
  names (`converted_tf_names`).

  Args:
    conversion: The module's conversion; its `refs` are the names the
      rewritten code reaches the `mp_optimizer` and `managers` packages by.
  """

  METADATA_DEPENDENCIES = resolve.METADATA_DEPENDENCIES

  def __init__(self, conversion: passes.Conversion):
    super().__init__(conversion)
    self._calls = flow.LegacyCalls(self._resolve, conversion.refs["managers"],
                                   self._report)

  def _ref(self, package: str, name: str, like=None) -> cst.Attribute:
    self.conversion.needed.add(package)
    new = cst.Attribute(cst.Name(self.conversion.refs[package]),
                        cst.Name(name))
    return new if like is None else new.with_changes(lpar=like.lpar,
                                                     rpar=like.rpar)

  def _context(self, node: cst.CSTNode) -> Optional[str]:
    """How `node` is used: "type check", "base", "keras" or None."""
    parent_of = self._resolve.parent
    parent = parent_of(node)
    if isinstance(parent, cst.Call) and parent.func is node:
      node, parent = parent, parent_of(parent)  # Judge `X(...)` as a whole.
    while isinstance(parent, (cst.Element, cst.Tuple, cst.List)):
      node, parent = parent, parent_of(parent)
    if isinstance(parent, cst.ExceptHandler):
      return "type check"
    owner = parent_of(parent) if isinstance(parent, cst.Arg) else None
    if isinstance(owner, cst.ClassDef):
      return "base" if parent in owner.bases else None
    if not isinstance(owner, cst.Call):
      return None
    func_names = {q.name for q in self._resolve.qualified_names(owner.func)}
    if func_names & _TYPE_CHECKS and owner.args.index(parent) == 1:
      return "type check"
    if any("keras" in n.split(".") for n in func_names):
      return "keras"
    return None

  def visit_Module(self, node: cst.Module) -> None:
    self._resolve.read_aliases(node)

  def visit_Import(self, node: cst.Import) -> bool:
    return False  # The import pass rewrites imports.

  def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
    return False

  def leave_Name(self, original, updated):
    return self._reference(original, updated)

  def leave_Attribute(self, original, updated):
    return self._reference(original, updated)

  def _reference(self, original, updated):
    if isinstance(self._resolve.parent(original), cst.AssignTarget):
      return updated
    path = self._resolve.legacy_path(original)
    if path is None:
      self._library_name(original)
      return updated
    target = names.LEGACY_NAMES.get(path)
    if target is not None:
      return self._legacy_name(original, updated, target)
    parent = self._resolve.parent(original)
    if (isinstance(parent, cst.Attribute) and parent.value is original) or (
        self._getattr_owner(original)):
      return updated  # The enclosing attribute, or leave_Call, decides.
    family = names.family_of_module(path)
    if family == names.CONTRIB:
      # A contrib module as a value is our contrib module, name for name. An
      # alias of one is rewritten by the import pass.
      return (self._ref("mp_optimizer", "contrib", like=original)
              if isinstance(original, cst.Attribute) else updated)
    if family == names.TF and self._is_alias_definition(original):
      return updated  # `mp = tf.compat.v1.mixed_precision`: uses resolve.
    if family == names.TF or names.is_contrib_parent(path):
      self._report(original, f"`{source_text(original)}` (`{path}`) is used "
                   "as a value: the codemod cannot tell which names are "
                   f"meant; {_BY_HAND}")
    elif names.is_unknown_contrib_member(path):
      self._report(original, findings.unknown_contrib_member(path))
    return updated

  def _legacy_name(self, original, updated, target: names.Target):
    context, label = self._context(original), f"`{source_text(original)}`"
    is_tf = target.family == names.TF
    if context == "keras":
      self._report(original, f"{label} is passed to a Keras API: the "
                   "replacement works with tf.compat.v1 optimizers only; use "
                   "tf.keras.mixed_precision here")
      return updated
    if is_tf:
      self._report_shifts(original, target, context)
    self.conversion.converted_tf_names |= is_tf
    self.conversion.converted_legacy_names = True
    if isinstance(original, cst.Name) or (
        isinstance(original.value, cst.Name) and
        self._resolve.legacy_path(original.value) in names.CONTRIB_MODULES):
      return updated  # Bound by an import: the import pass rewrites that.
    return self._ref(target.package, target.name, like=original)

  def _library_name(self, node: cst.CSTNode) -> None:
    """Converted code, run again: reports what the conversion of one of
    TensorFlow's names left to check, as the first run did."""
    parent = self._resolve.parent(node)
    if isinstance(parent, cst.Attribute) and parent.value is node:
      return  # The enclosing attribute decides.
    target = self._resolve.target(node)
    if target is not None and target.family == names.TF:
      self._report_shifts(node, target, self._context(node))

  def _report_shifts(self, node: cst.CSTNode, target: names.Target,
                     context: Optional[str]) -> None:
    """Reports one of TensorFlow's names whose meaning shifted here."""
    label = f"`{source_text(node)}`"
    ours = f"{target.package}.{target.name}"
    if context == "type check":
      means = "" if source_text(node) == ours else f" now means {ours}"
      self._report(node, f"{label} in a type check{means}: objects made by "
                   "TensorFlow itself (or by files not converted yet) fail it")
    elif context == "base" and target.name in _TF_LOSS_SCALES and not (
        subclasses.defines(self._resolve.parent(self._resolve.parent(node)),
                           _MANAGER_METHODS)):
      self._report(node, f"subclass of {label}: the optimizer calls "
                   "get_loss_scale() and update_loss_scale(finite), not "
                   "__call__() and update(grads); implement those two")

  def _is_alias_definition(self, node: cst.CSTNode) -> bool:
    assign = self._resolve.parent(node)
    return (isinstance(assign, cst.Assign) and assign.value is node and
            len(assign.targets) == 1 and
            self._resolve.is_alias(source_text(assign.targets[0].target)))

  def _getattr_owner(self, node: cst.CSTNode) -> bool:
    """True if `node` is the object argument of a builtin getattr call."""
    arg = self._resolve.parent(node)
    call = self._resolve.parent(arg) if isinstance(arg, cst.Arg) else None
    if not isinstance(call, cst.Call) or call.args[0] is not arg:
      return False
    return _GETATTR in {q.name
                        for q in self._resolve.qualified_names(call.func)}

  # Calls of legacy names and what flows into them --------------------------

  def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
    self._calls.enter_scope()

  def leave_FunctionDef(self, original, updated):
    self._calls.leave_scope()
    return updated

  def leave_Assign(self, original: cst.Assign, updated: cst.Assign):
    self._calls.bind(original)
    return updated

  def leave_Call(self, original: cst.Call, updated: cst.Call):
    target = names.LEGACY_NAMES.get(
        self._resolve.legacy_path(original.func) or "")
    if target is not None and self._context(original.func) != "keras":
      return self._calls.legacy_call(original, updated, target)
    library = self._resolve.target(original.func)
    if library is not None:  # Converted code: what is still to do there.
      return self._calls.library_call(original, updated, library)
    if len(original.args) < 2 or not self._getattr_owner(
        original.args[0].value):
      return updated
    owner, attribute = original.args[0].value, original.args[1].value
    path = (self._resolve.paths(owner) or [""])[0]
    if isinstance(attribute, cst.SimpleString):  # `getattr(tf.x, "Name")`
      full = f"{path}.{attribute.evaluated_value}"
      target = names.LEGACY_NAMES.get(full)
      if target is not None and len(original.args) == 2:
        self.conversion.converted_tf_names |= target.family == names.TF
        self.conversion.converted_legacy_names = True
        return self._ref(target.package, target.name)
      if full in names.CONTRIB_MODULES:
        return self._ref("mp_optimizer", "contrib")
      if names.family_of_module(full) or names.is_contrib_parent(full):
        self._report(original, f"getattr reaches `{full}` dynamically: "
                     "write the attribute out, then run again")
    elif names.family_of_module(path) == names.CONTRIB:
      if isinstance(owner, cst.Attribute):  # `getattr(tf.contrib.mp, name)`
        first = updated.args[0].with_changes(
            value=self._ref("mp_optimizer", "contrib"))
        return updated.with_changes(args=[first, *updated.args[1:]])
    elif names.family_of_module(path) or names.is_contrib_parent(path):
      self._report(original, f"dynamic getattr on `{path}`: the codemod "
                   f"cannot tell which name is meant; {_BY_HAND}")
    return updated
