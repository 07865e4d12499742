"""The package's metadata says what is true of it.

Python classifiers name exactly the version the test suite runs on; the
licence is an SPDX expression with a copyright line in LICENSE; the
`examples` extra installs what examples/ imports besides TensorFlow; the
long description (README.md as setup.py turns it for a package index) starts
with pip, not with make.
"""

import importlib.util
import pathlib
import re
import sys
import tomllib

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _project():
  return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


class MetadataTest(absltest.TestCase):

  def test_python_classifiers_are_the_version_tested(self):
    versions = [c.rsplit(" :: ", 1)[1] for c in _project()["classifiers"]
                if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    self.assertEqual(versions, [f"3.{sys.version_info.minor}"])

  def test_licence_expression_and_copyright_line(self):
    self.assertEqual(_project()["license"], "Apache-2.0")
    first = (ROOT / "LICENSE").read_text().splitlines()[0]
    self.assertRegex(first, r"^Copyright \d{4} \S")

  def test_examples_extra_installs_what_the_examples_import(self):
    extra = {re.split(r"[<>=!~ ]", r)[0]
             for r in _project()["optional-dependencies"]["examples"]}
    self.assertEqual(extra, {"scikit-learn", "matplotlib", "tensorboard"})
    imported = set()
    for path in (ROOT / "examples").glob("*.py"):
      imported |= set(re.findall(r"^(?:from|import) (sklearn|matplotlib)\b",
                                 path.read_text(), re.M))
    self.assertEqual(imported, {"sklearn", "matplotlib"})

  def test_long_description_starts_with_pip_install(self):
    spec = importlib.util.spec_from_file_location("setup", ROOT / "setup.py")
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)
    text = setup.long_description((ROOT / "README.md").read_text())
    first_block = re.search(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S).group(1)
    self.assertIn("pip install", first_block)
    self.assertNotIn("make ", text[:text.index("## Development")])


if __name__ == "__main__":
  absltest.main()
