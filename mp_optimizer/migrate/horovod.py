"""`--horovod`: Horovod's TF1 imports onto `mp_optimizer.horovod`.

Rewritten, each statement in place (so lines keep their numbers):

    import horovod.tensorflow as hvd       -> import mp_optimizer.horovod as hvd
    from horovod import tensorflow as hvd  -> from mp_optimizer import horovod as hvd
    from horovod.tensorflow import X       -> from mp_optimizer.horovod import X

Reported for a human: any other import of `horovod` (Keras, PyTorch, an
import without `as`, a name the drop-in lacks), and each `hvd.NAME` whose
NAME the drop-in lacks. Runs before the other passes, on the whole file.
"""

from typing import List, Set, Tuple

import libcst as cst
from libcst import metadata

from mp_optimizer.migrate import passes

# mp_optimizer.horovod.__all__ (the codemod imports nothing else of the
# library; a test keeps the two equal).
SUPPORTED = frozenset((
    "Average", "BroadcastGlobalVariablesHook", "Compression",
    "DistributedOptimizer", "Sum", "allgather", "allreduce", "broadcast",
    "broadcast_global_variables", "broadcast_variables", "init",
    "is_initialized", "local_rank", "local_size", "rank", "size"))
_DOCS = "(docs: Scale-out with Horovod's API, Not supported)"


def _dotted(node: cst.BaseExpression) -> str:
  if isinstance(node, cst.Attribute):
    return f"{_dotted(node.value)}.{node.attr.value}"
  return node.value if isinstance(node, cst.Name) else ""


def _parse(dotted: str) -> cst.BaseExpression:
  return cst.parse_expression(dotted)


class _HorovodPass(passes.ReportingPass, cst.CSTTransformer):
  """Rewrites the imports, records the aliases, reports the rest."""

  def __init__(self):
    super().__init__()
    self.aliases: Set[str] = set()

  def leave_Import(self, original: cst.Import, updated: cst.Import):
    names = []
    for alias in updated.names:
      dotted = _dotted(alias.name)
      if dotted == "horovod.tensorflow" and alias.asname:
        self.aliases.add(alias.asname.name.value)
        alias = alias.with_changes(name=_parse("mp_optimizer.horovod"))
      elif dotted.split(".")[0] == "horovod":
        self._report(original, f"`import {dotted}` is not mapped: write "
                     "`import mp_optimizer.horovod as hvd` for Horovod's TF1 "
                     f"API {_DOCS}")
      names.append(alias)
    return updated.with_changes(names=names)

  def leave_ImportFrom(self, original: cst.ImportFrom,
                       updated: cst.ImportFrom):
    module = _dotted(updated.module) if updated.module else ""
    if module.split(".")[0] != "horovod":
      return updated
    imported = ([] if isinstance(updated.names, cst.ImportStar) else
                [(a.name.value, a.asname) for a in updated.names])
    if module == "horovod" and imported and all(
        name == "tensorflow" and asname for name, asname in imported):
      self.aliases |= {asname.name.value for _, asname in imported}
      return updated.with_changes(module=_parse("mp_optimizer"), names=[
          a.with_changes(name=cst.Name("horovod")) for a in updated.names])
    if module == "horovod.tensorflow" and imported and all(
        name in SUPPORTED for name, _ in imported):
      return updated.with_changes(module=_parse("mp_optimizer.horovod"))
    self._report(original, f"`from {module} import ...` is not mapped: "
                 "mp_optimizer.horovod has Horovod's TF1 names "
                 f"{', '.join(sorted(SUPPORTED))} {_DOCS}")
    return updated


class _UsesPass(passes.ReportingPass, cst.CSTVisitor):
  """Reports `alias.NAME` for a NAME the drop-in lacks."""

  def __init__(self, aliases: Set[str]):
    super().__init__()
    self.aliases = aliases

  def visit_Attribute(self, node: cst.Attribute) -> None:
    if (isinstance(node.value, cst.Name) and node.value.value in self.aliases
        and node.attr.value not in SUPPORTED):
      self._report(node, f"`{node.value.value}.{node.attr.value}` is not in "
                   f"mp_optimizer.horovod {_DOCS}")


def convert(source: str) -> Tuple[str, List[passes.Finding]]:
  """Rewrites `source`'s Horovod imports; returns it and the findings.

  Raises:
    libcst.ParserSyntaxError: If `source` does not parse.
  """
  wrapper = metadata.MetadataWrapper(cst.parse_module(source))
  imports = _HorovodPass()
  module = wrapper.visit(imports)
  uses = _UsesPass(imports.aliases)
  wrapper.visit(uses)
  return module.code, imports.findings + uses.findings
