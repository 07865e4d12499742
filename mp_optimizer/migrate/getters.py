"""Hand-written float32 master-weight getters, pointed to the library's.

TF1 float16 code (NVIDIA's mixed-precision guide and many model zoos) stores
float16 variables in float32 with a `custom_getter` of its own:

```
def float32_variable_storage_getter(getter, name, ..., dtype=None, ...):
    variable = getter(name, ..., dtype=tf.float32 if trainable else dtype, ...)
    return tf.cast(variable, dtype) if trainable and dtype != tf.float32 else variable
```

Such a getter keeps working, so nothing is rewritten; a notice names
`mp_optimizer.float32_variable_getter`, which does the same and also covers
what hand-written ones often miss (a float16 dtype that comes only from the
initializer's value, partitioned variables, an enclosing scope's getter).

A function is taken for one when its first parameter is called in its body,
its body names `float32`, and it returns through a `cast`.
"""

import re
from typing import Callable, List

import libcst as cst
from libcst import metadata

from mp_optimizer.migrate import findings

_EMPTY = cst.Module(body=[])
_CAST = re.compile(r"\bcast\s*\(")


def _notice(name: str) -> str:
  return (f"`{name}` looks like a hand-written float32 master-weight "
          "getter: `mp_optimizer.float32_variable_getter` does the same "
          "(trainable float16/bfloat16 variables stored in float32, cast on "
          "read; float16 initial values, partitioned variables and an "
          "enclosing scope's getter handled); pass it as `custom_getter=`, or "
          "build the model under `with mp_optimizer.float32_master_weights():`."
          " Checkpoint names stay the same. Not rewritten: such getters "
          "differ in detail")


class GetterPass(cst.CSTVisitor):
  """Collects a notice for each function shaped like a float32 getter.

  Args:
    lines: Maps a parsed line to the file's line (`resolve.Resolver`).
  """

  METADATA_DEPENDENCIES = (metadata.PositionProvider,)

  def __init__(self, lines: Callable[[int], int] = lambda line: line):
    super().__init__()
    self._lines = lines
    self.findings: List[findings.Finding] = []

  def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
    params = node.params.params
    if not params:
      return
    getter = params[0].name.value
    body = _EMPTY.code_for_node(node.body)
    if (re.search(rf"\b{re.escape(getter)}\s*\(", body) and
        "float32" in body and _CAST.search(body) and "return" in body):
      line = self._lines(
          self.get_metadata(metadata.PositionProvider, node).start.line)
      self.findings.append(findings.Finding(line, _notice(node.name.value),
                                            needs_human=False))
