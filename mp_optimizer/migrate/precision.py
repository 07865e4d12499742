"""`--precision bfloat16`: a float16 script switched to the bfloat16 mode.

Runs after the rest of the codemod, on its output (so legacy names are
already `mp_optimizer`'s), and rewrites:

| float16 code | becomes | why |
|---|---|---|
| `tf.float16`, `tf.half` (any `tf.` / `tensorflow.` path) | `tf.bfloat16` | compute in bfloat16 |
| `"float16"` / `"half"` as `dtype=` or `cast`'s dtype | `"bfloat16"` | the same, spelt as a string |
| `managers.<a manager with state>(...)` | `managers.NoLossScale(keep_state_of=managers.<it>(...))` | bfloat16 needs no scale; steps stay checked; the float16 state is kept, untouched, so checkpoints restore both ways |
| `managers.FixedLossScaleManager(...)`, `managers.FixedLossScale(...)` | `managers.NoLossScale()` | the same; a fixed scale has no state |
| `mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, "dynamic")` | `...(opt, mp_optimizer.managers.NoLossScale(keep_state_of=mp_optimizer.managers.DynamicLossScale()))` | the same, TF2's face (another non-literal loss scale: `keep_state_of=mp_optimizer.managers.get(<it>)`) |
| `enable_mixed_precision_graph_rewrite(opt, ...)` | `enable_bfloat16_graph_rewrite(opt)` | oneDNN's CPU bfloat16 rewrite |

Each change is a notice (the code works; what changed is said). What it
cannot change is a finding: NumPy's `float16` (NumPy has no bfloat16), any
other `"float16"` string, the constant 65504 (float16's maximum), a manager
or optimizer named without a package it can find `NoLossScale` in. Findings
name the lines of the file as it was (`original_lines`).
"""

from typing import Callable, List, Optional, Tuple

import libcst as cst
from libcst import metadata

from mp_optimizer.migrate import diffs
from mp_optimizer.migrate import mentions
from mp_optimizer.migrate import new_imports
from mp_optimizer.migrate import passes
from mp_optimizer.migrate import resolve
from mp_optimizer.migrate import savers
from mp_optimizer.migrate import unscaled_mode
from mp_optimizer.migrate.resolve import source_text
from mp_optimizer.migrate.unscaled_mode import KEEP_STATE_OF, KEPT

_TF_ROOTS = ("tf", "tensorflow")
_NUMPY_ROOTS = ("np", "numpy")
_FLOAT16 = ("float16", "half")
_STATELESS = ("FixedLossScaleManager", "FixedLossScale")
_MANAGERS = ("ExponentialUpdateLossScaleManager", "AmaxHistoryLossScaleManager",
             "DynamicLossScale") + _STATELESS
_SCALE_KEYWORDS = ("initial_scale", "dynamic_growth_steps")
_BFLOAT16_MODE = ("managers.NoLossScale() (no loss scale; a step with NaN/Inf "
                  "gradients is still skipped)")


def _dotted(node: cst.BaseExpression) -> Optional[str]:
  """`a.b.c` for a chain of names, else None."""
  if isinstance(node, cst.Name):
    return node.value
  if isinstance(node, cst.Attribute):
    head = _dotted(node.value)
    return None if head is None else f"{head}.{node.attr.value}"
  return None


def _string_value(node: cst.BaseExpression) -> Optional[str]:
  if isinstance(node, cst.SimpleString):
    return node.evaluated_value if isinstance(node.evaluated_value,
                                              str) else None
  return None


class _Bfloat16Pass(passes.ReportingPass, cst.CSTTransformer):
  """The rewrites of the module docstring; collects their notices."""

  def __init__(self, conversion: passes.Conversion):
    super().__init__(conversion)
    self._converted_strings = set()
    self._kept_calls = set()  # Managers already kept by a NoLossScale.
    self.switched = False  # Whether loss scaling became the bfloat16 mode.

  def leave_Attribute(self, original: cst.Attribute,
                      updated: cst.Attribute) -> cst.BaseExpression:
    name = _dotted(original)
    if name is None or original.attr.value not in _FLOAT16:
      return updated
    root = name.split(".", 1)[0]
    if root in _TF_ROOTS:
      self._report(
          original, f"`{name}` -> `{name.rsplit('.', 1)[0]}.bfloat16`: "
          "computes in bfloat16 (float32's range, 8 significant bits)",
          needs_human=False)
      return updated.with_changes(attr=cst.Name("bfloat16"))
    if root in _NUMPY_ROOTS:
      self._report(
          original, f"`{name}`: NumPy has no bfloat16; use "
          "`tf.bfloat16.as_numpy_dtype`, or keep float32 data and cast "
          "in the graph", needs_human=True)
    return updated

  def leave_SimpleString(self, original: cst.SimpleString,
                         updated: cst.SimpleString) -> cst.BaseExpression:
    value = _string_value(original)
    if value not in _FLOAT16:
      return updated
    if id(original) in self._converted_strings:
      quote = original.value[-1]
      self._report(
          original, f"dtype {original.value} -> {quote}bfloat16{quote}",
          needs_human=False)
      return updated.with_changes(value=f"{quote}bfloat16{quote}")
    self._report(original, f"the string {original.value} is left as it is: "
                 "switch it to \"bfloat16\" if it names the compute dtype",
                 needs_human=True)
    return updated

  def visit_Call(self, node: cst.Call) -> None:
    function = _dotted(node.func) or ""
    if function.rsplit(".", 1)[-1] == "NoLossScale":  # Converted: run again.
      self._kept_calls.update(id(arg.value) for arg in node.args
                              if arg.keyword is not None and
                              arg.keyword.value == KEEP_STATE_OF)
    for position, arg in enumerate(node.args):
      is_dtype = (arg.keyword is not None and arg.keyword.value == "dtype") or (
          arg.keyword is None and position == 1 and
          function.rsplit(".", 1)[-1] == "cast")
      if is_dtype and _string_value(arg.value) in _FLOAT16:
        self._converted_strings.add(id(arg.value))

  def leave_Integer(self, original: cst.Integer,
                    updated: cst.Integer) -> cst.BaseExpression:
    if original.evaluated_value == 65504:
      self._report(
          original, "65504 is float16's largest value; bfloat16's is "
          "about 3.39e38 (float32's range): check what this limit is for",
          needs_human=True)
    return updated

  def leave_Call(self, original: cst.Call,
                 updated: cst.Call) -> cst.BaseExpression:
    function = _dotted(original.func)
    if function is None:
      return updated
    package, _, last = function.rpartition(".")
    if last in _MANAGERS and id(original) not in self._kept_calls:
      return self._manager(original, updated, function, package, last)
    if last == "MixedPrecisionLossScaleOptimizer":
      return self._tf2_optimizer(original, updated, package)
    if last == "enable_mixed_precision_graph_rewrite" and updated.args:
      self._report(
          original, f"`{function}` -> `enable_bfloat16_graph_rewrite`: "
          "TensorFlow's oneDNN bfloat16 rewrite, which runs on CPUs with "
          "AVX512-BF16 or AMX (the float16 rewrite ran on GPUs); the "
          "optimizer gets no loss scale", needs_human=False)
      self.switched = True
      name = f"{package}.enable_bfloat16_graph_rewrite" if package else (
          "enable_bfloat16_graph_rewrite")
      return updated.with_changes(func=cst.parse_expression(name),
                                  args=[updated.args[0].with_changes(
                                      comma=cst.MaybeSentinel.DEFAULT)])
    return updated

  def _manager(self, original: cst.Call, updated: cst.Call, function: str,
               package: str, last: str) -> cst.BaseExpression:
    """A loss-scale manager's constructor call in the bfloat16 mode."""
    stateless = last in _STATELESS
    keep = "" if stateless else f"{KEEP_STATE_OF}={function}(...)"
    if package.rsplit(".", 1)[-1] != "managers":
      self._report(original, f"`{function}(...)`: replace it with "
                   f"managers.NoLossScale({keep}) (no loss scale; a "
                   "step with NaN/Inf gradients is still skipped), imported "
                   "from mp_optimizer", needs_human=True)
      return updated
    self._report(
        original, f"`{function}(...)` -> `{package}.NoLossScale({keep})`: "
        "bfloat16 needs no loss scale; a step with NaN/Inf gradients is "
        "still skipped" +
        ("" if stateless else f"; {KEPT}"), needs_human=False)
    self.switched = True
    return unscaled_mode.no_loss_scale(package,
                                       None if stateless else updated)

  def _tf2_optimizer(self, original: cst.Call, updated: cst.Call,
                     package: str) -> cst.BaseExpression:
    """`MixedPrecisionLossScaleOptimizer(opt, loss_scale)` in the mode."""
    if not package:
      self._report(original, "`MixedPrecisionLossScaleOptimizer`: pass "
                   f"{_BFLOAT16_MODE}, imported from mp_optimizer, as its loss "
                   f"scale ({KEEP_STATE_OF}=<its float16 loss scale> keeps "
                   "reading its checkpoints)", needs_human=True)
      return updated
    aliases = [arg for arg in updated.args
               if arg.keyword and arg.keyword.value in _SCALE_KEYWORDS]
    args, mode = [], None
    for position, arg in enumerate(updated.args):
      keyword = arg.keyword.value if arg.keyword else None
      if keyword in _SCALE_KEYWORDS:
        continue
      if keyword == "loss_scale" or (keyword is None and position == 1):
        if not isinstance(arg.value, cst.Call):  # A manager: rewritten above.
          mode = unscaled_mode.tf2_mode(package, arg.value, aliases)
          arg = arg.with_changes(value=mode.call)
      args.append(arg)
    if len(args) == 1 and args[0].keyword is None:
      mode = unscaled_mode.tf2_mode(package, None, aliases)
      args.append(cst.Arg(mode.call))
    if mode is None:
      return updated
    self._report(original, "`MixedPrecisionLossScaleOptimizer`: loss scale -> "
                 f"`{source_text(mode.call)}`: bfloat16 needs no loss scale; a "
                 "step with NaN/Inf gradients is still skipped" +
                 (f"; {KEPT}" if mode.keeps_state else ""), needs_human=False)
    self.switched = True
    args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return updated.with_changes(args=args)


def original_lines(old: str, new: str) -> Callable[[int], int]:
  """Maps a line of `new` (the codemod's output) to its line in `old`.

  Lines the codemod left alone map exactly; a line it rewrote maps to the
  line it replaced (the last one, if it made more lines than it replaced).
  """
  codes = diffs._opcodes(old.splitlines(), new.splitlines())  # pylint: disable=protected-access
  mapping = {}
  for _, i1, i2, j1, j2 in codes:
    for j in range(j1, j2):
      mapping[j + 1] = min(i1 + (j - j1), max(i1, i2 - 1)) + 1
  return lambda line: mapping.get(line, line)


def convert(source: str, lines: Callable[[int], int] = lambda line: line,
            with_savers: bool = True) -> Tuple[str, List[passes.Finding]]:
  """Switches a converted module's source to the bfloat16 mode.

  Where it switched loss scaling to the mode, `savers` runs too (unless
  `with_savers` is False: `codemod.convert` already ran it on this file).

  Args:
    source: Python source, as `codemod.convert` returned it.
    lines: Maps a line of `source` to the line to report.
    with_savers: Whether to run `savers` where loss scaling was switched.

  Returns:
    The new source and its notices and findings, sorted by line.

  Raises:
    libcst.ParserSyntaxError: If `source` does not parse.
  """
  if not mentions.precision_words(source.encode("utf-8", "surrogatepass")):
    return source, []
  wrapper = metadata.MetadataWrapper(cst.parse_module(source),
                                     unsafe_skip_copy=True)
  rewrite = _Bfloat16Pass(passes.Conversion(lines=lines))
  module, found = wrapper.visit(rewrite), rewrite.findings
  if rewrite.switched and with_savers:
    conversion = passes.Conversion(lines=lines,
                                   refs=resolve.package_refs(wrapper))
    module, more = savers.rewrite(module, conversion)
    module = new_imports.add(module, conversion.needed, conversion.refs)
    found = found + more
  return module.code, sorted(set(found), key=lambda f: (f.line, f.reason))
