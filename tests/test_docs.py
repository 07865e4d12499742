"""README.md and docs/: their programs run, their links hold, their names exist.

Every Python block is a complete program unless its first line says
`# fragment`. Each program runs in a fresh interpreter (programs call
`disable_eager_execution()`), from an empty temporary directory, with this
checkout first on the path. Where a page shows what a program prints, the
output must be exactly that.

Links between the pages (and to files of the repository, from the README)
must reach a file and, when they name one, an anchor the page has on the
documentation site. `[text][identifier]` cross-references must name an
object the API reference documents. Every public name must be in the API
reference, and the pages may name only public objects.
"""

import importlib
import os
import re
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized
import pytest

import mp_optimizer
from mp_optimizer import contrib
from mp_optimizer import managers
from mp_optimizer import signals
from tests.support import markdown_pages

PAGES = markdown_pages.pages()
PROGRAMS = [(page.name, code, shown) for page in PAGES
            for code, shown in page.programs()]
# Public modules besides those in `mp_optimizer.__all__`, and which of their
# names are public (None: every name without a leading underscore).
OTHER_PUBLIC = {"nvidia_environment": None, "overflow": {"OverflowReport"},
                "migrate": None, "horovod": None}


def _resolve(dotted: str):
  """The object `dotted` names: the longest importable module, then attributes."""
  parts = dotted.split(".")
  for split in range(len(parts), 0, -1):
    try:
      value = importlib.import_module(".".join(parts[:split]))
    except ImportError:
      continue
    for part in parts[split:]:
      value = getattr(value, part)
    return value
  raise ImportError(dotted)


def _public_reason(dotted: str):
  """None if `dotted` (mp_optimizer.X...) is public, else why it is not."""
  parts = dotted.split(".")
  if any(part.startswith("_") for part in parts):
    return "a private name"
  if len(parts) == 1 or parts[1] in mp_optimizer.__all__:
    return None
  if parts[1] not in OTHER_PUBLIC:
    return f"mp_optimizer.{parts[1]} is not a public module"
  allowed = OTHER_PUBLIC[parts[1]]
  if allowed is not None and len(parts) > 2 and parts[2] not in allowed:
    return f"only {sorted(allowed)} of mp_optimizer.{parts[1]} are public"
  return None


def _directives():
  return {name for page in markdown_pages.doc_pages()
          for name in page.directives()}


@pytest.mark.long_run
class ProgramsTest(parameterized.TestCase):

  def test_there_are_programs_and_shown_outputs(self):
    self.assertGreaterEqual(len(PROGRAMS), 5)
    self.assertGreaterEqual(len([1 for _, _, shown in PROGRAMS if shown]), 5)

  def test_every_shown_output_follows_a_program(self):
    for page in PAGES:
      shown = len([1 for _, output in page.programs() if output])
      self.assertEqual(shown, page.shown_outputs(), page.name)

  def test_every_python_block_is_a_program_or_a_marked_fragment(self):
    for page in PAGES:
      programs = [code for code, _ in page.programs()]
      for code in page.python_blocks():
        if not code.lstrip().startswith(markdown_pages.FRAGMENT):
          self.assertIn(code, programs,
                        f"{page.name}: a program that is not followed by a "
                        f"blank line: {code[:200]}")

  @parameterized.named_parameters(
      (f"{i}_{name.replace('/', '_').replace('.', '_')}", i)
      for i, (name, _, _) in enumerate(PROGRAMS))
  def test_program_runs_and_prints_what_is_shown(self, index):
    name, code, shown = PROGRAMS[index]
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin",
           "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": str(markdown_pages.ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        timeout=300, cwd=self.create_tempdir().full_path, env=env, check=False)
    self.assertEqual(result.returncode, 0, f"{name}:\n{result.stderr[-3000:]}")
    if shown is not None:
      self.assertEqual(result.stdout, shown, name)


class LinksTest(parameterized.TestCase):

  @parameterized.named_parameters((page.name, page) for page in PAGES)
  def test_links_reach_a_file_and_anchor(self, page):
    by_path = {p.path: p for p in PAGES}
    for target in page.links():
      if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
        continue
      path, _, anchor = target.partition("#")
      resolved = (page.path if not path else
                  (page.path.parent / path).resolve())
      self.assertTrue(resolved.exists(), f"{page.name}: {target}")
      if page.path != markdown_pages.README:
        # MkDocs serves only what is under docs/.
        self.assertTrue(resolved.is_relative_to(markdown_pages.DOCS),
                        f"{page.name}: {target} leaves docs/")
      if anchor:
        self.assertIn(resolved, by_path, f"{page.name}: {target}")
        self.assertIn(anchor, markdown_pages.anchors(by_path[resolved]),
                      f"{page.name}: {target}")

  def test_cross_references_name_documented_objects(self):
    documented = _directives()
    for page in PAGES:
      for identifier in page.autorefs():
        _resolve(identifier)
        owner = identifier
        while owner not in documented and "." in owner:
          owner = owner.rsplit(".", 1)[0]
        self.assertIn(owner, documented, f"{page.name}: [{identifier}]")

  def test_the_nav_lists_every_page_once(self):
    listed = markdown_pages.nav_pages()
    self.assertCountEqual(
        listed, [str(page.path.relative_to(markdown_pages.DOCS))
                 for page in markdown_pages.doc_pages()])


class NamesTest(absltest.TestCase):

  def test_every_public_name_is_in_the_api_reference(self):
    documented = _directives()
    wanted = {f"mp_optimizer.{name}" for name in mp_optimizer.__all__
              if name not in ("contrib", "managers", "signals", "overflow")}
    wanted |= {f"mp_optimizer.managers.{name}" for name in managers.__all__}
    wanted |= {"mp_optimizer.signals", "mp_optimizer.contrib",
               "mp_optimizer.nvidia_environment",
               "mp_optimizer.overflow.OverflowReport"}
    self.assertEmpty(wanted - documented)
    self.assertEmpty({name for name in documented if _public_reason(name)})

  def test_contribs_names_are_objects_documented_under_their_own_names(self):
    for name in contrib.__all__:
      self.assertIs(getattr(contrib, name),
                    getattr(mp_optimizer, name, getattr(managers, name, None)))

  def test_the_signals_page_documents_the_module_with_its_members(self):
    page, = [p for p in PAGES if p.name == os.path.join("docs", "api", "signals.md")]
    self.assertIn("mp_optimizer.signals", page.directives())
    self.assertNotIn("members: false", page.text)
    self.assertTrue(callable(signals.optimizer_names))

  def test_names_on_the_pages_exist_and_are_public(self):
    for page in PAGES:
      for dotted in set(re.findall(r"(?<![/\w-])mp_optimizer(?:\.(?!md\b)[A-Za-z_]\w*)+",
                                   page.text)):
        self.assertIsNone(_public_reason(dotted), f"{page.name}: {dotted}")
        try:
          _resolve(dotted)
        except (ImportError, AttributeError) as error:
          self.fail(f"{page.name}: {dotted}: {error}")

  def test_managers_are_imported_from_mp_optimizer(self):
    for page in PAGES:
      for code in page.python_blocks():
        self.assertNotRegex(code, r"(?m)^\s*(import managers|from managers\b)",
                            page.name)

  def test_managers_names_on_the_pages_exist(self):
    for page in PAGES:
      for name in re.findall(r"(?<![\w./])managers\.(?!md\b)([A-Za-z_]\w*)", page.text):
        self.assertTrue(hasattr(managers, name), f"{page.name}: managers.{name}")


if __name__ == "__main__":
  absltest.main()
