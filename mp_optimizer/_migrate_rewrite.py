"""The name pass of `mp_optimizer.migrate`: legacy references in expressions.

Every `Name`/`Attribute` is resolved with libcst's `QualifiedNameProvider`, so
`tf.train.experimental.DynamicLossScale` is recognised under any import alias
of `tensorflow` (and under a module-level `v1 = tf.compat.v1`), while a local
variable that happens to be called `tf` is not. A dotted legacy reference
becomes `managers.X` / `mp_optimizer.X`; a bare name bound by an import is
left to the import pass. What cannot be converted safely becomes a `Finding`.
"""

from typing import Callable, Dict, List, Optional, Set

import libcst as cst
from libcst import helpers
from libcst import metadata

from mp_optimizer import _migrate_names as names
from mp_optimizer._migrate_names import Finding, code

_IMPORT = metadata.QualifiedNameSource.IMPORT
_VARIABLE_ONLY = frozenset({"assign", "assign_add", "assign_sub", "load",
                            "initializer"})
_TYPE_CHECKS = frozenset({"builtins.isinstance", "builtins.issubclass"})
_GETATTR = "builtins.getattr"
_TF_LOSS_SCALES = frozenset({"LossScale", "FixedLossScale", "DynamicLossScale"})
_BY_HAND = "use managers.*/mp_optimizer.* names directly"


class NamePass(cst.CSTTransformer):
  """Rewrites dotted legacy references and collects findings.

  Args:
    refs: The names this file reaches the `mp_optimizer` and `managers`
      packages by (the package names, unless those are taken).
  """

  METADATA_DEPENDENCIES = (metadata.QualifiedNameProvider,
                           metadata.ParentNodeProvider,
                           metadata.PositionProvider)

  def __init__(self, refs: Dict[str, str]):
    super().__init__()
    self.refs = refs
    self.findings: List[Finding] = []
    self.needed: Set[str] = set()  # Packages the new code refers to.
    self._aliases: Dict[str, str] = {}  # `v1` -> "tensorflow.compat.v1".
    self._legacy_objects: Set[str] = set()  # `opt`, `self.opt`: legacy values.
    self._classes: List[bool] = []  # Does each enclosing class extend one?
    self._private: List[Finding] = []  # Reported only if the file is legacy.
    self._saw_legacy = self._converted_tf = False
    self._keras_line: Optional[int] = None

  # Metadata lookups --------------------------------------------------------

  def _report(self, node: cst.CSTNode, reason: str, to=None) -> None:
    line = self.get_metadata(metadata.PositionProvider, node).start.line
    (self.findings if to is None else to).append(Finding(line, reason))

  def _names(self, node: cst.CSTNode) -> Set[metadata.QualifiedName]:
    return self.get_metadata(metadata.QualifiedNameProvider, node, set())

  def _parent(self, node: cst.CSTNode) -> cst.CSTNode:
    return self.get_metadata(metadata.ParentNodeProvider, node)

  def _paths(self, node: cst.CSTNode) -> List[str]:
    """The imported dotted paths `node` may refer to."""
    paths = sorted(q.name for q in self._names(node) if q.source == _IMPORT)
    return paths or self._through_alias(node)

  def _qualified(self, node: cst.CSTNode) -> Optional[str]:
    """The legacy path `node` refers to, if it refers to one."""
    paths = self._paths(node)
    for test in (names.LEGACY_NAMES.__contains__, names.family_of_module,
                 names.is_contrib_path):
      for path in paths:
        if test(path):
          return path
    return None

  def _through_alias(self, node: cst.CSTNode) -> List[str]:
    """Resolves `v1.x.y` in a module that did `v1 = tf.compat.v1` once."""
    head = node
    while isinstance(head, cst.Attribute):
      head = head.value
    if not isinstance(head, cst.Name) or head.value not in self._aliases:
      return []
    if {q.name for q in self._names(head)} != {head.value}:
      return []  # Shadowed, or not the module-level name.
    dotted = helpers.get_full_name_for_node(node) or ""
    return [self._aliases[head.value] + dotted[len(head.value):]]

  def _ref(self, package: str, name: str, like=None) -> cst.Attribute:
    self.needed.add(package)
    new = cst.Attribute(cst.Name(self.refs[package]), cst.Name(name))
    return new if like is None else new.with_changes(lpar=like.lpar,
                                                     rpar=like.rpar)

  def _context(self, node: cst.CSTNode) -> Optional[str]:
    """How `node` is used: "type check", "base", "keras" or None."""
    parent = self._parent(node)
    if isinstance(parent, cst.Call) and parent.func is node:
      node, parent = parent, self._parent(parent)  # Judge `X(...)` as a whole.
    while isinstance(parent, (cst.Element, cst.Tuple, cst.List)):
      node, parent = parent, self._parent(parent)
    if isinstance(parent, cst.ExceptHandler):
      return "type check"
    owner = self._parent(parent) if isinstance(parent, cst.Arg) else None
    if isinstance(owner, cst.ClassDef):
      return "base" if parent in owner.bases else None
    if not isinstance(owner, cst.Call):
      return None
    func_names = {q.name for q in self._names(owner.func)}
    if func_names & _TYPE_CHECKS and owner.args.index(parent) == 1:
      return "type check"
    if any("keras" in n.split(".") for n in func_names):
      return "keras"
    return None

  # Module, imports, classes ------------------------------------------------

  def visit_Module(self, node: cst.Module) -> None:
    aliases = _Aliases(self._names)
    node.visit(aliases)
    self._aliases = aliases.paths()

  def leave_Module(self, original, updated):
    if self._saw_legacy:
      self.findings.extend(self._private)
    if self._converted_tf and self._keras_line is not None:
      self.findings.append(Finding(self._keras_line, (
          "this file also uses Keras mixed precision: the loss scales "
          "converted here work with tf.compat.v1 optimizers only; check that "
          "none of them reaches a Keras optimizer")))
    return updated

  def visit_Import(self, node: cst.Import) -> bool:
    for alias in node.names:
      if names.is_member_of_contrib(code(alias.name)):
        self._report(node, f"`{code(alias.name)}` is not part of "
                     "tf.contrib.mixed_precision: no replacement")
    return False  # The import pass rewrites imports.

  def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
    if node.relative or node.module is None:
      return False
    module = code(node.module)
    if isinstance(node.names, cst.ImportStar):
      if names.family_of_module(module) == names.TF or (
          module in names.PARENT_MODULES):
        self._report(node, f"star import from `{module}` hides which "
                     "mixed-precision names this file uses: import them by "
                     "name, then run again")
      return False
    for alias in node.names:
      full = f"{module}.{code(alias.name)}"
      if names.is_member_of_contrib(full):
        self._report(node, f"`{full}` is not part of "
                     "tf.contrib.mixed_precision: no replacement")
    return False

  def visit_ClassDef(self, node: cst.ClassDef) -> None:
    self._classes.append(any(self._qualified(b.value) for b in node.bases))

  def leave_ClassDef(self, original, updated):
    self._classes.pop()
    return updated

  def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
    if self._classes and self._classes[-1] and (
        node.name.value in names.LEGACY_PRIVATE):
      self._report(node, f"`{node.name.value}` overrides a private method of "
                   "the legacy class; the replacement never calls it")

  def visit_Assign(self, node: cst.Assign) -> None:
    if isinstance(node.value, cst.Call) and (
        self._qualified(node.value.func) in names.LEGACY_NAMES):
      self._legacy_objects.update(code(t.target) for t in node.targets)

  # References ----------------------------------------------------------------

  def leave_Name(self, original, updated):
    return self._reference(original, updated)

  def leave_Attribute(self, original, updated):
    return self._reference(original, updated)

  def _reference(self, original, updated):
    if isinstance(self._parent(original), cst.AssignTarget):
      return updated
    path = self._qualified(original)
    if path is None:
      self._check_other(original)
      return updated
    self._saw_legacy = True
    target = names.LEGACY_NAMES.get(path)
    if target is not None:
      return self._legacy_name(original, updated, target)
    parent = self._parent(original)
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
      self._report(original, f"`{code(original)}` (`{path}`) is used as a "
                   f"value: the codemod cannot tell which names are meant; "
                   f"{_BY_HAND}")
    elif names.is_member_of_contrib(path):
      self._report(original, f"`{path}` is not part of "
                   "tf.contrib.mixed_precision: no replacement")
    return updated

  def _legacy_name(self, original, updated, target: names.Target):
    context, label = self._context(original), f"`{code(original)}`"
    is_tf = target.family == names.TF
    if context == "keras":
      self._report(original, f"{label} is passed to a Keras API: the "
                   "replacement works with tf.compat.v1 optimizers only; use "
                   "tf.keras.mixed_precision here")
      return updated
    call = self._parent(original)
    if target.name == "enable_mixed_precision_graph_rewrite" and isinstance(
        call, cst.Call) and call.func is original and "keras" in code(
            names.argument(call, 0, "opt") or cst.Name("_")):
      self._report(original, f"{label} wraps a Keras optimizer: the "
                   "replacement takes tf.compat.v1 optimizers only; use "
                   "tf.keras.mixed_precision.LossScaleOptimizer")
      return updated
    if is_tf and context == "type check":
      self._report(original, f"{label} in a type check now means "
                   f"{target.package}.{target.name}: objects made by "
                   "TensorFlow itself (or by files not converted yet) fail it")
    if is_tf and context == "base" and target.name in _TF_LOSS_SCALES:
      self._report(original, f"subclass of {label}: the optimizer calls "
                   "get_loss_scale() and update_loss_scale(finite), not "
                   "__call__() and update(grads); implement those two")
    self._converted_tf |= is_tf
    if isinstance(original, cst.Name) or (
        isinstance(original.value, cst.Name) and
        self._qualified(original.value) in names.CONTRIB_MODULES):
      return updated  # Bound by an import: the import pass rewrites that.
    return self._ref(target.package, target.name, like=original)

  def _is_alias_definition(self, node: cst.CSTNode) -> bool:
    assign = self._parent(node)
    return (isinstance(assign, cst.Assign) and assign.value is node and
            len(assign.targets) == 1 and
            code(assign.targets[0].target) in self._aliases)

  def _getattr_owner(self, node: cst.CSTNode) -> bool:
    """True if `node` is the object argument of a builtin getattr call."""
    arg = self._parent(node)
    call = self._parent(arg) if isinstance(arg, cst.Arg) else None
    return (isinstance(call, cst.Call) and call.args[0] is arg and
            _GETATTR in {q.name for q in self._names(call.func)})

  def leave_Call(self, original: cst.Call, updated: cst.Call):
    if len(original.args) < 2 or not self._getattr_owner(
        original.args[0].value):
      return updated
    owner, attribute = original.args[0].value, original.args[1].value
    path = (self._paths(owner) or [""])[0]
    if isinstance(attribute, cst.SimpleString):  # `getattr(tf.x, "Name")`
      full = f"{path}.{attribute.evaluated_value}"
      target = names.LEGACY_NAMES.get(full)
      if target is not None and len(original.args) == 2:
        self._converted_tf |= target.family == names.TF
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

  def _check_other(self, node) -> None:
    """Private members of legacy objects, variable-only uses, Keras."""
    if self._keras_line is None and any(
        "keras.mixed_precision" in q.name for q in self._names(node)):
      self._keras_line = self.get_metadata(metadata.PositionProvider,
                                           node).start.line
    if not isinstance(node, cst.Attribute):
      return
    attr, receiver = node.attr.value, code(node.value)
    value = node.value
    if attr in _VARIABLE_ONLY and isinstance(value, cst.Call) and isinstance(
        value.func, cst.Attribute) and value.func.attr.value == "get_loss_scale":
      self._report(node, "contrib's get_loss_scale() returned the scale "
                   "variable, the replacement returns its value: take the "
                   "variable from the manager's variables()", to=self._private)
    elif attr.startswith("_") and not attr.startswith("__") and (
        attr in names.DISTINCTIVE_PRIVATE or receiver in self._legacy_objects
        or (receiver == "self" and self._classes and self._classes[-1]
            and attr in names.LEGACY_PRIVATE)):
      hint = names.PRIVATE_HINTS.get(attr)
      self._report(node, f"`{receiver}.{attr}` is private to the legacy class "
                   "and the replacement has no such attribute" +
                   (f"; use {hint}" if hint else ""), to=self._private)

  def leave_SimpleString(self, original, updated):
    value = original.evaluated_value
    if isinstance(value, str) and (names.family_of_module(value) or
                                   value in names.LEGACY_NAMES):
      self._report(original, f"the string '{value}' names a legacy module "
                   "(a dynamic import?): replace it by hand")
    return updated


class _Aliases(cst.CSTVisitor):
  """Module-level names bound once to a TensorFlow module: `v1 = tf.compat.v1`."""

  def __init__(self, qualified_names: Callable[[cst.CSTNode], Set]):
    super().__init__()
    self._qualified_names = qualified_names
    self._found: Dict[str, List[Optional[str]]] = {}

  def visit_FunctionDef(self, node) -> bool:
    return False

  def visit_ClassDef(self, node) -> bool:
    return False

  def visit_Assign(self, node: cst.Assign) -> None:
    found = set()
    if isinstance(node.value, (cst.Name, cst.Attribute)):
      found = self._qualified_names(node.value)
    tf_paths = [q.name for q in found if q.source == _IMPORT and
                q.name.split(".")[0] == "tensorflow"]
    path = tf_paths[0] if len(tf_paths) == 1 and len(node.targets) == 1 else None
    for target in node.targets:
      if isinstance(target.target, cst.Name):
        self._found.setdefault(target.target.value, []).append(path)

  def paths(self) -> Dict[str, str]:
    return {name: paths[0] for name, paths in self._found.items()
            if len(paths) == 1 and paths[0] is not None}
