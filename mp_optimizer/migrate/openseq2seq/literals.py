"""Literal values in the source: numbers, strings, dicts of them.

What a literal says can be read without running the file: a number (with
`+ - * / **` and signs, as in `2.**15`), a string, a dict display or
`dict(...)` call with string keys. Anything else is not a literal: None.
"""

from typing import Callable, Optional

import libcst as cst

from mp_optimizer.migrate.openseq2seq import equivalents
from mp_optimizer.migrate.resolve import source_text

_OPERATORS = {cst.Add: lambda a, b: a + b, cst.Subtract: lambda a, b: a - b,
              cst.Multiply: lambda a, b: a * b, cst.Divide: lambda a, b: a / b,
              cst.Power: lambda a, b: a ** b}


def number(node: cst.BaseExpression) -> Optional[float]:
  """The value of a numeric literal (with + - * / ** and signs), or None."""
  if isinstance(node, (cst.Integer, cst.Float)):
    return float(node.evaluated_value)
  if isinstance(node, cst.UnaryOperation) and isinstance(
      node.operator, (cst.Minus, cst.Plus)):
    value = number(node.expression)
    sign = -1 if isinstance(node.operator, cst.Minus) else 1
    return None if value is None else sign * value
  if isinstance(node, cst.BinaryOperation) and type(
      node.operator) in _OPERATORS:
    left, right = number(node.left), number(node.right)
    if left is None or right is None or (
        isinstance(node.operator, cst.Power) and abs(right) > 1024):
      return None
    try:
      return float(_OPERATORS[type(node.operator)](left, right))
    except (ArithmeticError, ValueError, TypeError):  # Complex: TypeError.
      return None
  return None


def string(node: cst.BaseExpression) -> Optional[str]:
  """The value of a string literal, or None."""
  if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
    value = node.evaluated_value
    return value if isinstance(value, str) else None
  return None


def shown(node: cst.CSTNode) -> str:
  """`node`'s source text on one line."""
  return " ".join(source_text(node).split())


def params(node: Optional[cst.BaseExpression],
           is_dict: Callable[[cst.BaseExpression], bool]
           ) -> equivalents.Params:
  """A params dict as written: {} for none (absent, or None), None if it
  is not a literal.

  Args:
    node: The expression, or None if there is none.
    is_dict: Whether a callee is the builtin `dict`.
  """
  if node is None or (isinstance(node, cst.Name) and node.value == "None"):
    return {}
  if isinstance(node, cst.Dict):
    pairs = [(string(e.key), e.value) for e in node.elements
             if isinstance(e, cst.DictElement)]
    if len(pairs) < len(node.elements):
      return None  # `**other`.
  elif isinstance(node, cst.Call) and is_dict(node.func):
    pairs = [(a.keyword.value if a.keyword else None, a.value)
             for a in node.args]
  else:
    return None
  if any(key is None for key, _ in pairs):
    return None
  return {key: equivalents.Value(shown(value), number(value))
          for key, value in pairs}
