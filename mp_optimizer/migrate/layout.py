"""Continuation lines re-aligned when a call's callee gets shorter.

    manager = tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(a,
                                                                           b)
becomes
    manager = managers.ExponentialUpdateLossScaleManager(a,
                                                         b)

Only calls whose continuation lines were aligned with their opening bracket
move; a hanging indent (`f(\\n    a, b)`) has nothing to follow.
"""

import libcst as cst


class _Shift(cst.CSTTransformer):
  """Moves lines that start at `column` or further left by `delta` columns.

  libcst keeps the indentation of the enclosing block (`indent` wide) out of
  a line's whitespace when the line's `indent` flag is set.
  """

  def __init__(self, column: int, delta: int, indent: int):
    super().__init__()
    self._column, self._delta, self._indent = column, delta, indent

  def _moved(self, whitespace: cst.SimpleWhitespace,
             indented: bool) -> cst.SimpleWhitespace:
    value = whitespace.value
    start = len(value) + (self._indent if indented else 0)
    if start < self._column or value.strip(" ") or len(value) < self._delta:
      return whitespace
    return whitespace.with_changes(value=" " * (len(value) - self._delta))

  def leave_ParenthesizedWhitespace(self, original, updated):
    return updated.with_changes(
        last_line=self._moved(updated.last_line, updated.indent))

  def leave_EmptyLine(self, original, updated):
    if not updated.comment:
      return updated
    return updated.with_changes(
        whitespace=self._moved(updated.whitespace, updated.indent))


def realign(original: cst.Call, updated: cst.Call, bracket_column: int,
            indent: int) -> cst.Call:
  """Returns `updated` with its bracket-aligned lines moved with its callee.

  Args:
    original: The call as written.
    updated: The call with its callee (and arguments) rewritten.
    bracket_column: The 0-based column of `original`'s opening bracket.
    indent: The indentation of the block the call's statement is in.
  """
  code = cst.Module([]).code_for_node
  delta = len(code(original.func)) - len(code(updated.func))
  if delta <= 0:
    return updated
  shift = _Shift(bracket_column + 1, delta, indent)  # Where aligned lines start.
  return updated.with_changes(
      whitespace_before_args=updated.whitespace_before_args.visit(shift),
      args=[arg.visit(shift) for arg in updated.args])
