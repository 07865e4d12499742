"""What the codemod refuses to parse: too much, too deep, too repetitive.

After `chunks.Reduced` has left out what cannot matter, libcst still parses
the rest whole, and three shapes of it cost more than the input's size
(measured by `benchmarks/codemod_shapes.py`):

* size: libcst takes about a kilobyte of memory per character of source,
  and on dense code up to a millisecond (100 KB of `;`-joined statements:
  90 s on a busy 2-core machine);
* nesting: libcst's native parser takes time that grows faster than the
  length of a long `+` chain or `elif` chain (2,000 terms: seconds; 8,000:
  a crash), and its visitors recurse once per level;
* repeated assignments: libcst's scope analysis relates each use of a name
  to every earlier assignment of it in the same scope (`x = f(x)` 10,000
  times: 10**8 pairs).

A file past one of these limits is left as it is and reported
(`too_large`), so that the command's cost stays linear in its input.
"""

import collections
import re
from typing import Optional

from mp_optimizer.migrate import chunks
from mp_optimizer.migrate import passes

# Characters of source given to libcst.
MAX_PARSED = 60_000
# libcst tree levels (`statements.LogicalLine.nesting`).
MAX_NESTING = 200
# Pairs of (assignment, use) of one name, summed over names assigned more
# than once.
MAX_PAIRS = 500_000
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_WHAT = ("the codemod leaves this file as it is: convert it by hand, or "
         "split the code that uses mixed-precision names into smaller "
         "functions and run again")


def too_deep(line: int, nesting: Optional[int]) -> passes.Finding:
  """The finding for code nested deeper than libcst can take.

  Args:
    line: Where (1 if not known).
    nesting: How deep it nests, if known.
  """
  levels = f"{nesting} levels deep" if nesting else "deeper than libcst can go"
  return passes.Finding(line, (
      f"too deep to convert safely: the statement here nests {levels} "
      "(blocks, `elif` chains, brackets, chains of operators such as "
      f"`a + b + ...`), more than {MAX_NESTING}; {_WHAT}"))


def too_large(reduced: chunks.Reduced) -> Optional[passes.Finding]:
  """The finding for a file that is too large or deep to convert safely.

  Args:
    reduced: The file's source, reduced to what libcst would parse.

  Returns:
    A finding, or None if the file may be parsed.
  """
  kept = [reduced.lines[i] for i in reduced.kept]
  deepest = max(kept, key=lambda line: line.nesting, default=None)
  if deepest is not None and deepest.nesting > MAX_NESTING:
    return too_deep(deepest.start, deepest.nesting)
  size = len(reduced.source)
  if size > MAX_PARSED:
    return passes.Finding(1, (
        f"too large to convert safely: {size:,} characters of it would have "
        "to be parsed (the statements that spell a mixed-precision name and "
        f"what they use), more than {MAX_PARSED:,}; {_WHAT}"))
  bindings = collections.Counter(name for line in kept for name in line.bound)
  repeated = {name: count for name, count in bindings.items() if count > 1}
  if not repeated:
    return None
  uses = collections.Counter(name for name in _IDENTIFIER.findall(
      reduced.source) if name in repeated)
  pairs = sum(count * uses[name] for name, count in repeated.items())
  if pairs > MAX_PAIRS:
    name = max(repeated, key=lambda n: repeated[n] * uses[n])
    return passes.Finding(1, (
        f"too repetitive to convert safely: names assigned again and again "
        f"(`{name}` {repeated[name]:,} times) and used as often give "
        f"{pairs:,} pairs of assignment and use to relate, more than "
        f"{MAX_PAIRS:,}; {_WHAT}"))
  return None
