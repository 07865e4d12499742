"""The imports the rewritten code needs, added where the README says.

`from mp_optimizer import managers` / `import mp_optimizer` go right after
the module's last top-level import, as their own lines, with no blank line
added.
"""

from typing import Dict, Iterable, Set

import libcst as cst

from mp_optimizer.migrate.resolve import PACKAGES
from mp_optimizer.migrate.resolve import source_text


def add(module: cst.Module, packages: Iterable[str],
                refs: Dict[str, str]) -> cst.Module:
  """Adds `import package` (as `refs[package]`) for each of `packages`.

  The new lines go right after the module's last top-level import, with no
  blank line added: a statement that must run before other imports (`os.
  environ[...] = ...` ahead of `import tensorflow`) stays ahead of them. If a
  top-level statement before that import already uses a package (code that
  runs at import time), they go after the last import before that statement.
  A package the module already imports under that name is not added again.

  Args:
    module: The module to add imports to.
    packages: "mp_optimizer" and/or "managers" (`mp_optimizer.managers`).
    refs: The name each package is reached by in the rewritten code.

  Returns:
    The module with the imports added.
  """
  body = list(module.body)
  wanted = {refs[p]: p for p in packages}
  new = [_import_line(package, ref) for ref, package in sorted(
      wanted.items(), key=lambda item: item[1])
         if ref not in _imported_packages(body)]
  if not new:
    return module
  position = 0
  for index, statement in enumerate(body):
    if _is_import(statement):
      position = index + 1
    elif _uses(statement, set(wanted)):
      break
  if position == 0 and body and _is_docstring(body[0]):
    position = 1
  return module.with_changes(body=body[:position] + new + body[position:])


def _import_line(package: str, ref: str) -> cst.SimpleStatementLine:
  asname = None if ref == package else cst.AsName(cst.Name(ref))
  alias = cst.ImportAlias(cst.Name(package), asname=asname)
  if package == "managers":  # The library's one spelling for its managers.
    return cst.SimpleStatementLine(
        [cst.ImportFrom(module=cst.Name("mp_optimizer"), names=[alias])])
  return cst.SimpleStatementLine([cst.Import([alias])])


def _is_import(statement: cst.CSTNode) -> bool:
  return isinstance(statement, cst.SimpleStatementLine) and all(
      isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body)


def _is_docstring(statement: cst.CSTNode) -> bool:
  return (isinstance(statement, cst.SimpleStatementLine) and
          isinstance(statement.body[0], cst.Expr) and
          isinstance(statement.body[0].value,
                     (cst.SimpleString, cst.ConcatenatedString)))


def _imported_packages(body) -> Set[str]:
  """The names `import mp_optimizer` / `from mp_optimizer import managers`
  (with or without `as x`) bind at the top level."""
  bound = set()
  for statement in body:
    if not _is_import(statement):
      continue
    for small in statement.body:
      if isinstance(small, cst.Import):
        aliases = small.names
      elif (isinstance(small, cst.ImportFrom) and small.module is not None and
            not small.relative and source_text(small.module) == "mp_optimizer"
            and not isinstance(small.names, cst.ImportStar)):
        aliases = small.names
      else:
        continue
      for alias in aliases:
        name = source_text(alias.name)
        if name in PACKAGES:
          bound.add(alias.asname.name.value if alias.asname else name)
  return bound


class _Uses(cst.CSTVisitor):
  """Whether code that runs at import time refers to one of some names."""

  def __init__(self, wanted: Set[str]):
    super().__init__()
    self.wanted, self.found = wanted, False

  def visit_FunctionDef(self, node) -> bool:
    return False  # Its body runs later; decorators rarely use our packages.

  def visit_Lambda(self, node) -> bool:
    return False

  def visit_Name(self, node: cst.Name) -> None:
    self.found |= node.value in self.wanted


def _uses(statement: cst.CSTNode, wanted: Set[str]) -> bool:
  visitor = _Uses(wanted)
  statement.visit(visitor)
  return visitor.found
