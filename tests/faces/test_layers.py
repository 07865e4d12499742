"""The import rule of docs/architecture.md: imports only run downward.

Every module of the library is read as source where Python finds the
package (the source tree, or an installed copy), each
`import`/`from ... import` of the library is resolved to a module, and the
importer's layer must be at or above the imported module's. The codemod is a
layer of its own that imports nothing else of the library, so
`mp-optimizer-migrate` starts without TensorFlow.
"""

import ast
import importlib.util
import pathlib
import re

from absl.testing import parameterized

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Where the package's code is; nothing of it is imported.
PACKAGE = pathlib.Path(importlib.util.find_spec("mp_optimizer").origin).parent
MANAGERS = pathlib.Path(
    importlib.util.find_spec("mp_optimizer.managers").origin).parent
# Layer of each module, by the longest matching prefix of its dotted name.
LAYERS = (
    ("mp_optimizer.migrate", "codemod"),
    ("mp_optimizer._internal", 0),
    ("mp_optimizer.errors", 0),
    ("mp_optimizer.managers", 1),
    ("mp_optimizer._step", 2),
    ("mp_optimizer", 3),  # The package namespace and its public faces.
)


def _module_files():
  """(dotted name, path) of every library module, managers/ included."""
  for package, folder in (("mp_optimizer", PACKAGE),
                          ("mp_optimizer.managers", MANAGERS)):
    for path in sorted(folder.rglob("*.py")):
      parts = (package,) + path.relative_to(folder).with_suffix("").parts
      yield ".".join(p for p in parts if p != "__init__"), path


MODULES = dict(_module_files())


def layer(module: str):
  for prefix, level in LAYERS:
    if module == prefix or module.startswith(prefix + "."):
      return level
  raise AssertionError(f"{module} belongs to no layer")


def _resolve(name: str) -> str:
  """The library module `name` means: itself, or the package holding it."""
  while name not in MODULES and "." in name:
    name = name.rsplit(".", 1)[0]
  return name


def imports_of(module: str):
  """The library modules that `module` imports (outside TYPE_CHECKING)."""
  tree = ast.parse(MODULES[module].read_text())
  checking = [node for node in ast.walk(tree) if isinstance(node, ast.If)
              and "TYPE_CHECKING" in ast.unparse(node.test)
              and "not" not in ast.unparse(node.test)]
  skipped = {id(n) for block in checking for n in ast.walk(block)}
  found = set()
  for node in ast.walk(tree):
    if id(node) in skipped:
      continue
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      names = [f"{node.module}.{alias.name}" for alias in node.names]
    else:
      continue
    found |= {_resolve(n) for n in names if n.split(".")[0] == "mp_optimizer"}
  return found - {module}


class LayersTest(parameterized.TestCase):

  def test_every_module_has_a_layer(self):
    self.assertGreater(len(MODULES), 30)
    for module in MODULES:
      layer(module)

  @parameterized.named_parameters((name, name) for name in sorted(MODULES))
  def test_imports_run_downward(self, module):
    own = layer(module)
    for imported in imports_of(module):
      other = layer(imported)
      if own == "codemod" or other == "codemod":
        self.assertEqual(own, other,
                         f"{module} and {imported}: the codemod imports "
                         "nothing else of the library, and nothing imports it")
      else:
        self.assertLessEqual(other, own,
                             f"{module} (layer {own}) imports {imported} "
                             f"(layer {other})")

  def test_no_module_uses_the_old_top_level_managers_spelling(self):
    folders = [PACKAGE, MANAGERS] + [ROOT / name for name in
                                     ("tests", "examples", "benchmarks")]
    for folder in folders:
      for path in folder.rglob("*.py"):
        if "fixtures" in path.parts:  # Legacy code to convert.
          continue
        text = path.read_text()
        self.assertIsNone(
            re.search(r"^\s*import managers\b", text, re.M),
            f"{path}: write `from mp_optimizer import managers`")


if __name__ == "__main__":
  parameterized.absltest.main()
