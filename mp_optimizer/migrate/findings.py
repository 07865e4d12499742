"""The findings pass: what is left for a human that no rewrite reports.

The expression pass reports what it sees while it decides how to rewrite a
legacy reference (a Keras API, a type check, a base class, a namespace used as
a value, a dynamic `getattr`). The rest is reported here: imports of names
contrib never had, star imports that hide which names a file uses, private
members of the legacy classes, strings that name a legacy module, and Keras
mixed precision in a file whose TensorFlow loss scales were converted (or,
run again, that uses this library's names for them).

Not reported: contrib's scale variable used as a variable
(`tf.assign(manager.get_loss_scale(), v)`, `.assign`, `.load`), since the
replacement's `get_loss_scale()` returns its scale variable as contrib's
did; and the private members the replacement keeps with the same meaning
(`names.KEPT_PRIVATE`, such as the optimizer's `_opt`).
"""

from typing import Dict, List, Optional

import libcst as cst

from mp_optimizer.migrate import names
from mp_optimizer.migrate import passes
from mp_optimizer.migrate import resolve
from mp_optimizer.migrate import subclasses
from mp_optimizer.migrate.resolve import source_text


def unknown_contrib_member(path: str) -> str:
  """Returns the reason to report `path`, a name contrib's modules never had."""
  return f"`{path}` is not part of tf.contrib.mixed_precision: no replacement"


class FindingsPass(passes.ReportingPass, cst.CSTVisitor):
  """Collects the findings the expression pass does not make.

  Findings about private members and contrib's scale variable count only in a
  file that refers to the legacy API somewhere; elsewhere `self._opt` is just
  somebody's attribute. Keras mixed precision is reported if the expression
  pass converted one of TensorFlow's own names
  (`Conversion.converted_tf_names`), or this file uses this library's name
  for one.
  """

  METADATA_DEPENDENCIES = resolve.METADATA_DEPENDENCIES

  def __init__(self, conversion: passes.Conversion):
    super().__init__(conversion)
    self._library_tf_names = False  # This library's name for a TF one.
    # `opt`, `self.opt`: legacy values -> the legacy class they were made by.
    self._legacy_objects: Dict[str, str] = {}
    # Each enclosing class, if it extends a legacy class (or such a class
    # of this file: `_subclassed`, name -> the legacy class).
    self._classes: List[Optional[subclasses.Subclass]] = []
    self._subclassed: Dict[str, str] = {}
    # Findings that count only if the file refers to the legacy API.
    self._if_legacy: List[passes.Finding] = []
    self._saw_legacy = False
    self._keras_line: Optional[int] = None

  # Module, imports, classes --------------------------------------------------

  def visit_Module(self, node: cst.Module) -> None:
    self._resolve.read_aliases(node)

  def leave_Module(self, original_node: cst.Module) -> None:
    if self._saw_legacy:
      self.findings.extend(self._if_legacy)
    converted = (self.conversion.converted_tf_names or
                 self._library_tf_names)
    if converted and self._keras_line is not None:
      self.findings.append(passes.Finding(self._keras_line, (
          "this file also uses Keras mixed precision: the loss scales "
          "converted here work with tf.compat.v1 optimizers only; check that "
          "none of them reaches a Keras optimizer")))

  def visit_Import(self, node: cst.Import) -> bool:
    for alias in node.names:
      self._check_contrib_member(node, source_text(alias.name))
    return False  # Names in imports are the import pass's business.

  def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
    if node.relative or node.module is None:
      return False
    module = source_text(node.module)
    if isinstance(node.names, cst.ImportStar):
      if names.family_of_module(module) == names.TF or (
          module in names.PARENT_MODULES):
        self._report(node, f"star import from `{module}` hides which "
                     "mixed-precision names this file uses: import them by "
                     "name, then run again")
      return False
    for alias in node.names:
      self._check_contrib_member(node, f"{module}.{source_text(alias.name)}")
    return False

  def _check_contrib_member(self, node: cst.CSTNode, path: str) -> None:
    if names.is_unknown_contrib_member(path):
      self._report(node, unknown_contrib_member(path))

  def visit_ClassDef(self, node: cst.ClassDef) -> None:
    found = None
    for base in node.bases:
      target = self._resolve.target(base.value)
      legacy = (target.name if target else
                self._subclassed.get(source_text(base.value)))
      if legacy is None and self._resolve.legacy_path(base.value):
        legacy = source_text(base.value)
      if legacy is not None:
        found = subclasses.Subclass(node.name.value, legacy,
                                    self._resolve.line(node))
        self._subclassed[node.name.value] = legacy
    self._classes.append(found)

  def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
    found = self._classes.pop()
    if found is not None and found.reason():
      self.findings.append(passes.Finding(found.line, found.reason()))

  def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
    if self._classes and self._classes[-1] and (
        node.name.value in names.LEGACY_PRIVATE):
      self._report(node, f"`{node.name.value}` overrides a private method of "
                   "the legacy class; the replacement never calls it")

  def visit_Assign(self, node: cst.Assign) -> None:
    target = isinstance(node.value, cst.Call) and self._resolve.target(
        node.value.func)
    if target:
      self._legacy_objects.update(
          (source_text(t.target), target.name) for t in node.targets)

  # References ----------------------------------------------------------------

  def leave_Name(self, original_node: cst.Name) -> None:
    self._reference(original_node)

  def leave_Attribute(self, original_node: cst.Attribute) -> None:
    self._reference(original_node)

  def _reference(self, node: cst.BaseExpression) -> None:
    if self._assigned(node):
      if self._classes and self._classes[-1] and isinstance(
          node, cst.Attribute) and source_text(node.value) == "self":
        self._classes[-1].record(node.attr.value, assigned=True)
      return
    legacy, target = self._resolve.legacy_path(node), self._resolve.target(node)
    if legacy or target:
      self._saw_legacy = True
      # This library's name for one of TensorFlow's: converted code, run again.
      self._library_tf_names |= legacy is None and target.family == names.TF
      return
    self._check_other(node)

  def _check_other(self, node: cst.BaseExpression) -> None:
    """Private members of legacy objects, variable-only uses, Keras."""
    if self._keras_line is None and any(
        "keras.mixed_precision" in q.name
        for q in self._resolve.qualified_names(node)):
      self._keras_line = self._resolve.line(node)
    if not isinstance(node, cst.Attribute):
      return
    attr, receiver = node.attr.value, source_text(node.value)
    if receiver == "self" and self._classes and self._classes[-1] and (
        self._classes[-1].record(attr, assigned=False)):
      return  # Reported with its class.
    made_by = self._legacy_objects.get(receiver)
    if attr.startswith("_") and not attr.startswith("__") and (
        attr in names.DISTINCTIVE_PRIVATE or made_by is not None
        or (receiver == "self" and self._classes and self._classes[-1]
            and attr in names.LEGACY_PRIVATE)) and (
                made_by not in names.KEPT_PRIVATE.get(attr, ())):
      hint = names.PRIVATE_HINTS.get(attr)
      self._if_legacy.append(self._finding(
          node, f"`{receiver}.{attr}` is private to the legacy class and the "
          "replacement has no such attribute" +
          (f"; use {hint}" if hint else "")))

  def _assigned(self, node: cst.BaseExpression) -> bool:
    """Whether `node` is (part of) the target of an assignment."""
    parent = self._resolve.parent(node)
    while isinstance(parent, (cst.Element, cst.Tuple, cst.List,
                              cst.StarredElement)):
      node, parent = parent, self._resolve.parent(parent)
    return isinstance(parent, cst.AssignTarget) or (
        isinstance(parent, (cst.AugAssign, cst.AnnAssign)) and
        parent.target is node)

  def leave_SimpleString(self, original_node: cst.SimpleString) -> None:
    value = original_node.evaluated_value
    if isinstance(value, str) and (names.family_of_module(value) or
                                   value in names.LEGACY_NAMES):
      self._report(original_node, f"the string '{value}' names a legacy "
                   "module (a dynamic import?): replace it by hand")
