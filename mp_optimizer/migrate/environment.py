"""NVIDIA's container variables, set from Python: reported where they are set.

`os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"` (also
`..._GRAPH_REWRITE`, `..._LOSS_SCALING`; through `os.environ.setdefault`,
`os.environ.update`, `os.putenv`, or `from os import environ`) made NVIDIA's
TF1 containers rewrite every `tf.train.Optimizer` for float16 with dynamic
loss scaling; `..._GRAPH_REWRITE` alone, the rewrite without loss scaling;
`..._LOSS_SCALING` alone, loss scaling without the rewrite. Stock
TensorFlow ignores them: the script trains in float32 without loss scaling.
Each finding names the spelling that does what that variable did
(`mp_optimizer.nvidia_environment` documents the rules). Setting one to "0" (or "false") does nothing either
way and is not reported; any other value, a flag's value included
(`"1" if args.amp else "0"`), is.
"""

from typing import Optional

import libcst as cst

from mp_optimizer.migrate import passes
from mp_optimizer.migrate import resolve

_BOTH = "TF_ENABLE_AUTO_MIXED_PRECISION"
_REWRITE, _SCALING = _BOTH + "_GRAPH_REWRITE", _BOTH + "_LOSS_SCALING"
_REWRITE_CALL = "`mp_optimizer.enable_mixed_precision_graph_rewrite(opt, \"dynamic\")`"
_SCALING_CALL = "`mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, \"dynamic\")`"
# Variable -> (what NVIDIA's containers did for it, the spelling that does
# the same on stock TensorFlow).
_WHAT = {
    _BOTH: ("apply the float16 graph rewrite and dynamic loss scaling to every "
            "tf.compat.v1 optimizer", f"wrap the optimizer with {_REWRITE_CALL}"),
    _REWRITE: (
        "run the float16 graph rewrite, which does not scale the loss "
        f"(`{_BOTH}` and `{_SCALING}` decided that)", "for the rewrite alone call "
        "`tf.config.optimizer.set_experimental_options({\"auto_mixed_precision"
        "\": True})` before the Session is created (with loss scaling on too, "
        f"wrap the optimizer with {_REWRITE_CALL} instead)"),
    _SCALING: (
        "apply dynamic loss scaling to every tf.compat.v1 optimizer, which "
        f"does not rewrite the graph (`{_BOTH}` and `{_REWRITE}` decided "
        "that)",
        f"wrap the optimizer with {_SCALING_CALL} ({_REWRITE_CALL} with the "
        "rewrite on too)"),
}
_OFF = ("0", "false", "")
_SETTERS = {"os.environ.setdefault", "os.putenv", "posix.putenv"}


def _reason(name: str) -> str:
  did, spelling = _WHAT[name]
  return (f"`{name}` made NVIDIA's TF1 containers {did}; stock TensorFlow "
          "ignores it, so this does nothing: "
          f"{spelling}, or run the script unchanged with "
          "`python -m mp_optimizer.nvidia_environment SCRIPT ARGS...`")


def _string(node: cst.BaseExpression) -> Optional[str]:
  if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
    value = node.evaluated_value
    return value if isinstance(value, str) else None
  return None


class EnvironmentPass(passes.ReportingPass, cst.CSTVisitor):
  """Collects a finding for each place that switches one of them on."""

  METADATA_DEPENDENCIES = resolve.METADATA_DEPENDENCIES

  def _is(self, node: cst.BaseExpression, *paths: str) -> bool:
    return any(q.name in paths for q in self._resolve.qualified_names(node))

  def _check(self, node: cst.CSTNode, name: Optional[str],
             value: Optional[cst.BaseExpression]) -> None:
    if name not in _WHAT or value is None:
      return
    text = _string(value)
    if text is not None and text.strip().lower() in _OFF:
      return
    if isinstance(value, cst.Integer) and value.value == "0":
      return
    self._report(node, _reason(name))

  def visit_Assign(self, node: cst.Assign) -> None:
    for target in node.targets:
      subscript = target.target
      if (isinstance(subscript, cst.Subscript) and len(subscript.slice) == 1
          and isinstance(subscript.slice[0].slice, cst.Index) and
          self._is(subscript.value, "os.environ")):
        self._check(node, _string(subscript.slice[0].slice.value), node.value)

  def visit_Call(self, node: cst.Call) -> None:
    if self._is(node.func, *_SETTERS) and len(node.args) >= 2:
      self._check(node, _string(node.args[0].value), node.args[1].value)
    elif self._is(node.func, "os.environ.update"):
      for arg in node.args:
        if arg.keyword is not None:
          self._check(node, arg.keyword.value, arg.value)
        elif isinstance(arg.value, cst.Dict):
          for element in arg.value.elements:
            if isinstance(element, cst.DictElement):
              self._check(node, _string(element.key), element.value)
