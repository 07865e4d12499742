"""The README is short, and its first screen is enough to start.

What it must hold, in order: what the project is, how to install it with
pip, the line that changes for contrib users and for users of TF's built-in,
one complete example with its output, the demo's picture and table, links
into docs/, and the development commands last. Its programs, outputs, links
and names are checked with the pages of docs/ in `tests/test_docs.py`; the
demo's table in `tests/test_demo_report.py`.
"""

import re

from absl.testing import absltest

from tests.support import markdown_pages

TEXT = markdown_pages.README.read_text(encoding="utf-8")
LINES = TEXT.splitlines()
FIRST_SCREEN = "\n".join(LINES[:50])
SECTIONS = ["Install", "Convert a script", "Example",
            "The effect, on a real dataset", "Documentation", "Development",
            "Licence", "Background"]


class ReadmeTest(absltest.TestCase):

  def test_is_short(self):
    self.assertLessEqual(len(LINES), 220)

  def test_sections_in_the_order_a_user_needs_them(self):
    self.assertEqual(re.findall(r"^## (.+)$", TEXT, re.M), SECTIONS)

  def test_first_screen_installs_and_converts_a_contrib_script(self):
    self.assertIn("pip install .", FIRST_SCREEN)
    self.assertIn('pip install ".[tensorflow-cpu]"', FIRST_SCREEN)
    self.assertIn("from mp_optimizer import contrib as mixed_precision",
                  FIRST_SCREEN)
    self.assertIn("mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, \"dynamic\")",
                  FIRST_SCREEN)

  def test_pip_comes_first_and_make_only_for_contributors(self):
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", TEXT, re.M | re.S)
    self.assertIn("pip install", blocks[0])
    development = TEXT.index("## Development\n")
    for match in re.finditer(r"^```[^\n]*\n(.*?)^```", TEXT, re.M | re.S):
      if re.search(r"(?m)^make ", match.group(1)):
        self.assertGreater(match.start(), development)

  def test_one_example_with_its_output(self):
    programs = markdown_pages.Page(markdown_pages.README, TEXT).programs()
    self.assertLen(programs, 1)
    self.assertIsNotNone(programs[0][1])

  def test_links_into_every_guide_and_api_page(self):
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)\)", TEXT))
    pages = {str(page.path.relative_to(markdown_pages.ROOT))
             for page in markdown_pages.doc_pages()}
    # The site's copies of BENCHMARKS.md and CHANGELOG.md are not needed:
    # the README names those files themselves.
    self.assertEmpty(pages - linked - {"docs/benchmarks.md",
                                       "docs/changelog.md"})

  def test_shows_the_demo_picture(self):
    self.assertIn("](docs/digits_demo.png)", TEXT)


if __name__ == "__main__":
  absltest.main()
