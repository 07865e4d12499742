"""Only the parts of a module that can matter are given to libcst.

libcst builds tens of Python objects per token and its metadata passes walk
all of them, so a multi-megabyte module costs minutes and gigabytes, nearly
all of it for code that has nothing to do with mixed precision. `Reduced`
cuts the module into its top-level statements with Python's tokenizer (one
pass, little memory) and stands a one-line placeholder in for each function
and class that spells no name the codemod looks for. Everything else stays:
imports, module-level assignments (aliases such as `v1 = tf.compat.v1`),
`if`/`try` blocks, the first statement (with the file's header comments).
After conversion the placeholders are swapped back for the original text,
byte for byte, and line numbers are mapped back to the original file.

A placeholder is a bare name, so what it stands for can change nothing the
passes decide elsewhere: it defines no import, alias or package name. (A
function or class named like an import, `def tf(): ...`, and that spells no
mixed-precision name, is the one thing not seen.)
"""

import ast
import bisect
import io
import re
import tokenize
from typing import List, Tuple

from mp_optimizer.migrate import names

# What a function or class must spell to be parsed: the file filter's legacy
# spellings, the library's own names (a converted file, run again), contrib's
# private members, NVIDIA's environment variables, and OpenSeq2Seq's loss
# scaling (its scalers, its optimizer wrapper, `optimize_loss`, configs).
_RELEVANT = re.compile(
    r"mixed_precision|LossScale|experimental|getter|mp_optimizer|managers|"
    r"get_loss_scale|TF_ENABLE_AUTO_MIXED_PRECISION|import|Scaler|"
    r"loss_scaling|MixedPrecisionOptimizerWrapper|optimize_loss|\.(?:" +
    "|".join(sorted(names.LEGACY_PRIVATE)) + r")\b")
_DEFINITIONS = ("def", "class", "async", "@")


def _starts(source: str) -> List[Tuple[int, str]]:
  """(line, first token) of each top-level statement; decorators joined.

  Raises:
    tokenize.TokenError, SyntaxError: If the source does not tokenize.
  """
  starts: List[Tuple[int, str]] = []
  depth, at_start, decorated = 0, True, False
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    kind = token.type
    if kind == tokenize.INDENT:
      depth += 1
    elif kind == tokenize.DEDENT:
      depth -= 1
    elif kind == tokenize.NEWLINE:
      at_start = True
    elif kind in (tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER):
      continue
    elif at_start:
      at_start = False
      if depth == 0 and not decorated:
        starts.append((token.start[0], token.string))
      if depth == 0:
        decorated = token.string == "@"
  return starts


class Reduced:
  """A module's source with irrelevant definitions replaced by placeholders.

  Args:
    source: The module's source.

  Attributes:
    source: What to parse: `source` itself when nothing could be left out.
  """

  def __init__(self, source: str):
    self.source = source
    self._chunks: List[str] = []
    # Sorted line numbers in `self.source` where each piece starts, and the
    # line of the original file each starts at.
    self._reduced_lines: List[int] = [1]
    self._original_lines: List[int] = [1]
    try:
      starts = _starts(source)
    except (tokenize.TokenError, SyntaxError):
      return  # libcst reports the error, with its line.
    lines = source.splitlines(keepends=True)
    bounds = [line for line, _ in starts[1:]] + [len(lines) + 1]
    pieces, left_out = [], False
    self._nonce = _nonce(source)
    self._reduced_lines, self._original_lines = [], []
    reduced_line = 1
    for (start, token), end in zip([(1, "")] + starts[1:], bounds):
      text = "".join(lines[start - 1:end - 1])
      self._reduced_lines.append(reduced_line)
      self._original_lines.append(start)
      if (token in _DEFINITIONS and not _RELEVANT.search(text) and
          _compiles(text)):
        self._chunks.append(text)
        pieces.append(f"{self._nonce}{len(self._chunks) - 1}__\n")
        reduced_line += 1
        left_out = True
      else:
        pieces.append(text)
        reduced_line += end - start
    if left_out:
      self.source = "".join(pieces)
    else:
      self._chunks, self._reduced_lines, self._original_lines = [], [1], [1]

  def line(self, reduced_line: int) -> int:
    """The original file's line for a line of `source`."""
    index = bisect.bisect_right(self._reduced_lines, reduced_line) - 1
    return self._original_lines[index] + reduced_line - self._reduced_lines[
        index]

  def restore(self, code: str) -> str:
    """`code` (converted `source`) with the left-out text put back."""
    if not self._chunks:
      return code
    return re.sub(rf"^{self._nonce}(\d+)__\r?\n",
                  lambda match: self._chunks[int(match.group(1))], code,
                  flags=re.MULTILINE)


def _compiles(text: str) -> bool:
  """Whether `text` is valid Python; what is not goes to libcst, which says
  where it is wrong."""
  try:
    compile(text, "<definition>", "exec", ast.PyCF_ONLY_AST)
  except (SyntaxError, ValueError):
    return False
  return True


def _nonce(source: str) -> str:
  """A name prefix that `source` does not contain."""
  prefix = "__mp_optimizer_migrate_left_out_"
  while prefix in source:
    prefix += "_"
  return prefix
