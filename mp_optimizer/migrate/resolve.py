"""What a name in the file refers to, through its imports and module aliases.

libcst's `QualifiedNameProvider` resolves a `Name`/`Attribute` to the dotted
paths it was imported as, so `tf.train.experimental.DynamicLossScale` is
recognised under any import alias of `tensorflow`, while a local variable that
happens to be called `tf` is not. `Resolver` adds what the provider leaves
out: a module-level name bound once to a TensorFlow module
(`v1 = tf.compat.v1`).
"""

from typing import Any, Callable, Dict, List, Optional, Set

import libcst as cst
from libcst import helpers
from libcst import metadata

from mp_optimizer.migrate import names

# What a pass that uses a `Resolver` must declare as its METADATA_DEPENDENCIES.
METADATA_DEPENDENCIES = (metadata.QualifiedNameProvider,
                         metadata.ParentNodeProvider,
                         metadata.PositionProvider)
PACKAGES = ("mp_optimizer", "managers")
_IMPORT = metadata.QualifiedNameSource.IMPORT


def source_text(node: cst.CSTNode) -> str:
  """Returns the source text of `node`, as written (spacing included)."""
  return cst.Module([]).code_for_node(node)


class Resolver:
  """Answers what a node of the module being visited refers to.

  The visitor calls `read_aliases` from its `visit_Module`, before it asks
  about any node.

  Args:
    get_metadata: The `get_metadata` method of a visitor whose
      METADATA_DEPENDENCIES include `METADATA_DEPENDENCIES`; it is called
      only while that visitor visits.
    lines: Maps a line of the parsed source to the file's own line (the
      parsed source may leave parts of the file out: `chunks.Reduced`).
  """

  def __init__(self, get_metadata: Callable[..., Any],
               lines: Callable[[int], int] = lambda line: line):
    self._get_metadata = get_metadata
    self._lines = lines
    self._aliases: Dict[str, str] = {}  # `v1` -> "tensorflow.compat.v1".

  def read_aliases(self, module: cst.Module) -> None:
    """Finds the module-level aliases of TensorFlow modules in `module`."""
    aliases = _Aliases(self.qualified_names)
    module.visit(aliases)
    self._aliases = aliases.paths()

  def is_alias(self, name: str) -> bool:
    """Whether `name` is a module-level alias of a TensorFlow module."""
    return name in self._aliases

  def qualified_names(self, node: cst.CSTNode) -> Set[metadata.QualifiedName]:
    """Returns what libcst resolves `node` to (empty if nothing)."""
    return self._get_metadata(metadata.QualifiedNameProvider, node, set())

  def parent(self, node: cst.CSTNode) -> cst.CSTNode:
    """Returns the node that holds `node`."""
    return self._get_metadata(metadata.ParentNodeProvider, node)

  def line(self, node: cst.CSTNode) -> int:
    """Returns the line of the file `node` starts on."""
    return self._lines(self.position(node).start.line)

  def position(self, node: cst.CSTNode) -> metadata.CodeRange:
    """Returns where `node` starts and ends (lines 1-based, columns 0-based)."""
    return self._get_metadata(metadata.PositionProvider, node)

  def paths(self, node: cst.CSTNode) -> List[str]:
    """Returns the imported dotted paths `node` may refer to, sorted."""
    paths = sorted(q.name for q in self.qualified_names(node)
                   if q.source == _IMPORT)
    return paths or self._through_alias(node)

  def legacy_path(self, node: cst.CSTNode) -> Optional[str]:
    """Returns the legacy path `node` refers to, or None if it refers to none.

    A legacy name wins over a legacy module, which wins over anything else
    under a contrib module.
    """
    paths = self.paths(node)
    for test in (names.LEGACY_NAMES.__contains__, names.family_of_module,
                 names.is_contrib_path):
      for path in paths:
        if test(path):
          return path
    return None

  def target(self, node: cst.CSTNode) -> Optional[names.Target]:
    """What `node` names: a legacy name, or this library's name for one."""
    legacy = self.legacy_path(node)
    if legacy is not None:
      return names.LEGACY_NAMES.get(legacy)
    for path in self.paths(node):
      if path in names.LIBRARY_NAMES:
        return names.LIBRARY_NAMES[path]
    return None

  def _through_alias(self, node: cst.CSTNode) -> List[str]:
    """Resolves `v1.x.y` in a module that did `v1 = tf.compat.v1` once."""
    head = node
    while isinstance(head, cst.Attribute):
      head = head.value
    if not isinstance(head, cst.Name) or head.value not in self._aliases:
      return []
    if {q.name for q in self.qualified_names(head)} != {head.value}:
      return []  # Shadowed, or not the module-level name.
    dotted = helpers.get_full_name_for_node(node) or ""
    return [self._aliases[head.value] + dotted[len(head.value):]]


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


def package_refs(wrapper: metadata.MetadataWrapper) -> Dict[str, str]:
  """Returns the names the file can reach our packages by.

  Args:
    wrapper: The file's module, wrapped for metadata.

  Returns:
    For "mp_optimizer" and "managers": the package name, or the name with
    `_lib` added when the file already uses the package name for something
    other than an import of that package (`managers = []`).
  """
  refs = {package: package for package in PACKAGES}
  for node, qualified in wrapper.resolve(metadata.QualifiedNameProvider).items():
    if not isinstance(node, cst.Name) or node.value not in refs:
      continue
    # The provider may hand back a lazy value: a callable that computes it.
    qualified = qualified() if callable(qualified) else qualified
    # Only an import of this library's package counts: a file's own
    # top-level `managers` module is something else.
    if any(q.name != names.MODULES[node.value] or q.source != _IMPORT
           for q in qualified):
      refs[node.value] = node.value + "_lib"
  return refs
