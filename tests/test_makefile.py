"""The Makefile does what README's Development section says of it.

Read with `make -n` (print the commands, run none), so nothing is built.
"""

import os
import pathlib
import re
import subprocess
import sys
import textwrap

from absl.testing import absltest
from absl.testing import parameterized

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _dry_run(*args: str) -> str:
  return subprocess.run(["make", "-n", "--no-print-directory", *args],
                        cwd=ROOT, capture_output=True, text=True,
                        check=True).stdout


def _pytest_lines(commands: str):
  commands = re.sub(r"\\\n\s*", "", commands)  # One line per command.
  return [line for line in commands.splitlines() if "-m pytest" in line]


class MakefileTest(parameterized.TestCase):

  def test_check_runs_the_suite_on_the_newest_tensorflow_only(self):
    lines = _pytest_lines(_dry_run("check"))
    self.assertLen(lines, 1, lines)
    self.assertRegex(lines[0], r"\.venv/tf2\.21/bin/python -m pytest tests ")

  def test_each_suite_runs_in_two_processes(self):
    lines = _pytest_lines(_dry_run("test-2.21", "test-2.15"))
    self.assertLen(lines, 2, lines)
    for line in lines:
      self.assertRegex(line, r" -n 2 --dist loadscope")
    requirements = [(ROOT / "requirements" / f"tf{v}.txt").read_text()
                    for v in ("2.21", "2.15")]
    for text in requirements:
      self.assertRegex(text, r"(?m)^pytest-xdist==")

  def test_environments_are_built_side_by_side_before_the_parts(self):
    first = re.sub(r"\\\n\s*", "", _dry_run("test")).splitlines()[0]
    self.assertRegex(first, r"make .*-j 2 ")
    for environment in ("tf2.21", "tf2.15", "package", "docs"):
      self.assertIn(f".venv/{environment}/.ready", first)
    self.assertLess(first.index(".ready"), first.index("for part in"))

  def test_demo_and_benchmark_runs_are_left_to_the_newest_version(self):
    newest, oldest = (_pytest_lines(_dry_run(f"test-{version}"))[0]
                      for version in ("2.21", "2.15"))
    self.assertNotIn("--ignore", newest)
    ignored = re.findall(r"--ignore=(\S+)", oldest)
    self.assertEqual(ignored, ["tests/test_demo.py",
                               "tests/benchmarks/test_smoke.py"])
    for path in ignored:
      self.assertTrue((ROOT / path).is_file(), path)
    # The targets those files test run on the newest version only.
    for target in ("demo", "bench"):
      for line in _dry_run(target).splitlines():
        if "bin/python" in line:
          self.assertIn(".venv/tf2.21/bin/python", line)

  def _run_with_suite_options(self, module: str, conftest: bool = False):
    """Runs `module` (a test file's text) with the suites' pytest-xdist
    options, and with tests/conftest.py if `conftest`; each test appends
    `note(what)` lines to a log. Returns [(what, pid)] in the log's order."""
    line = _pytest_lines(_dry_run("test-2.21"))[0]
    options = re.search(r" (-n 2 --dist .*?) --durations", line).group(1)
    folder = pathlib.Path(self.create_tempdir().full_path)
    log = folder / "log.txt"
    (folder / "test_shared.py").write_text(textwrap.dedent(f"""
        import os
        import unittest

        import pytest

        def note(what):
          with open({str(log)!r}, "a") as f:
            f.write(f"{{what}} {{os.getpid()}}\\n")
        """) + textwrap.dedent(module))
    if conftest:
      (folder / "conftest.py").write_text(
          (ROOT / "tests" / "conftest.py").read_text())
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         *options.split(), "test_shared.py"], cwd=folder, capture_output=True,
        text=True, check=False, env=dict(os.environ, PYTHONPATH=""))
    self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
    return [tuple(entry.split()) for entry in log.read_text().splitlines()]

  def test_a_class_set_up_once_runs_in_one_process(self):
    """With the suites' own pytest-xdist options, a class's tests share one
    process, so its setUpClass (a cluster, a demo run) runs once."""
    notes = self._run_with_suite_options(
        "\nclass Shared(unittest.TestCase):\n"
        "  @classmethod\n  def setUpClass(cls):\n    note('setup')\n" +
        "".join(f"  def test_{i}(self):\n    note('shared')\n"
                for i in range(6)) +
        "\nclass Other(unittest.TestCase):\n" +
        "".join(f"  def test_{i}(self):\n    note('other')\n"
                for i in range(6)))
    self.assertEqual([what for what, _ in notes].count("setup"), 1, notes)
    shared = {pid for what, pid in notes if what in ("setup", "shared")}
    self.assertLen(shared, 1, notes)
    self.assertLen({pid for _, pid in notes}, 2, notes)  # Two processes ran.

  def test_each_process_starts_with_a_long_class(self):
    """Classes marked `long_run` run first though collected last and with
    fewer tests (xdist's own reorder would run the biggest classes first)."""
    short = "".join(
        f"\nclass Short{k}(unittest.TestCase):\n" +
        "".join(f"  def test_{i}(self):\n    note('short')\n"
                for i in range(6)) for k in range(2))
    long = "".join(
        f"\n@pytest.mark.long_run\nclass Long{k}(unittest.TestCase):\n"
        "  def test_it(self):\n    note('long')\n" for k in range(2))
    notes = self._run_with_suite_options(short + long, conftest=True)
    first = {}
    for what, pid in notes:
      first.setdefault(pid, what)
    self.assertEqual(sorted(first.values()), ["long", "long"], notes)

  @parameterized.named_parameters(
      ("a_folder", ["TESTS=tests/managers"], r"-m pytest tests/managers -q"),
      ("pytest_flags", ["PYTEST_ARGS=-k amax"], r"-m pytest tests -q .* -k amax"),
      ("one_process", ["JOBS=0"], r"-m pytest tests -q .* -n 0 "))
  def test_check_narrows(self, args, pattern):
    lines = _pytest_lines(_dry_run("check", *args))
    self.assertLen(lines, 1, lines)
    self.assertRegex(lines[0], pattern)

  def test_wheel_environment_installs_no_second_tensorflow(self):
    requirements = (ROOT / "requirements" / "package.txt").read_text()
    self.assertNotRegex(requirements, r"(?im)^(-r|tensorflow)")
    # It reads the newest TensorFlow's environment through a .pth file.
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile[makefile.index("$(VENV)/package/.ready:"):]
    recipe = recipe[:recipe.index("\n\n")]
    self.assertIn("$(VENV)/tf$(NEWEST)/.ready", recipe.splitlines()[0])
    self.assertRegex(recipe, r"zz_tf\$\(NEWEST\)\.pth")

  def test_readme_names_each_development_target(self):
    readme = (ROOT / "README.md").read_text()
    development = readme[readme.index("## Development"):]
    targets = set(re.findall(r"(?m)^make ([\w-]+)", development))
    self.assertTrue({"test", "check", "demo"} <= targets, targets)
    for target in targets:
      self.assertTrue(_dry_run(target).strip(), target)


if __name__ == "__main__":
  absltest.main()
