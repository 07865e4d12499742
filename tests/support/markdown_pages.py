"""The Markdown the project publishes, read the way the tests need it.

The pages are README.md and every `.md` file under docs/ (the sources of the
documentation site that `make docs` builds with MkDocs). Only files that
ship in the source distribution are read when this module is imported, so
the sdist's test suite still collects.

A Python block is a program unless its first line says `# fragment`. A
program's output is the `text` block that follows it when the paragraph in
between starts with "It prints".
"""

import dataclasses
import pathlib
import re
import unicodedata
from typing import Dict, List, Optional, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MKDOCS_YML = ROOT / "mkdocs.yml"
FRAGMENT = "# fragment"

_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
# A program, then a paragraph starting "It prints" (no fence inside), then
# the `text` block it introduces.
_PROGRAM_AND_OUTPUT = re.compile(
    r"^```python\n(.*?)^```[ \t]*\n\n(?:It prints(?:(?!```).)*?\n\n```text\n(.*?)^```)?",
    re.M | re.S)
# [text](target) and ![alt](target); the target stops at a space or ")".
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# [text][identifier]: a cross-reference to an API object (mkdocs-autorefs).
# A backtick starts only the inline-code alternative: were it also a plain
# character, a long run of `` (the prose blanks inline code so) would be
# split every possible way before the match fails (30 s over the docs).
_AUTOREF = re.compile(r"\[(?:[^\[\]`]|`[^`]*`)+\]\[([A-Za-z_][\w.]*)\]")
_DIRECTIVE = re.compile(r"^::: ([\w.]+)", re.M)


@dataclasses.dataclass(frozen=True)
class Page:
  path: pathlib.Path
  text: str

  @property
  def name(self) -> str:
    return str(self.path.relative_to(ROOT))

  def prose(self) -> str:
    """The text with fenced blocks and inline code blanked out."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), self.text)
    return re.sub(r"`[^`\n]*`", "``", text)

  def python_blocks(self) -> List[str]:
    return [body for lang, body in _FENCE.findall(self.text)
            if lang.strip() == "python"]

  def programs(self) -> List[Tuple[str, Optional[str]]]:
    """(code, the output shown after it or None) for every program."""
    return [(code, shown if shown else None)
            for code, shown in _PROGRAM_AND_OUTPUT.findall(self.text)
            if not code.lstrip().startswith(FRAGMENT)]

  def shown_outputs(self) -> int:
    """How many `text` blocks are introduced by "It prints"."""
    return len(re.findall(r"^It prints(?:(?!```).)*?\n\n```text\n",
                          self.text, re.M | re.S))

  def links(self) -> List[str]:
    return _LINK.findall(self.prose())

  def autorefs(self) -> List[str]:
    return _AUTOREF.findall(self.prose())

  def directives(self) -> List[str]:
    return _DIRECTIVE.findall(self.text)

  def headings(self) -> List[str]:
    return [title.strip() for title in
            re.findall(r"^#{1,6} (.+)$", _FENCE.sub("", self.text), re.M)]


def pages() -> List[Page]:
  paths = [README, *sorted(DOCS.rglob("*.md"))]
  return [Page(path, path.read_text(encoding="utf-8")) for path in paths]


def doc_pages() -> List[Page]:
  return [page for page in pages() if page.path != README]


def toc_slug(title: str) -> str:
  """The anchor MkDocs (Python-Markdown's `toc`) gives a heading."""
  text = re.sub(r"`([^`]*)`", r"\1", title)
  text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
  text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
  text = re.sub(r"[^\w\s-]", "", text).strip().lower()
  return re.sub(r"[-\s]+", "-", text)


def github_slug(title: str) -> str:
  """The anchor GitHub gives a heading of a Markdown file."""
  text = re.sub(r"`([^`]*)`", r"\1", title).lower()
  return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Page) -> set:
  """The anchors a link to `page` may name."""
  slug = github_slug if page.path == README else toc_slug
  found: Dict[str, int] = {}
  result = set()
  for title in page.headings():
    base = slug(title)
    count = found.get(base, 0)
    found[base] = count + 1
    result.add(base if count == 0 else f"{base}_{count}")
  # mkdocstrings gives each documented object its identifier as anchor.
  result.update(page.directives())
  return result


def nav_pages() -> List[str]:
  """The pages mkdocs.yml's nav lists, relative to docs/."""
  return re.findall(r":\s+(\S+\.md)\s*$", MKDOCS_YML.read_text(), re.M)
