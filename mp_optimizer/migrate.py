"""`mp-optimizer-migrate`: moves legacy mixed-precision code onto this package.

    mp-optimizer-migrate [--in-place] PATH...
    python -m mp_optimizer.migrate [--in-place] PATH...

Each PATH is a Python file or a directory, searched for `*.py` (hidden
directories, virtualenvs and site-packages are skipped). Every use of
`tf.contrib.mixed_precision` and of TensorFlow's own `LossScale`,
`MixedPrecisionLossScaleOptimizer` and graph-rewrite names is rewritten to
`mp_optimizer`/`managers`, whatever alias `tensorflow` was imported under; the
imports the new code needs are added, and everything else in the file (layout,
comments) is kept. By default a unified diff is printed (apply it with
`patch -p0`); `--in-place` writes the files.

What cannot be converted safely is printed to stderr as `file:line: reason`.
Exit status: 0 when nothing is left to do by hand, 1 when something is, 2 for
bad usage or a file that cannot be read or parsed (the others are still
processed).
"""

import argparse
import difflib
import io
import os
import sys
import tokenize
from typing import Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst
from libcst import metadata
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from mp_optimizer import _migrate_names as names
from mp_optimizer import _migrate_rewrite as rewrite

Finding = names.Finding
_PACKAGES = ("mp_optimizer", "managers")
_NOT_SEARCHED = ("__pycache__", "site-packages", "dist-packages")


def convert(source: str) -> Tuple[str, List[Finding]]:
  """Rewrites one module's source.

  Args:
    source: Python source text.

  Returns:
    The new source (equal to `source` when nothing applies) and the findings
    that need a human, sorted by line.

  Raises:
    libcst.ParserSyntaxError: If `source` does not parse.
  """
  wrapper = metadata.MetadataWrapper(cst.parse_module(source))
  name_pass = rewrite.NamePass(_package_refs(wrapper))
  module = wrapper.visit(name_pass)
  module = module.visit(_ImportPass(_used_names(module)))
  if name_pass.needed:
    context = CodemodContext()
    for package in sorted(name_pass.needed):
      ref = name_pass.refs[package]
      AddImportsVisitor.add_needed_import(
          context, package, asname=None if ref == package else ref)
    module = AddImportsVisitor(context).transform_module(module)
  findings = sorted(set(name_pass.findings), key=lambda f: (f.line, f.reason))
  return module.code, findings


def _package_refs(wrapper: metadata.MetadataWrapper) -> dict:
  """Names to reach our packages by: `managers_lib` if `managers` is taken."""
  refs = {package: package for package in _PACKAGES}
  for node, qualified in wrapper.resolve(metadata.QualifiedNameProvider).items():
    if not isinstance(node, cst.Name) or node.value not in refs:
      continue
    qualified = qualified() if callable(qualified) else qualified  # Lazy.
    if any(q.name != node.value or q.source != metadata.QualifiedNameSource.IMPORT
           for q in qualified):
      refs[node.value] = node.value + "_lib"
  return refs


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


def _used_names(module: cst.Module) -> Set[str]:
  collector = _NameCollector()
  module.visit(collector)
  return collector.found


def _dotted(dotted: str) -> cst.BaseExpression:
  return cst.parse_expression(dotted)


class _ImportPass(cst.CSTTransformer):
  """Rewrites the imports of legacy modules and names; drops dead ones.

  `from tensorflow.contrib.mixed_precision import X` becomes `from managers
  import X` (or `from mp_optimizer import X`); a contrib module imported under
  a name becomes `from mp_optimizer import contrib as name`; an import of a
  TensorFlow mixed-precision module whose name is no longer used is removed.
  """

  def __init__(self, used: Set[str]):
    super().__init__()
    self._used = used

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
      dotted = names.code(alias.name)
      bound = alias.asname.name.value if alias.asname else None
      if bound is None and names.is_contrib_path(dotted):
        if "tensorflow" in self._used:  # `import a.b.c` also binds `a`.
          kept.append(alias.with_changes(name=cst.Name("tensorflow")))
      elif bound and dotted in names.CONTRIB_MODULES:
        extra.append(_from_import("mp_optimizer", [cst.ImportAlias(
            cst.Name("contrib"), asname=cst.AsName(cst.Name(bound)))]))
      elif bound and names.family_of_module(dotted) and bound not in self._used:
        pass
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
    module = names.code(node.module)
    if isinstance(node.names, cst.ImportStar):
      if module in names.CONTRIB_MODULES:
        return [node.with_changes(module=_dotted("mp_optimizer.contrib"))]
      return None
    groups = {}  # Destination module -> aliases, in order of appearance.
    for alias in node.names:
      name = names.code(alias.name)
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
        groups.setdefault(None, [])
      else:
        groups.setdefault(module, []).append(alias)
    if list(groups) == [module]:
      return None
    return [node.with_changes(module=_dotted(destination),
                              names=_fix_commas(aliases, node))
            for destination, aliases in groups.items() if aliases]


def _from_import(module: str, aliases) -> cst.ImportFrom:
  return cst.ImportFrom(module=_dotted(module), names=aliases)


def _fix_commas(aliases, original):
  """Gives the last alias the original last alias's comma (trailing or none)."""
  aliases = list(aliases)
  if aliases:
    aliases[-1] = aliases[-1].with_changes(comma=original.names[-1].comma)
  return aliases


# Command line -----------------------------------------------------------------


def _searched(root: str, directory: str) -> bool:
  """Skips hidden and cache directories, virtualenvs and installed packages."""
  return not (directory.startswith(".") or directory in _NOT_SEARCHED or
              os.path.exists(os.path.join(root, directory, "pyvenv.cfg")))


def _python_files(paths: Sequence[str], errors: List[str]) -> Iterator[str]:
  for path in paths:
    if os.path.isdir(path):
      for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if _searched(root, d))
        for name in sorted(files):
          if name.endswith(".py"):
            yield os.path.join(root, name)
    elif os.path.isfile(path):
      yield path
    else:
      errors.append(f"{path}: no such file or directory")


def _process(path: str, in_place: bool) -> int:
  """Converts one file, prints its diff and findings; returns its status."""
  with open(path, "rb") as f:
    data = f.read()
  try:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    old = data.decode(encoding)
    new, findings = convert(old)
  except (SyntaxError, UnicodeDecodeError) as e:
    print(f"{path}:{getattr(e, 'lineno', None) or 1}: cannot read: {e}",
          file=sys.stderr)
    return 2
  except cst.ParserSyntaxError as e:
    print(f"{path}:{e.editor_line}: cannot parse: {e.message}", file=sys.stderr)
    return 2
  for finding in findings:
    print(f"{path}:{finding.line}: {finding.reason}", file=sys.stderr)
  if new != old:
    if in_place:
      with open(path, "w", encoding=encoding, newline="") as f:
        f.write(new)
      print(f"rewrote {path}")
    else:
      diff = difflib.unified_diff(old.splitlines(keepends=True),
                                  new.splitlines(keepends=True), path, path)
      sys.stdout.writelines(
          line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
          for line in diff)
  return 1 if findings else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Runs the command line; returns the exit status (0, 1 or 2)."""
  parser = argparse.ArgumentParser(
      prog="mp-optimizer-migrate",
      description=("Rewrite tf.contrib.mixed_precision and TensorFlow's "
                   "LossScale / MixedPrecisionLossScaleOptimizer / graph-rewrite "
                   "names to mp_optimizer and managers."),
      epilog=("Exit status: 0 nothing left to do by hand; 1 something needs a "
              "human (see the file:line: reason lines); 2 bad usage or a file "
              "that cannot be read or parsed."))
  parser.add_argument("paths", nargs="+", metavar="PATH",
                      help="a Python file or a directory to search for *.py")
  parser.add_argument("--in-place", action="store_true",
                      help="write the files instead of printing a diff")
  try:
    args = parser.parse_args(argv)
  except SystemExit as exit_:
    return 2 if exit_.code else 0
  errors: List[str] = []
  status = 0
  for path in _python_files(args.paths, errors):
    status = max(status, _process(path, args.in_place))
  for error in errors:
    print(error, file=sys.stderr)
    status = 2
  return status


if __name__ == "__main__":
  sys.exit(main())
