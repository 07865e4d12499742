"""Unified diffs of big files in time linear in their size.

`difflib.unified_diff` matches whole files with `SequenceMatcher`, whose
longest-match search takes time that grows with the square of a long file's
repeated lines (a 5 MB module: minutes). The codemod changes few lines, so
`unified` first pairs the lines that occur once in each version, in order,
and lets `SequenceMatcher` match only the short stretches between them. The
output has difflib's format (three lines of context, `@@ -a,b +c,d @@`).
"""

import collections
import difflib
from typing import List, Sequence, Tuple

Opcode = Tuple[str, int, int, int, int]


def _anchors(old: Sequence[str], new: Sequence[str]) -> List[Tuple[int, int]]:
  """Pairs (i, j) of lines unique in both, equal, increasing in i and j."""
  in_old, in_new = collections.Counter(old), collections.Counter(new)
  where = {line: j for j, line in enumerate(new) if in_new[line] == 1}
  anchors, last = [], -1
  for i, line in enumerate(old):
    j = where.get(line, -1) if in_old[line] == 1 else -1
    if j > last:
      anchors.append((i, j))
      last = j
  return anchors


def _opcodes(old: Sequence[str], new: Sequence[str]) -> List[Opcode]:
  """SequenceMatcher's opcodes for `old` -> `new`, anchored on unique lines."""
  codes: List[Opcode] = []
  i0 = j0 = 0
  for i, j in _anchors(old, new) + [(len(old), len(new))]:
    matcher = difflib.SequenceMatcher(None, old[i0:i], new[j0:j],
                                      autojunk=False)
    for tag, a1, a2, b1, b2 in matcher.get_opcodes():
      codes.append((tag, i0 + a1, i0 + a2, j0 + b1, j0 + b2))
    if i < len(old):
      codes.append(("equal", i, i + 1, j, j + 1))
    i0, j0 = i + 1, j + 1
  return _merged(codes)


def _merged(codes: List[Opcode]) -> List[Opcode]:
  """Adjacent opcodes of one kind (equal, or changed) joined, as difflib has."""
  out: List[Opcode] = []
  for tag, i1, i2, j1, j2 in codes:
    if i1 == i2 and j1 == j2:
      continue
    if out and (out[-1][0] == "equal") == (tag == "equal"):
      _, a1, _, b1, _ = out.pop()
      i1, j1 = a1, b1
    if tag != "equal":
      tag = ("replace" if i1 < i2 and j1 < j2 else
             "delete" if i1 < i2 else "insert")
    out.append((tag, i1, i2, j1, j2))
  return out


def _range(start: int, stop: int) -> str:
  """A hunk's `start,length` the way difflib writes it."""
  length = stop - start
  if length == 1:
    return str(start + 1)
  return f"{start + 1 if length else start},{length}"


def unified(old: Sequence[str], new: Sequence[str], path: str) -> List[str]:
  """The unified diff of `old` -> `new` (lines with their ends), as lines.

  Args:
    old: The file's lines before.
    new: The file's lines after.
    path: The name on the `---`/`+++` lines.

  Returns:
    The diff's lines (each ending as its source line did; empty if equal).
  """
  matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
  matcher.opcodes = _opcodes(old, new)  # What get_opcodes() returns.
  out: List[str] = []
  for group in matcher.get_grouped_opcodes(3):
    if not out:
      out += [f"--- {path}\n", f"+++ {path}\n"]
    (_, i1, _, j1, _), (_, _, i2, _, j2) = group[0], group[-1]
    out.append(f"@@ -{_range(i1, i2)} +{_range(j1, j2)} @@\n")
    for tag, a1, a2, b1, b2 in group:
      if tag == "equal":
        out += [" " + line for line in old[a1:a2]]
        continue
      out += ["-" + line for line in old[a1:a2]]
      out += ["+" + line for line in new[b1:b2]]
  return out
