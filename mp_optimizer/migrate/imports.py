"""The import pass: imports of legacy modules and names, rewritten in place.

It runs after the expression pass, on the module that pass returned;
`new_imports` then adds the imports the rewritten code needs.
"""

from typing import AbstractSet, Set

import libcst as cst

from mp_optimizer.migrate import names
from mp_optimizer.migrate.resolve import source_text


def rewrite_imports(module: cst.Module,
                    used_elsewhere: AbstractSet[str] = frozenset()
                    ) -> cst.Module:
  """Rewrites `module`'s imports of the legacy API.

  Args:
    module: A module whose other references the expression pass has already
      rewritten, so that an import of a legacy module can be dropped when
      nothing uses the name it binds any more.
    used_elsewhere: Names the file's code left out of `module` may use
      (`chunks.Reduced.names_left_out`).

  Returns:
    The module with its imports rewritten.
  """
  collector = _NameCollector()
  module.visit(collector)
  return module.visit(_ImportPass(collector.found | used_elsewhere))


class _NameCollector(cst.CSTVisitor):
  """Every name the code (not its imports) still refers to."""

  def __init__(self):
    super().__init__()
    self.found: Set[str] = set()

  def visit_Import(self, node) -> bool:
    return False

  def visit_ImportFrom(self, node) -> bool:
    return False

  def visit_Name(self, node: cst.Name) -> None:
    self.found.add(node.value)


def _dotted(dotted: str) -> cst.BaseExpression:
  return cst.parse_expression(dotted)


class _ImportPass(cst.CSTTransformer):
  """Rewrites the imports of legacy modules and names; drops dead ones.

  `from tensorflow.contrib.mixed_precision import X` becomes `from
  mp_optimizer.managers import X` (or `from mp_optimizer import X`); a contrib module imported under
  a name becomes `from mp_optimizer import contrib as name`; a plain
  `import tensorflow.contrib.mixed_precision` becomes `import tensorflow` if
  the file still uses `tensorflow`, else goes; an import of a TensorFlow
  mixed-precision module whose name is no longer used is removed.
  """

  def __init__(self, used: Set[str]):
    super().__init__()
    self._used = used

  def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
    # Only the statements themselves change: expressions are not entered.
    return False

  def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> bool:
    return False

  def leave_SimpleStatementLine(self, original, updated):
    body, changed = self._rewrite_body(updated.body)
    if not changed:
      return updated
    if not body:
      return cst.RemoveFromParent()
    if len(updated.body) == 1:  # One statement per line, as it was.
      body = [s.with_changes(semicolon=cst.MaybeSentinel.DEFAULT) for s in body]
      first = updated.with_changes(body=[body[0]])
      return cst.FlattenSentinel(
          [first] + [cst.SimpleStatementLine(body=[s]) for s in body[1:]])
    return updated.with_changes(body=body)

  def leave_SimpleStatementSuite(self, original, updated):
    body, changed = self._rewrite_body(updated.body)
    if not changed:
      return updated
    return updated.with_changes(body=body or [cst.Pass()])

  def _rewrite_body(self, body):
    out, changed = [], False
    for statement in body:
      if isinstance(statement, cst.Import):
        new = self._import(statement)
      elif isinstance(statement, cst.ImportFrom):
        new = self._import_from(statement)
      else:
        new = None
      changed |= new is not None
      out.extend([statement] if new is None else new)
    semicolon = cst.Semicolon(whitespace_after=cst.SimpleWhitespace(" "))
    out = [s.with_changes(semicolon=semicolon) for s in out[:-1]] + [
        s.with_changes(semicolon=cst.MaybeSentinel.DEFAULT) for s in out[-1:]]
    return out, changed

  def _import(self, node: cst.Import):
    """Returns the replacement statements, or None to keep `node`."""
    kept, extra = [], []
    for alias in node.names:
      dotted = source_text(alias.name)
      bound = alias.asname.name.value if alias.asname else None
      if bound is None and names.is_contrib_path(dotted):
        package = dotted.split(".")[0]
        if package in self._used:  # `import a.b.c` also binds `a`.
          kept.append(alias.with_changes(name=cst.Name(package)))
      elif bound and dotted in names.CONTRIB_MODULES:
        extra.append(_from_import("mp_optimizer", [cst.ImportAlias(
            cst.Name("contrib"), asname=cst.AsName(cst.Name(bound)))]))
      elif bound and names.family_of_module(dotted) and bound not in self._used:
        continue  # A TensorFlow module nothing uses any more: dropped.
      else:
        kept.append(alias)
    if kept == list(node.names):
      return None
    head = [node.with_changes(names=_fix_commas(kept, node))] if kept else []
    return head + extra

  def _import_from(self, node: cst.ImportFrom):
    """Returns the replacement statements, or None to keep `node`."""
    if node.relative or node.module is None:
      return None
    module = source_text(node.module)
    if isinstance(node.names, cst.ImportStar):
      if module in names.CONTRIB_MODULES:
        return [node.with_changes(module=_dotted("mp_optimizer.contrib"))]
      return None
    groups = {}  # Destination module -> aliases, in order of appearance.
    dropped = False
    for alias in node.names:
      name = source_text(alias.name)
      full = f"{module}.{name}"
      bound = alias.asname.name.value if alias.asname else name
      target = names.LEGACY_NAMES.get(full)
      if target is not None:
        asname = (alias.asname if target.name == name else
                  cst.AsName(cst.Name(bound)))
        groups.setdefault(target.package, []).append(alias.with_changes(
            name=cst.Name(target.name), asname=asname))
      elif full in names.CONTRIB_MODULES:
        groups.setdefault("mp_optimizer", []).append(alias.with_changes(
            name=cst.Name("contrib"), asname=cst.AsName(cst.Name(bound))))
      elif names.family_of_module(full) and bound not in self._used:
        dropped = True  # A TensorFlow module nothing uses any more.
      else:
        groups.setdefault(module, []).append(alias)
    if list(groups) == [module] and not dropped:
      return None
    return [node.with_changes(module=_dotted(names.MODULES.get(destination,
                                                               destination)),
                              names=_fix_commas(aliases, node))
            for destination, aliases in groups.items()]


def _from_import(module: str, aliases) -> cst.ImportFrom:
  return cst.ImportFrom(module=_dotted(module), names=aliases)


def _fix_commas(aliases, original):
  """Gives the last alias the original last alias's comma (trailing or none)."""
  aliases = list(aliases)
  if aliases:
    aliases[-1] = aliases[-1].with_changes(comma=original.names[-1].comma)
  return aliases
