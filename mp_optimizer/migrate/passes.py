"""A pass over one parsed module, and what it reports.

Every pass of the codemod is a libcst visitor (it reads the tree) or
transformer (it rewrites it) that derives from `ReportingPass` too, which
holds what each of them needs: the `Conversion` it takes part in, the
`Finding`s it collects, a `resolve.Resolver` to ask what a node refers to
and which line of the file it is on, and `_report`. `codemod.PASSES` lists
the passes a module goes through, in order; `horovod` and `precision` use
the same base for their own passes.
"""

import dataclasses
from typing import Callable, ClassVar, Dict, List, Optional, Set, Tuple

import libcst as cst
from libcst import metadata

from mp_optimizer.migrate import resolve


@dataclasses.dataclass(frozen=True)
class Finding:
  """Something a human has to look at, or a notice to read.

  Attributes:
    line: The line of the input it is on (1-based).
    reason: What is wrong and, where there is one, what to do instead; one
      line (code quoted from several lines is joined with single spaces).
    needs_human: True for a finding (the code may not do what it did); False
      for a notice: the converted code works, with a documented difference
      that the reason spells out with the way to keep the old behaviour.
  """
  line: int
  reason: str
  needs_human: bool = True

  def __post_init__(self):
    object.__setattr__(self, "reason", " ".join(self.reason.split()))


def _same_line(line: int) -> int:
  return line


@dataclasses.dataclass
class Conversion:
  """One module's conversion: what its passes read, and tell each other.

  Attributes:
    data: The file's bytes (for filters that need no tree).
    lines: Maps a parsed line to the file's line (the parsed source may
      leave parts of the file out: `chunks.Reduced`).
    refs: The names the file reaches the `mp_optimizer` and `managers`
      packages by (`resolve.package_refs`).
    needed: The packages (keys of `refs`) the rewritten code refers to;
      written by the expression pass, read by `new_imports`.
    converted_tf_names: Whether one of TensorFlow's own loss-scale or
      graph-rewrite names was converted (by the expression pass or, for a
      bare name, by the import pass); written by the expression pass, read
      by the findings pass.
    converted_legacy_names: Whether any legacy name in use was converted
      (the file now scales its loss with this library); written by the
      expression pass, read by `savers`.
  """
  data: bytes = b""
  lines: Callable[[int], int] = _same_line
  refs: Dict[str, str] = dataclasses.field(
      default_factory=lambda: {p: p for p in resolve.PACKAGES})
  needed: Set[str] = dataclasses.field(default_factory=set)
  converted_tf_names: bool = False
  converted_legacy_names: bool = False


class ReportingPass:
  """The base of every pass: a `Conversion`, its findings, a `Resolver`.

  A pass derives from this class first, then from `cst.CSTVisitor` or
  `cst.CSTTransformer`. One that asks `self._resolve` what a name refers to
  declares `resolve.METADATA_DEPENDENCIES`; the default (positions only)
  is all `_report` needs.

  Args:
    conversion: The conversion this pass takes part in (a new one with the
      file's own lines if None).

  Attributes:
    findings: What this pass reported, in the order it did.
  """

  METADATA_DEPENDENCIES: ClassVar[Tuple[type, ...]] = (
      metadata.PositionProvider,)

  def __init__(self, conversion: Optional[Conversion] = None):
    super().__init__()
    self.conversion = conversion if conversion is not None else Conversion()
    self.findings: List[Finding] = []
    self._resolve = resolve.Resolver(self.get_metadata,
                                     self.conversion.lines)

  @classmethod
  def applies_to(cls, conversion: Conversion) -> bool:
    """Whether the module of `conversion` needs this pass (default: yes)."""
    del conversion  # Every module needs it, unless a pass says otherwise.
    return True

  def _finding(self, node: cst.CSTNode, reason: str,
               needs_human: bool = True) -> Finding:
    """A finding (or, with `needs_human=False`, a notice) at `node`'s line."""
    return Finding(self._resolve.line(node), reason, needs_human)

  def _report(self, node: cst.CSTNode, reason: str,
              needs_human: bool = True) -> None:
    """Reports a finding (or a notice) at `node`'s line."""
    self.findings.append(self._finding(node, reason, needs_human))
