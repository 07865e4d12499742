"""The layers of docs/architecture.md: imports only run downward, the diagram
lists every module in its layer, and one default step's walk stays short.

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
import sys

import numpy as np

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


def _absolute(module: str, node: ast.ImportFrom) -> str:
  """The dotted module a `from ... import` names, relative ones resolved."""
  if not node.level:
    return node.module
  package = module if MODULES[module].name == "__init__.py" else (
      module.rsplit(".", 1)[0])
  base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
  return f"{base}.{node.module}" if node.module else base


def imports_of(module: str):
  """The library modules that `module` imports, at any depth of its code.

  Only the body of an `if TYPE_CHECKING:` is left out (annotations, never
  run); its `else:` branch runs and counts. `importlib.import_module` and
  `__import__` calls count too: a literal name is that import; a computed one
  (a lazy-import table) makes every string in the module that names a
  library module an import.
  """
  tree = ast.parse(MODULES[module].read_text())
  skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
             and ast.unparse(node.test).split(".")[-1] == "TYPE_CHECKING"
             for statement in node.body for n in ast.walk(statement)}
  found = set()
  for node in ast.walk(tree):
    if id(node) in skipped:
      continue
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      source = _absolute(module, node)
      names = [f"{source}.{alias.name}" for alias in node.names]
    elif (isinstance(node, ast.Call) and node.args and
          ast.unparse(node.func) in ("importlib.import_module", "__import__")):
      if isinstance(node.args[0], ast.Constant):
        names = [str(node.args[0].value)]
      else:
        names = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                 and n.value in MODULES]
    else:
      continue
    found |= {_resolve(n) for n in names if n.split(".")[0] == "mp_optimizer"}
  return found - {module}


def diagram_modules():
  """{dotted module: layer} as the diagram of docs/architecture.md draws it.

  A header line (`layer N ...` or `apart ...`) opens a layer and names its
  folder; each `name.py` below it is a module of that folder, or of the
  package itself (`errors.py`, drawn beside the internals).
  """
  text = (ROOT / "docs" / "architecture.md").read_text()
  block = text.split("```", 2)[1]
  drawn, level, folder = {}, None, None
  for line in block.splitlines():
    header = re.match(r"\s*(?:layer (\d)|apart)\s", line)
    if header:
      level = int(header.group(1)) if header.group(1) else "codemod"
      folder = re.search(r"(mp_optimizer/\S*|managers/)", line).group(1)
      if folder.endswith("migrate/"):
        drawn["mp_optimizer.migrate"] = level
      continue
    for name in re.findall(r"\b(\w+)\.py\b", line):
      package = ("mp_optimizer.managers" if folder == "managers/" else
                 folder.rstrip("/").replace("/", "."))
      module = package if name == "__init__" else f"{package}.{name}"
      if module not in MODULES and f"mp_optimizer.{name}" in MODULES:
        module = f"mp_optimizer.{name}"
      drawn[module] = level
  return drawn


def modules_of_one_default_step(**options):
  """The library modules whose functions run while `minimize` builds one
  default dynamic step (contrib's manager, Adam), in a fresh graph.

  `options` go to the manager (`fail_at_floor_after`) or the optimizer.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import mp_optimizer  # pylint: disable=g-import-not-at-top
  from mp_optimizer import managers  # pylint: disable=g-import-not-at-top
  files = {str(path): module for module, path in MODULES.items()}
  ran = set()

  def profile(frame, event, _):
    if event == "call" and frame.f_code.co_filename in files:
      ran.add(files[frame.f_code.co_filename])

  v1 = tf.compat.v1
  with tf.Graph().as_default():
    weights = v1.get_variable("w", initializer=np.ones([4, 2], np.float32))
    loss = tf.reduce_sum(tf.cast(tf.matmul(
        tf.constant(np.ones([3, 4], np.float16)),
        tf.cast(weights, tf.float16)), tf.float32))
    floor = {k: options.pop(k) for k in ["fail_at_floor_after"] if k in options}
    optimizer = mp_optimizer.LossScaleOptimizer(
        v1.train.AdamOptimizer(1e-3),
        managers.ExponentialUpdateLossScaleManager(2**15, 2000, **floor),
        **options)
    global_step = v1.train.get_or_create_global_step()
    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
      optimizer.minimize(loss, global_step=global_step)
    finally:
      sys.setprofile(previous)
  return ran


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

  def test_the_diagram_draws_every_module_in_its_layer(self):
    drawn = diagram_modules()
    # Packages' __init__ files are not drawn, but for the namespace; the
    # codemod is drawn as one package.
    listed = {m for m in MODULES
              if not m.startswith("mp_optimizer.migrate.") and
              (MODULES[m].name != "__init__.py" or
               m in ("mp_optimizer", "mp_optimizer.migrate"))}
    self.assertEmpty(sorted(listed - set(drawn)), "left out of the diagram")
    self.assertEmpty(sorted(set(drawn) - listed), "drawn, but no such module")
    for module, level in drawn.items():
      self.assertEqual(layer(module), level, f"{module} is drawn in the "
                       f"wrong layer")

  def test_one_default_step_runs_code_in_the_modules_the_docs_name(self):
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## One default step, top to bottom", 1)[1]
    named = section.split("(`tests/faces/test_layers.py`", 1)[0]
    expected = {"mp_optimizer." + name
                for name in re.findall(r"`([\w.]+)`", named)
                if name != "LossScaleOptimizer"}
    self.assertEqual(modules_of_one_default_step(), expected)
    self.assertIn(f"code in {len(expected)} modules", " ".join(named.split()))

  @parameterized.named_parameters(
      ("clipnorm", {"clipnorm": 1.0}, ["_step.clipping"]),
      ("clipvalue", {"clipvalue": 1.0}, ["_step.clipping"]),
      ("global_clipnorm", {"global_clipnorm": 1.0}, ["_step.clipping"]),
      ("accumulation", {"gradient_accumulation_steps": 2},
       ["_step.accumulation"]),
      ("overflow_report", {"overflow_report": True}, ["_step.report"]),
      ("precision_telemetry", {"precision_telemetry": True},
       ["_step.telemetry"]),
      ("fail_at_floor_after", {"fail_at_floor_after": 3}, ["managers.floor"]),
  )
  def test_each_option_adds_the_modules_the_docs_name(self, options, added):
    text = (ROOT / "docs" / "architecture.md").read_text()
    sentence = " ".join(text.split("Options add their own modules:", 1)[1]
                        .split("\n\n", 1)[0].split())
    for module in added:  # The docs write _step's and the managers' short.
      short = module.split(".")[-1] if "_internal" not in module else module
      self.assertIn(f"`{short}`", sentence)
    self.assertEqual(
        modules_of_one_default_step(**options) - modules_of_one_default_step(),
        {"mp_optimizer." + module for module in added})

  def test_no_module_uses_the_old_top_level_managers_spelling(self):
    folders = [PACKAGE, MANAGERS] + [ROOT / name for name in
                                     ("tests", "examples", "benchmarks")]
    for folder in folders:
      for path in folder.rglob("*.py"):
        if "fixtures" in path.parts:  # Legacy code to convert.
          continue
        text = path.read_text()
        self.assertIsNone(
            re.search(r"^\s*(import|from) managers\b", text, re.M),
            f"{path}: write `from mp_optimizer import managers`")


if __name__ == "__main__":
  parameterized.absltest.main()
