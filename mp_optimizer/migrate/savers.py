"""Savers in a converted file: `mp_optimizer.Saver`, and where one cannot go.

A float32 run's checkpoint holds no loss-scale state, and TensorFlow's
default `Saver` cannot restore it into a loss-scaled graph (one `RestoreV2`
op over every key fails on the first absent one); `mp_optimizer.Saver`
can (docs: Checkpoints). In a file the codemod converts to loss scaling
(or to the bfloat16 mode), this pass rewrites, with a notice each:

| code | becomes, or is told |
|---|---|
| `tf.train.Saver(...)`, `tf.compat.v1.train.Saver(...)` (any spelling `resolve` resolves) | `mp_optimizer.Saver(...)` |
| the same with a second positional argument, or `*args` | a finding: `mp_optimizer.Saver` takes the others by keyword |
| `MonitoredTrainingSession(...)` without `scaffold=` | a notice: the `Scaffold` to pass |
| `tf.estimator.EstimatorSpec(...)` with a `train_op`, without `scaffold=` | a notice: the `Scaffold` to pass |
| `Scaffold(...)` without `saver=` | a notice: the `saver=` to pass |

It rewrites no session, spec or scaffold: those notices say what to add.
A call given `**kwargs` may carry the argument: it gets no notice.
"""

from typing import Callable, List, Tuple

import libcst as cst
from libcst import metadata

from mp_optimizer.migrate import passes
from mp_optimizer.migrate import resolve
from mp_optimizer.migrate.resolve import source_text

_ROOTS = tuple(f"{package}{compat}" for package in ("tensorflow",
                                                   "tensorflow_core")
               for compat in ("", ".compat.v1"))
_SAVERS = frozenset(f"{root}.train.Saver" for root in _ROOTS)
_SAVER = ("mp_optimizer.Saver saves the same keys and also restores a "
          "checkpoint without loss-scale state (a float32 run's), starting "
          "the scale from the manager's initial values with one warning "
          "line, where TensorFlow's Saver stops with NotFoundError "
          "(docs: Checkpoints)")
_SESSION_FIX = ("scaffold=tf.compat.v1.train.Scaffold("
                "saver=mp_optimizer.Saver(sharded=True))")
_SPEC_FIX = ("scaffold=tf.compat.v1.train.Scaffold(saver=mp_optimizer.Saver("
             "sharded=True, defer_build=True, save_relative_paths=True))")


def _always(_: cst.Call) -> bool:
  return True


def _trains(spec: cst.Call) -> bool:
  """Whether an `EstimatorSpec(...)` call passes a `train_op` (by keyword,
  or fourth by position, or through `*`). A PREDICT or EVAL spec builds no
  optimizer, so its graph holds no loss-scale state and its Saver restores
  any checkpoint: it gets no notice."""
  positional = 0
  for arg in spec.args:
    if arg.star == "*":
      return True
    if arg.keyword is None and not arg.star:
      positional += 1
    elif arg.keyword is not None and arg.keyword.value == "train_op":
      return True
  return positional >= 4


# Calls that build a default Saver unless given one: the keyword that gives
# it, what to pass, and which of those calls build one that meets scale
# state.
_DEFAULT_SAVERS = {
    **{f"{root}.train.MonitoredTrainingSession": (
        "scaffold", _SESSION_FIX, _always) for root in _ROOTS},
    **{f"{root}.estimator.EstimatorSpec": ("scaffold", _SPEC_FIX, _trains)
       for root in _ROOTS},
    **{f"{root}.train.Scaffold": (
        "saver", "saver=mp_optimizer.Saver(sharded=True)` (for an "
        "Estimator: `saver=mp_optimizer.Saver(sharded=True, defer_build=True, "
        "save_relative_paths=True)", _always)
       for root in _ROOTS},
}


class SaverPass(passes.ReportingPass, cst.CSTTransformer):
  """The rewrites and notices of the module docstring.

  It adds "mp_optimizer" to its conversion's `needed` when it writes
  `mp_optimizer.Saver`.
  """

  METADATA_DEPENDENCIES = resolve.METADATA_DEPENDENCIES

  def visit_Module(self, node: cst.Module) -> None:
    self._resolve.read_aliases(node)

  def leave_Call(self, original: cst.Call,
                 updated: cst.Call) -> cst.BaseExpression:
    paths = self._resolve.paths(original.func)
    if _SAVERS.intersection(paths):
      return self._saver(original, updated)
    for path in paths:
      if path in _DEFAULT_SAVERS:
        self._default_saver(original, *_DEFAULT_SAVERS[path])
        break
    return updated

  def _saver(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
    label = f"`{source_text(original.func)}(...)`"
    positional = [arg for arg in original.args
                  if arg.keyword is None and arg.star != "**"]
    if len(positional) > 1 or any(arg.star == "*" for arg in positional):
      self._report(original, f"{label} passes more than `var_list` by "
                   "position: pass the others by keyword, then use "
                   "mp_optimizer.Saver, which also restores a checkpoint "
                   "without loss-scale state (docs: Checkpoints)")
      return updated
    self.conversion.needed.add("mp_optimizer")
    ours = cst.Attribute(cst.Name(self.conversion.refs["mp_optimizer"]),
                         cst.Name("Saver"))
    self._report(original, f"{label} -> `{source_text(ours)}(...)`: {_SAVER}",
                 needs_human=False)
    return updated.with_changes(func=ours)

  def _default_saver(self, call: cst.Call, keyword: str, fix: str,
                     applies: Callable[[cst.Call], bool]) -> None:
    if not applies(call) or any(
        arg.star == "**" or (arg.keyword is not None and
                             arg.keyword.value == keyword)
        for arg in call.args):
      return
    self._report(call, f"`{source_text(call.func)}(...)` has no `{keyword}=`: "
                 "the Saver it builds cannot restore a checkpoint without "
                 "loss-scale state (a float32 run's); to continue one, pass "
                 f"`{fix}` (docs: Checkpoints)", needs_human=False)


def rewrite(module: cst.Module, conversion: passes.Conversion
            ) -> Tuple[cst.Module, List[passes.Finding]]:
  """Runs `SaverPass` over `module` (a converted module's tree).

  Args:
    module: The tree the codemod's rewriting pass returned.
    conversion: The module's conversion (its lines, refs and `needed`).

  Returns:
    The new tree and the pass's findings and notices.
  """
  wrapper = metadata.MetadataWrapper(module, unsafe_skip_copy=True)
  visitor = SaverPass(conversion)
  return wrapper.visit(visitor), visitor.findings

