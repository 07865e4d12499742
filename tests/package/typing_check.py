"""What users' type checkers see: mypy --strict and pyright on user scripts.

`make test-package` copies this file (as `test_typing.py`) and README.md into
an empty directory and runs it there, against the installed wheel and the
TensorFlow stubs (`types-tensorflow`). Checked:

* every complete program of the README, and a script that touches every
  public name, pass `mypy --strict` and pyright (basedpyright in pyright's
  "standard" mode) with no error;
* a misspelt public name is an error for both;
* the signals and the scale are typed (a `Tensor`, never `Any`).
"""

import pathlib
import re
import subprocess
import sys
import textwrap

from absl import flags
from absl.testing import parameterized

import mp_optimizer
from mp_optimizer import managers

flags.FLAGS.mark_as_parsed()
HERE = pathlib.Path(__file__).resolve().parent
README = (HERE / "README.md").read_text(encoding="utf-8")
PROGRAMS = [code for code in re.findall(r"```python\n(.*?)```", README, re.S)
            if not code.lstrip().startswith("# fragment")]


def _every_public_name() -> str:
  lines = ["import mp_optimizer", "from mp_optimizer import managers", ""]
  lines += [f"print(mp_optimizer.{name})" for name in mp_optimizer.__all__]
  lines += [f"print(managers.{name})" for name in managers.__all__]
  return "\n".join(lines) + "\n"


_SIGNALS = textwrap.dedent("""\
    import mp_optimizer
    from mp_optimizer import managers
    reveal_type(mp_optimizer.step_applied())
    reveal_type(mp_optimizer.skipped_steps())
    reveal_type(mp_optimizer.signals.loss_scale())
    reveal_type(managers.all_finite([]))
    """)


def mypy(folder: pathlib.Path, *files: str) -> subprocess.CompletedProcess:
  return subprocess.run(
      [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
       "--no-error-summary", *files], cwd=folder, capture_output=True,
      text=True, check=False)


def pyright(folder: pathlib.Path, *files: str) -> subprocess.CompletedProcess:
  (folder / "pyrightconfig.json").write_text(
      '{"typeCheckingMode": "standard"}')
  return subprocess.run(
      [str(pathlib.Path(sys.executable).parent / "basedpyright"),
       "--pythonpath", sys.executable, *files], cwd=folder,
      capture_output=True, text=True, check=False)


class TypeCheckersTest(parameterized.TestCase):

  def _folder(self, files) -> pathlib.Path:
    folder = pathlib.Path(self.create_tempdir().full_path)
    for name, text in files.items():
      (folder / name).write_text(text)
    return folder

  def test_the_readme_has_programs(self):
    self.assertNotEmpty(PROGRAMS)

  @parameterized.named_parameters(("mypy", mypy), ("pyright", pyright))
  def test_user_scripts_pass(self, check):
    files = {f"readme_{i}.py": code for i, code in enumerate(PROGRAMS)}
    files["every_public_name.py"] = _every_public_name()
    result = check(self._folder(files), *files)
    self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

  @parameterized.named_parameters(("mypy", mypy), ("pyright", pyright))
  def test_a_misspelt_public_name_is_an_error(self, check):
    files = {"typo.py": "import mp_optimizer\n"
                        "print(mp_optimizer.LossScaleOptimizr)\n"}
    result = check(self._folder(files), "typo.py")
    self.assertNotEqual(result.returncode, 0)
    self.assertIn("LossScaleOptimizr", result.stdout)

  @parameterized.named_parameters(("mypy", mypy), ("pyright", pyright))
  def test_signals_are_tensors_not_any(self, check):
    result = check(self._folder({"signals.py": _SIGNALS}), "signals.py")
    revealed = [line for line in result.stdout.splitlines()
                if "reveal" in line.lower() or "Type of" in line]
    self.assertLen(revealed, 4, result.stdout + result.stderr)
    for line in revealed:
      self.assertIn("Tensor", line)
      self.assertNotIn("Any", line)
      self.assertNotIn("Unknown", line)
