"""No module outside `_internal` keeps mutable state at module level.

Facts about a graph, an object or the process live in `_internal/keyed.py`'s
`PerGraph`, `PerObject` and `PerProcess`, so that each dies with what it
describes and a reader finds it in one place. This test reads every module
of the package (the source, not the imported objects) and lists each
module-level name bound to a container (a dict, list or set display or
comprehension, or a call of `dict`, `list`, `set`, `collections.defaultdict`,
`collections.OrderedDict`, `weakref.WeakKeyDictionary` or
`weakref.WeakValueDictionary`) that any code of the module changes:
an item assigned or deleted, a mutating method called, or the name rebound
under `global`. A constant table read only is fine.
"""

import ast
import pathlib

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONTAINER_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict",
                   "WeakKeyDictionary", "WeakValueDictionary"}
MUTATORS = {"append", "extend", "insert", "add", "update", "setdefault", "pop",
            "popitem", "remove", "discard", "clear"}


def _is_container(node: ast.AST) -> bool:
  if isinstance(node, (ast.Dict, ast.List, ast.Set, ast.DictComp,
                       ast.ListComp, ast.SetComp)):
    return True
  if isinstance(node, ast.Call):
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(
        func, "id", None)
    return name in CONTAINER_CALLS
  return False


def _module_containers(tree: ast.Module):
  names = set()
  for node in tree.body:
    if isinstance(node, ast.Assign) and _is_container(node.value):
      names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    elif (isinstance(node, ast.AnnAssign) and node.value is not None and
          _is_container(node.value) and isinstance(node.target, ast.Name)):
      names.add(node.target.id)
  return names


def mutated_module_state(source: str):
  """The module-level containers `source` changes, with the line of each."""
  tree = ast.parse(source)
  containers = _module_containers(tree)
  found = []
  for node in ast.walk(tree):
    name = None
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
      targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) \
          else [node.target]
      for target in targets:
        if (isinstance(target, ast.Subscript) and
            isinstance(target.value, ast.Name)):
          name = target.value.id
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr in MUTATORS and
          isinstance(node.func.value, ast.Name)):
      name = node.func.value.id
    elif isinstance(node, ast.Global):
      found.extend((n, node.lineno) for n in node.names)
      continue
    if name in containers:
      found.append((name, node.lineno))
  return sorted(found, key=lambda entry: entry[1])


class ModuleStateTest(absltest.TestCase):

  def test_no_module_outside_internal_changes_a_module_level_container(self):
    offenders = {}
    for folder in ("mp_optimizer", "managers"):
      for path in sorted((ROOT / folder).rglob("*.py")):
        if "_internal" in path.parts:
          continue
        found = mutated_module_state(path.read_text(encoding="utf-8"))
        if found:
          offenders[str(path.relative_to(ROOT))] = found
    self.assertEqual(offenders, {})

  def test_the_reader_finds_each_kind_of_change(self):
    source = "\n".join([
        "import weakref",
        "A = {}", "B = []", "C = weakref.WeakKeyDictionary()", "D = set()",
        "E: dict = dict()", "TABLE = {'x': 1}", "F = 3",
        "def f(key):",
        "  A[key] = 1", "  B.append(key)", "  del C[key]", "  D.add(key)",
        "  E.setdefault(key, 0)", "  global F", "  F = 4",
        "  return TABLE[key]"])
    self.assertEqual([name for name, _ in mutated_module_state(source)],
                     ["A", "B", "C", "D", "E", "F"])


if __name__ == "__main__":
  absltest.main()
