"""A module's statements, read with Python's tokenizer in one pass.

`chunks.Reduced` decides, statement by statement, what libcst has to parse;
`logical_lines` gives it what that takes (and `group`/`blocks` the
statements and blocks they form), in time and memory linear in the
source: where each logical line starts, how deep it is indented, its first
token, the names it may bind, the names whose private attributes it reads,
and how deeply libcst's tree will nest there (`nesting`).

`nesting` estimates the depth of libcst's tree at a line, from above: one
level per enclosing block and per `elif` before it in its `if` statement
(libcst nests each `elif` in the one before), one per open bracket, one per
operator (`+`, `and`, `if`, ...) or implicitly joined string since the
last `,`, `:` or `=` of the same bracket (libcst nests `a + b + c` as
`(a + b) + c`), and one per trailer (`.x`, a call, a subscript) since the
last operator. A flat list of a million items nests 2 deep; `x0 + x1 + ... +
x999` 1,000 deep.
"""

import dataclasses
import io
import keyword
import tokenize
from typing import List, Set, Tuple

_OPENING, _CLOSING = "([{", ")]}"
# Tokens after which `(` or `[` is a call or a subscript, not a new value.
_TRAILED = (tokenize.NAME, tokenize.STRING, tokenize.NUMBER)
_SEPARATORS = frozenset({",", ";", ":", "=", ":=", "->"})
_ASSIGNMENTS = frozenset({"=", "+=", "-=", "*=", "/=", "//=", "%=", "**=",
                          "@=", "&=", "|=", "^=", ">>=", "<<="})
_LINKING_KEYWORDS = frozenset({"and", "or", "not", "in", "is", "if", "else",
                               "lambda", "await"})
# Statements whose every name may be one they bind.
_BINDING_STATEMENTS = frozenset({"import", "from", "global", "nonlocal", "del",
                                 "case"})
CONTINUATIONS = frozenset({"elif", "else", "except", "finally"})
Span = Tuple[int, int]  # Indices of logical lines: [start, stop).


@dataclasses.dataclass
class LogicalLine:
  """One logical line (a statement, or a compound statement's clause header).

  Attributes:
    start: Its first line (1-based).
    depth: How many blocks hold it (0 at module level).
    first: Its first token (`def`, `@`, `elif`, a name...).
    nesting: The deepest libcst's tree goes on it (see the module docstring).
    bound: The names it may bind (assignment and `for` targets, `as`
      names, `def`/`class` names, imports, `global`...): a superset.
    private_owners: Names it reads a private attribute of (`opt._x`).
  """
  start: int
  depth: int
  first: str
  nesting: int = 0
  bound: Set[str] = dataclasses.field(default_factory=set)
  private_owners: Set[str] = dataclasses.field(default_factory=set)


class _Line:
  """The state of the logical line being read."""

  def __init__(self, token: tokenize.TokenInfo, depth: int, blocks: int):
    self.line = LogicalLine(token.start[0], depth, token.string)
    self.blocks = blocks  # Enclosing blocks and `elif`s.
    # Per level (outside brackets, then each open bracket): [operators
    # since the last separator, trailers since the last operator].
    self.levels: List[List[int]] = [[0, 0]]
    self.total = 0  # Their sum over every level.
    self.previous: tokenize.TokenInfo = token
    # Names outside brackets since the last separator: [name, may be bound].
    self.names: List[list] = []
    self.owner = None  # The name before the last `.`.
    self.binding = token.string in ("def", "class")  # The next name binds.
    self.for_target = False  # Between `for` and `in`.
    # A simple statement: `x: int = 1` binds the names before its `:`.
    self.simple = not keyword.iskeyword(token.string)

  def _link(self, trailer: bool = False) -> None:
    """One more level: an operator, or a trailer (`.x`, a call, a subscript),
    which nests in the operand it follows, not in the operators before it."""
    level = self.levels[-1]
    if not trailer:
      self.total -= level[1]
      level[1] = 0
    level[trailer] += 1
    self.total += 1
    self._deepest()

  def _deepest(self) -> None:
    self.line.nesting = max(self.line.nesting,
                            self.blocks + len(self.levels) - 1 + self.total)

  def _reset(self) -> None:
    self.total -= sum(self.levels[-1])
    self.levels[-1] = [0, 0]

  def add(self, token: tokenize.TokenInfo) -> None:
    """Takes in the next token of the line (not NL or COMMENT)."""
    kind = token.type
    if kind == tokenize.NAME:
      self._name(token)
    elif kind == tokenize.OP:
      self._operator(token)
    elif kind == tokenize.STRING and self.previous.type == tokenize.STRING:
      self._link()  # Implicitly joined strings nest.
    self.previous = token

  def _name(self, token: tokenize.TokenInfo) -> None:
    text, previous = token.string, self.previous
    if keyword.iskeyword(text):
      if text in _LINKING_KEYWORDS:
        self._link()
      if text == "for":
        self.for_target = True
      elif text == "in":
        self.for_target = False
      return
    if self.binding or self.for_target or previous.string == "as" or (
        self.line.first in _BINDING_STATEMENTS):
      self.line.bound.add(text)
    if previous.string == "." and text.startswith("_") and self.owner:
      self.line.private_owners.add(self.owner)
    self.binding = False
    if len(self.levels) == 1:
      self.names.append([token, True])

  def _operator(self, token: tokenize.TokenInfo) -> None:
    text, previous = token.string, self.previous
    if text in "([{." and self.names and self.names[-1][0] is previous:
      self.names[-1][1] = False  # `a.b`, `a(...)`, `a[...]`: not `a`.
    if text in _OPENING:
      if (previous.type in _TRAILED and not keyword.iskeyword(
          previous.string)) or previous.string in _CLOSING:
        self._link(trailer=True)
      self.levels.append([0, 0])
      self._deepest()
    elif text in _CLOSING:
      if len(self.levels) > 1:
        self.total -= sum(self.levels.pop())
    elif text in _SEPARATORS or text in _ASSIGNMENTS:
      if len(self.levels) == 1:
        if text in _ASSIGNMENTS or text == ":" and self.simple:
          self.line.bound.update(
              name.string for name, target in self.names if target)
        self.names = []
      if text == ":=":
        self.line.bound.add(previous.string)
      self._reset()
    else:
      self._link(trailer=text == ".")
      if text == "." and previous.type == tokenize.NAME:
        self.owner = previous.string


def logical_lines(source: str) -> List[LogicalLine]:
  """The logical lines of `source`, in order.

  Raises:
    tokenize.TokenError, SyntaxError: If the source does not tokenize. The
      lines read before the error are in the exception's `lines` attribute.
  """
  lines: List[LogicalLine] = []
  depth = 0
  elifs: List[int] = [0]  # Per depth: `elif`s so far in its `if` statement.
  current = None
  try:
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
      kind = token.type
      if kind == tokenize.INDENT:
        depth += 1
        elifs.append(0)
      elif kind == tokenize.DEDENT:
        depth -= 1
        elifs.pop()
      elif kind == tokenize.NEWLINE:
        if current is not None:
          lines.append(current.line)
        current = None
      elif kind in (tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER):
        continue
      elif current is None:
        if token.string == "elif":
          elifs[-1] += 1
        elif token.string not in CONTINUATIONS:
          elifs[-1] = 0
        current = _Line(token, depth, depth + sum(elifs))
        current.line.nesting = current.blocks
        current.add(token)
      else:
        current.add(token)
  except (tokenize.TokenError, SyntaxError) as e:
    if current is not None:
      lines.append(current.line)
    e.lines = lines
    raise
  return lines


def group(lines: List[LogicalLine], start: int, stop: int) -> List[Span]:
  """The statements among lines [start, stop) of one block: each with its
  decorators, its other clauses (`elif`, `except`...) and its blocks."""
  units, index = [], start
  while index < stop:
    first, depth = index, lines[index].depth
    while lines[index].first == "@" and index + 1 < stop and (
        lines[index + 1].depth == depth):
      index += 1
    index += 1
    while index < stop and (lines[index].depth > depth or (
        lines[index].first in CONTINUATIONS and
        lines[index].depth == depth)):
      index += 1
    units.append((first, index))
  return units


def blocks(lines: List[LogicalLine], start: int, stop: int) -> List[Span]:
  """The blocks of the compound statement at lines [start, stop)."""
  found, depth, index = [], lines[start].depth, start
  while index < stop:
    if lines[index].depth > depth:
      first = index
      while index < stop and lines[index].depth > depth:
        index += 1
      found.append((first, index))
    else:
      index += 1
  return found
