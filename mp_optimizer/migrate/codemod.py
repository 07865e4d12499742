"""`convert()`: one module's source through the passes, in order.

0. `names.might_use_legacy`: a source that spells no legacy name is returned
   as it is, unparsed; `chunks.Reduced` leaves out the statements that
   cannot matter; `limits.too_large`: what is left is parsed only if it is
   small and shallow enough to convert in time linear in the file's size
   (else the file is returned as it is, with a finding).
1. `resolve.package_refs`: the names `mp_optimizer` and `managers` will go by.
2. `expressions.ExpressionPass`: dotted legacy references are rewritten.
3. `findings.FindingsPass`: what no rewrite can fix is reported;
   `getters.GetterPass`: hand-written float32 getters get a notice;
   `environment.EnvironmentPass`: NVIDIA's container variables, set to
   switch mixed precision on, are reported;
   `openseq2seq.OpenSeq2SeqPass`: OpenSeq2Seq's loss scaling is reported,
   with the manager that does the same (in a file that may use it,
   `scalers.mentions`).
4. `imports.rewrite_imports`: legacy imports are rewritten or dropped.
5. `new_imports.add`: the packages the new code refers to are imported.
"""

from typing import List, Tuple

import libcst as cst
from libcst import metadata

from mp_optimizer.migrate import chunks
from mp_optimizer.migrate import environment
from mp_optimizer.migrate import expressions
from mp_optimizer.migrate import findings
from mp_optimizer.migrate import getters
from mp_optimizer.migrate import imports
from mp_optimizer.migrate import limits
from mp_optimizer.migrate import names
from mp_optimizer.migrate import new_imports
from mp_optimizer.migrate import openseq2seq
from mp_optimizer.migrate import resolve
from mp_optimizer.migrate import scalers


def convert(source: str) -> Tuple[str, List[findings.Finding]]:
  """Rewrites one module's source.

  Args:
    source: Python source text.

  Returns:
    The new source (equal to `source` when nothing applies) and the findings
    (those that need a human, and notices), sorted by line.

  Raises:
    libcst.ParserSyntaxError: If `source` mentions a legacy name and does not
      parse.
  """
  data = source.encode("utf-8", "surrogatepass")
  if not names.might_use_legacy(data):
    return source, []  # Nothing to convert or report: not even parsed.
  reduced = chunks.Reduced(source)
  refused = limits.too_large(reduced)
  if refused is not None:
    return source, [refused]
  try:
    return _convert(source, data, reduced)
  except RecursionError:  # Deeper than `limits` could tell.
    return source, [limits.too_deep(1, None)]


def _convert(source: str, data: bytes, reduced: chunks.Reduced
             ) -> Tuple[str, List[findings.Finding]]:
  """`convert` for a source small and shallow enough to parse."""
  # The tree is ours alone: no need for the wrapper's defensive deep copy.
  wrapper = metadata.MetadataWrapper(cst.parse_module(reduced.source),
                                     unsafe_skip_copy=True)
  refs = resolve.package_refs(wrapper)
  expression_pass = expressions.ExpressionPass(refs, reduced.line)
  module = wrapper.visit(expression_pass)
  findings_pass = findings.FindingsPass(expression_pass.converted_tf_names,
                                        reduced.line)
  wrapper.visit(findings_pass)
  getter_pass = getters.GetterPass(reduced.line)
  wrapper.visit(getter_pass)
  environment_pass = environment.EnvironmentPass(reduced.line)
  wrapper.visit(environment_pass)
  openseq2seq_pass = openseq2seq.OpenSeq2SeqPass(reduced.line)
  if scalers.mentions(data):  # The pass visits every name: only if needed.
    wrapper.visit(openseq2seq_pass)
  module = imports.rewrite_imports(module, reduced.names_left_out())
  if expression_pass.needed:
    module = new_imports.add(module, expression_pass.needed, refs)
  found = (set(expression_pass.findings) | set(findings_pass.findings) |
           set(getter_pass.findings) | set(environment_pass.findings) |
           set(openseq2seq_pass.findings))
  return reduced.restore(module.code), sorted(found, key=lambda f: (f.line, f.reason))
