"""`convert()`: one module's source through the passes, in order.

0. `mentions.might_use_legacy`: a source that spells no legacy name is
   returned as it is, unparsed; `chunks.Reduced` leaves out the statements
   that cannot matter; `limits.too_large`: what is left is parsed only if it
   is small and shallow enough to convert in time linear in the file's size
   (else the file is returned as it is, with a finding).
1. `resolve.package_refs`: the names `mp_optimizer` and `managers` will go by.
2. `PASSES`, each on the parsed tree, each a `passes.ReportingPass` that
   shares the module's `passes.Conversion` with the others:
   `expressions.ExpressionPass` rewrites dotted legacy references (the one
   pass that rewrites: a `cst.CSTTransformer`; the tree it returns goes on
   to step 3); `findings.FindingsPass` reports what no rewrite can fix;
   `getters.GetterPass` gives hand-written float32 getters a notice;
   `environment.EnvironmentPass` reports NVIDIA's container variables, set
   to switch mixed precision on; `openseq2seq.places.OpenSeq2SeqPass`
   reports OpenSeq2Seq's loss scaling, with the manager that does the same
   (in a file that may use it: its `applies_to`).
3. `savers.rewrite`, in a module where a legacy name was converted:
   TensorFlow's `Saver` becomes `mp_optimizer.Saver`, and a session, spec
   or scaffold that builds a default Saver gets a notice.
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
from mp_optimizer.migrate import mentions
from mp_optimizer.migrate import new_imports
from mp_optimizer.migrate import passes
from mp_optimizer.migrate import resolve
from mp_optimizer.migrate import savers
from mp_optimizer.migrate.openseq2seq import places as openseq2seq

# In order: a pass reads what the ones before it wrote to the `Conversion`.
PASSES = (
    expressions.ExpressionPass,
    findings.FindingsPass,
    getters.GetterPass,
    environment.EnvironmentPass,
    openseq2seq.OpenSeq2SeqPass,
)


def convert(source: str) -> Tuple[str, List[passes.Finding]]:
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
  if not mentions.might_use_legacy(data):
    return source, []  # Nothing to convert or report: not even parsed.
  reduced = chunks.Reduced(source)
  refused = limits.too_large(reduced)
  if refused is not None:
    return source, [refused]
  try:
    return _convert(data, reduced)
  except RecursionError:  # Deeper than `limits` could tell.
    return source, [limits.too_deep(1, None)]


def _convert(data: bytes, reduced: chunks.Reduced
             ) -> Tuple[str, List[passes.Finding]]:
  """`convert` for a source small and shallow enough to parse."""
  # The tree is ours alone: no need for the wrapper's defensive deep copy.
  wrapper = metadata.MetadataWrapper(cst.parse_module(reduced.source),
                                     unsafe_skip_copy=True)
  conversion = passes.Conversion(data, reduced.line,
                                 resolve.package_refs(wrapper))
  module, found = wrapper.module, set()
  for kind in PASSES:
    if not kind.applies_to(conversion):
      continue
    visitor = kind(conversion)
    visited = wrapper.visit(visitor)
    if isinstance(visitor, cst.CSTTransformer):
      module = visited
    found.update(visitor.findings)
  if conversion.converted_legacy_names:
    module, saver_findings = savers.rewrite(module, conversion)
    found.update(saver_findings)
  module = imports.rewrite_imports(module, reduced.names_left_out())
  if conversion.needed:
    module = new_imports.add(module, conversion.needed, conversion.refs)
  return reduced.restore(module.code), sorted(
      found, key=lambda f: (f.line, f.reason))
