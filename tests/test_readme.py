"""The README's examples run as written, and its names exist.

Every ```python block that imports tensorflow is a complete program: it runs
in a fresh interpreter (a subprocess, because programs call
`disable_eager_execution()`), from a temporary directory. Where the README
shows what a program prints (a ```text block right after it, introduced by a
line starting "It prints"), the output must be exactly that. Every other
```python block must say in its first line that it is a fragment.
"""

import pathlib
import re
import subprocess
import sys

from absl.testing import parameterized

from mp_optimizer import managers
import mp_optimizer

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
TEXT = README.read_text()
# (program, the output shown after it or None)
PROGRAMS = [(code, shown or None) for code, shown in re.findall(
    r"```python\n(.*?)```\n(?:\nIt prints[^\n]*\n\n```text\n(.*?)```)?", TEXT, re.S)
            if "import tensorflow" in code]
FRAGMENT = "# fragment"


class ReadmeTest(parameterized.TestCase):

  def test_the_two_setup_commands_come_first(self):
    first_block = re.search(r"```\n(.*?)```", TEXT, re.S).group(1)
    self.assertIn("make demo", first_block)
    self.assertIn("make test", first_block)

  def test_contents_list_every_section_in_order(self):
    contents = TEXT[TEXT.index("## Contents\n"):TEXT.index("## Why\n")]
    listed = re.findall(r"^( *)- \[(.+)\]\(#([^)]+)\)$", contents, re.M)
    headings = re.findall(r"^(##|###) (.+)$", TEXT, re.M)
    headings = [(level, title) for level, title in headings
                if title != "Contents"]
    self.assertEqual([(indent == "", title) for indent, title, _ in listed],
                     [(level == "##", title) for level, title in headings])
    for _, title, anchor in listed:
      # GitHub's anchors: lower case, punctuation dropped, spaces to dashes.
      expected = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
      self.assertEqual(anchor, expected)

  def test_there_are_programs_to_run(self):
    self.assertNotEmpty(PROGRAMS)

  def test_some_program_shows_its_output(self):
    self.assertNotEmpty([shown for _, shown in PROGRAMS if shown])

  def test_every_other_python_block_is_marked_as_a_fragment(self):
    for code in re.findall(r"```python\n(.*?)```", TEXT, re.S):
      if "import tensorflow" not in code:
        self.assertTrue(code.lstrip().startswith(FRAGMENT), code[:200])

  @parameterized.parameters(*[(i,) for i in range(len(PROGRAMS))])
  def test_program_runs(self, index):
    code, shown = PROGRAMS[index]
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True,
        text=True, timeout=600, cwd=self.create_tempdir().full_path,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin",
             "PYTHONPATH": str(README.parent)})
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    if shown is not None:
      self.assertEqual(result.stdout, shown)

  def test_documented_names_exist(self):
    for name in re.findall(r"`mp_optimizer\.(\w+)", TEXT):
      self.assertTrue(hasattr(mp_optimizer, name), name)
    for name in re.findall(r"`managers\.(\w+)", TEXT):
      self.assertTrue(hasattr(managers, name), name)
