"""Only the statements of a module that can matter are given to libcst.

libcst builds tens of Python objects per token, its metadata passes walk all
of them, and its scope analysis relates each use of a name to every earlier
assignment of it in the same scope, so a multi-megabyte module costs minutes
and gigabytes, nearly all of it for code that has nothing to do with mixed
precision. `Reduced` reads the module's statements with Python's tokenizer
(`statements.logical_lines`: one pass, little memory) and stands a one-line
placeholder in for each statement, at any depth, that the passes cannot
need: one that spells no name the codemod looks for (`mentions.STATEMENT`),
binds no name that the statements kept spell, and reads no private
attribute of such a name.
Statements that spell one are kept, and a compound one (a function, class,
`if`, `with`...) keeps its clause headers while each statement of its
blocks is judged the same way; a function shaped like a float32 getter is
kept whole (its notice reads all of it). The module's first statement (with
the file's header comments) and imports always stay. After conversion the
placeholders are swapped back for the original text, byte for byte, and
line numbers are mapped back to the original file.

A placeholder is a bare name, so what it stands for can change nothing the
passes decide elsewhere: it defines no import, alias or package name. Text
is left out only if Python compiles it (inside an `async def` for a nested
statement), so a syntax error still reaches libcst, which reports it.
"""

import bisect
import re
import tokenize
from typing import Callable, List, Set, Tuple

from mp_optimizer.migrate import mentions
from mp_optimizer.migrate import statements

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_Span = statements.Span


class Reduced:
  """A module's source with the statements that cannot matter left out.

  Args:
    source: The module's source.

  Attributes:
    source: What to parse: `source` itself when nothing could be left out.
    lines: The logical lines of `source` (all of them, also those left out;
      those read before a tokenizer error if it has one).
    kept: The logical lines `source` keeps (indices into `lines`).
  """

  def __init__(self, source: str):
    self.source = source
    self._chunks: List[str] = []
    # Sorted line numbers in `self.source` where each piece starts, and the
    # line of the original file each starts at.
    self._reduced_lines, self._original_lines = [1], [1]
    try:
      self.lines = statements.logical_lines(source)
    except (tokenize.TokenError, SyntaxError) as e:
      self.lines = e.lines  # libcst reports the error, with its line.
      self.kept = range(len(self.lines))
      return
    self.kept = range(len(self.lines))
    if any(line.depth > _MAX_BLOCKS for line in self.lines):
      return  # Too deep to walk (and to parse: `limits` says so).
    self._text = source.splitlines(keepends=True)
    self._offsets = [0]
    for text in self._text:
      self._offsets.append(self._offsets[-1] + len(text))
    self._matches = [m.start() for m in mentions.STATEMENT.finditer(source)]
    self._nonce = _nonce(source)
    # Pass 1: the statements that spell a relevant name, and what they spell.
    spelled: Set[str] = set()
    self._assigned: Set[str] = set()  # What the statements kept may bind.
    candidates = self._relevant(
        statements.group(self.lines, 0, len(self.lines)), spelled, top=True)
    # Pass 2: the others that bind (or read a private attribute of) one of
    # those names; then those that bind a name these spell (`cls = ...;
    # opt = cls()`).
    for _ in range(2):
      for span in [s for s in candidates if self._needs(s, spelled)]:
        spelled.update(_IDENTIFIER.findall(self._span_text(span)))
    left_out = []
    # Compiled in runs of statements of one block, a run at a time (one
    # `compile` call per statement would cost more than the tokenizer), each
    # statement of a run that does not compile on its own.
    for run in _merged(self.lines, [
        span for span in candidates
        if not self._needs(span, spelled)], self._size, _COMPILED_AT_ONCE):
      if self._compiles(run):
        left_out.append(run)
      else:
        left_out += [span for span in statements.group(self.lines, *run)
                     if self._compiles(span)]
    if left_out:
      self._build(left_out)

  # Deciding ------------------------------------------------------------------

  def _line_range(self, span: _Span) -> Tuple[int, int]:
    """The file lines [first, stop) of the logical lines in `span`."""
    start, stop = span
    first = 1 if start == 0 else self.lines[start].start
    last = (self.lines[stop].start if stop < len(self.lines) else
            len(self._text) + 1)
    return first, last

  def _size(self, span: _Span) -> int:
    first, last = self._line_range(span)
    return self._offsets[last - 1] - self._offsets[first - 1]

  def _span_text(self, span: _Span) -> str:
    first, last = self._line_range(span)
    return "".join(self._text[first - 1:last - 1])

  def _spells(self, first: int, last: int) -> bool:
    """Whether file lines [first, last) spell a relevant name."""
    start, stop = self._offsets[first - 1], self._offsets[last - 1]
    index = bisect.bisect_left(self._matches, start)
    return index < len(self._matches) and self._matches[index] < stop

  def _relevant(self, units: List[_Span], spelled: Set[str],
                top: bool = False) -> List[_Span]:
    """Pass 1: the statements of `units` (and, in those kept, of their
    blocks) that spell no relevant name; adds to `spelled` what the kept
    ones spell."""
    left_out: List[_Span] = []
    for start, stop in units:
      first, last = self._line_range((start, stop))
      if not (top and start == 0) and not self._spells(first, last):
        left_out.append((start, stop))
        continue
      blocks = statements.blocks(self.lines, start, stop)
      if (top and start == 0) or not blocks or mentions.GETTER.match(
          self.source, self._offsets[first - 1]):
        spelled.update(_IDENTIFIER.findall(self._span_text((start, stop))))
        for line in self.lines[start:stop]:
          self._assigned.update(line.bound)
        continue  # Kept whole.
      for i in range(start, stop):  # Its clauses' headers, if relevant.
        if self.lines[i].depth == self.lines[start].depth:
          first, last = self._line_range((i, i + 1))
          if self._spells(first, last):
            spelled.update(_IDENTIFIER.findall(self._span_text((i, i + 1))))
            self._assigned.update(self.lines[i].bound)
      for block in blocks:
        left_out += self._relevant(statements.group(self.lines, *block),
                                   spelled)
    return left_out

  def _needs(self, span: _Span, spelled: Set[str]) -> bool:
    """Whether a statement left out so far binds a name the kept ones
    spell (in its own scope: not inside a function or class it defines,
    but for `global`), or reads a private attribute of a name they bind."""
    inner = None  # The depth of the function or class being skipped.
    for line in self.lines[span[0]:span[1]]:
      if inner is not None and line.depth <= inner:
        inner = None
      if not self._assigned.isdisjoint(line.private_owners) or (
          (inner is None or line.first in ("global", "nonlocal")) and
          not spelled.isdisjoint(line.bound)):
        return True
      if inner is None and line.first in ("def", "class"):
        inner = line.depth
    return False

  def _compiles(self, span: _Span) -> bool:
    """Whether Python compiles the statement; what it does not goes to
    libcst, which says where it is wrong."""
    text = self._span_text(span)
    if self.lines[span[0]].depth:
      text = "async def _():\n" + text
    try:
      compile(text, "<statement>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
      return False
    return True

  # Building ------------------------------------------------------------------

  def _build(self, left_out: List[_Span]) -> None:
    pieces, kept = [], set(range(len(self.lines)))
    reduced_line, at = 1, 1
    for span in _merged(self.lines, left_out, self._size, len(self.source)):
      first, last = self._line_range(span)
      pieces.append("".join(self._text[at - 1:first - 1]))
      reduced_line += first - at
      self._reduced_lines.append(reduced_line)
      self._original_lines.append(first)
      text = "".join(self._text[first - 1:last - 1])
      indent = text[:len(text) - len(text.lstrip(" \t\f"))]
      self._chunks.append(text)
      pieces.append(f"{indent}{self._nonce}{len(self._chunks) - 1}__\n")
      reduced_line += 1
      self._reduced_lines.append(reduced_line)
      self._original_lines.append(last)
      kept.difference_update(range(*span))
      at = last
    pieces.append("".join(self._text[at - 1:]))
    self.source = "".join(pieces)
    self.kept = sorted(kept)

  def names_left_out(self) -> Set[str]:
    """The identifiers the text left out spells (in code, strings or
    comments: a superset of the names its code uses)."""
    return {name for chunk in self._chunks
            for name in _IDENTIFIER.findall(chunk)}

  def line(self, reduced_line: int) -> int:
    """The original file's line for a line of `source`."""
    index = bisect.bisect_right(self._reduced_lines, reduced_line) - 1
    return self._original_lines[index] + reduced_line - self._reduced_lines[
        index]

  def restore(self, code: str) -> str:
    """`code` (converted `source`) with the left-out text put back."""
    if not self._chunks:
      return code
    return re.sub(rf"^[ \t\f]*{self._nonce}(\d+)__\r?\n",
                  lambda match: self._chunks[int(match.group(1))], code,
                  flags=re.MULTILINE)


# Deeper blocks than this are not walked (`limits.MAX_NESTING`: reported).
_MAX_BLOCKS = 200
# Characters of left-out statements compiled in one call.
_COMPILED_AT_ONCE = 65_536


def _merged(lines: List[statements.LogicalLine], spans: List[_Span],
            size: Callable[[_Span], int], most: int) -> List[_Span]:
  """`spans` in order, those that follow each other in one block joined up
  to `most` characters (by `size`)."""
  out: List[_Span] = []
  for start, stop in sorted(spans):
    if out and out[-1][1] == start and (
        lines[out[-1][0]].depth == lines[start].depth) and (
            size((out[-1][0], stop)) <= most):
      start = out.pop()[0]
    out.append((start, stop))
  return out


def _nonce(source: str) -> str:
  """A name prefix that `source` does not contain."""
  prefix = "__mp_optimizer_migrate_left_out_"
  while prefix in source:
    prefix += "_"
  return prefix
