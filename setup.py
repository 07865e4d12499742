"""Builds `mp_optimizer` (with `managers/` as `mp_optimizer.managers`).

The metadata and the package layout are in pyproject.toml.

Only the long description is made here: README.md links to files beside it
(`[BENCHMARKS.md](BENCHMARKS.md)`), which would be dead links on a package
index. They are turned into plain text that names the file, which ships in
the source distribution.
"""

import pathlib
import re

import setuptools

_README = (pathlib.Path(__file__).parent / "README.md").read_text(encoding="utf-8")
# A link or image whose target has no URL scheme and is not an in-page anchor.
_RELATIVE_LINK = re.compile(
    r"(!?)\[([^\]]+)\]\((?![a-z][a-z0-9+.-]*:|#)([^)\s]+)\)")


def long_description(readme: str) -> str:
  """Returns `readme` with relative links turned into `text (file in the sdist)`.

  An image becomes its description and the file it is in.
  """
  def plain(match):
    image, text, target = match.groups()
    if image:
      return f"*Figure: {text}* (`{target}` in the source distribution)"
    if text == target or text.strip("`") == target:
      return f"`{target}` (in the source distribution)"
    return f"{text} (`{target}` in the source distribution)"
  return _RELATIVE_LINK.sub(plain, readme)


if __name__ == "__main__":
  setuptools.setup(long_description=long_description(_README),
                   long_description_content_type="text/markdown")
