"""Every benchmark runs: one tiny round each, as `make bench` would call it.

Each runner is started as a script in a fresh interpreter with its smallest
settings, writing its report into a temporary folder; only its exit status
and output are checked, never a timing.
"""

import os
import pathlib
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized
import pytest

from benchmarks import codemod_shapes

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.long_run
class SmokeTest(parameterized.TestCase):

  def _run(self, script, *args):
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=self.create_tempdir().full_path, capture_output=True, text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), check=False)
    self.assertEqual(run.returncode, 0, run.stderr[-3000:])
    return run.stdout

  def test_overhead_writes_every_section(self):
    output = os.path.join(self.create_tempdir().full_path, "BENCHMARKS.md")
    self._run("overhead.py", "--smoke", "--minutes", "0.01",
              "--output", output)
    text = pathlib.Path(output).read_text(encoding="utf-8")
    for heading in ("## Results", "## Targets",
                    "## The floors: what holding the updates back costs",
                    "## The scale update's mutex",
                    "## Under XLA", "## Method"):
      self.assertIn(heading, text)

  def test_scaling_keeps_the_rest_of_the_file(self):
    folder = self.create_tempdir().full_path
    output = os.path.join(folder, "BENCHMARKS.md")
    pathlib.Path(output).write_text("# Kept\n", encoding="utf-8")
    plot = os.path.join(folder, "scaling.png")
    self._run("scaling.py", "--smoke", "--sizes", "3", "--inners", "sgd,adam",
              "--seconds", "0", "--output", output, "--plot", plot)
    text = pathlib.Path(output).read_text(encoding="utf-8")
    self.assertTrue(text.startswith("# Kept\n"))
    self.assertIn("## Growth with the number of variables", text)
    self.assertGreater(os.path.getsize(plot), 0)

  def _section_twice(self, script, heading):
    """Runs `script` twice on a file with a head and the scaling marker;
    returns the text, after checking the section sits once, between them."""
    folder = self.create_tempdir().full_path
    output = os.path.join(folder, "BENCHMARKS.md")
    pathlib.Path(output).write_text(
        "# Head\n\n<!-- scaling: written by benchmarks/scaling.py -->\ntail\n",
        encoding="utf-8")
    for _ in range(2):  # The second run replaces the first's section.
      printed = self._run(script, "--smoke", "--seconds", "0", "--output",
                          output)
    self.assertIn("interleaved rounds", printed)
    text = pathlib.Path(output).read_text(encoding="utf-8")
    self.assertEqual(text.count(heading), 1)
    self.assertLess(text.index("# Head"), text.index(heading))
    self.assertLess(text.index(heading), text.index("<!-- scaling: written"))
    return text

  def test_options_section_between_the_others(self):
    text = self._section_twice("options.py",
                               "## Opt-in options: clean-step cost")
    for label in ("precision_telemetry=True", "first_nonfinite_op=True",
                  "overflow_report=True"):
      self.assertIn(label, text)

  def test_horovod_loopback_section_before_the_scaling_one(self):
    output = os.path.join(self.create_tempdir().full_path, "BENCHMARKS.md")
    pathlib.Path(output).write_text(
        "# Head\n\n<!-- scaling: written by benchmarks/scaling.py -->\n",
        encoding="utf-8")
    self._run("horovod_loopback.py", "--smoke", "--steps", "2", "--output",
              output)
    text = pathlib.Path(output).read_text(encoding="utf-8")
    self.assertLess(text.index("## Two processes on loopback"),
                    text.index("<!-- scaling: written"))
    for label in ("| one process |", "| 2 ranks, each alone |",
                  "| 2 ranks, hvd.DistributedOptimizer |",
                  "| 2 workers, MultiWorkerMirroredStrategy |"):
      self.assertIn(label, text)

  def test_bfloat16_section_with_the_cpu(self):
    text = self._section_twice("bfloat16.py", "## bfloat16 vs float32")
    self.assertIn("bfloat16 flags: ", text)
    for label in ("float32 (reference)", "oneDNN bfloat16 rewrite",
                  "bfloat16 model, float32 master weights"):
      self.assertIn(label, text)

  def test_check_readings_section_before_the_scaling_one(self):
    output = os.path.join(self.create_tempdir().full_path, "BENCHMARKS.md")
    pathlib.Path(output).write_text(
        "# Head\n\n<!-- scaling: written by benchmarks/scaling.py -->\n",
        encoding="utf-8")
    self._run("check_readings.py", "--smoke", "--output", output)
    text = pathlib.Path(output).read_text(encoding="utf-8")
    heading = "## What the check's two readings of a float16 gradient cost"
    self.assertLess(text.index(heading), text.index("<!-- scaling: written"))
    for row in ("| 64 |", "| 16,384 |"):
      self.assertIn(row, text)
    self.assertRegex(text, r"at [0-2] of 2 sizes\.")

  def test_floor_and_models_sections_before_the_scaling_one(self):
    output = os.path.join(self.create_tempdir().full_path, "BENCHMARKS.md")
    pathlib.Path(output).write_text(
        "# Head\n\n<!-- scaling: written by benchmarks/scaling.py -->\n",
        encoding="utf-8")
    self._run("floor.py", "--smoke", "--shapes", "many_small", "--sizes", "4",
              "--inners", "sgd", "--models", "wide_and_deep", "--contenders",
              "bare,switch,ours_tf2,ours_fixed,ours_contrib,ours_least,scaled",
              "--seconds", "0", "--model-seconds", "0",
              "--output", output)
    text = pathlib.Path(output).read_text(encoding="utf-8")
    for heading in ("## The floor: every contender against the cheapest "
                    "exact skip", "## Realistic models"):
      self.assertLess(text.index(heading), text.index("<!-- scaling: written"))
    self.assertIn("| many_small | 4 | sgd | ours, TF2 face, dynamic |", text)
    self.assertIn("| wide_and_deep | ours, TF2 face, dynamic |", text)
    self.assertIn("- many_small 4 sgd: the least dynamic scale on the "
                  "floor's step ", text)

  def test_codemod_speed(self):
    self.assertIn("one file", self._run("codemod_speed.py", "--scale", "0.001"))

  def test_codemod_shapes_table(self):
    printed = self._run("codemod_shapes.py", "--size", "3000")
    rows = [line for line in printed.splitlines() if line.startswith("| ")]
    self.assertEqual(rows[0], "| shape | size | seconds | peak MiB | outcome |")
    self.assertLen(rows, len(codemod_shapes.SHAPES) + 1)
    for row, name in zip(rows[1:], codemod_shapes.SHAPES):
      self.assertStartsWith(row, f"| {name} | 0.00 MB | ")
      self.assertRegex(row, r"\| exit [01]: ")

  @parameterized.named_parameters(
      (name, name) for name in sorted(codemod_shapes.SHAPES))
  def test_codemod_shape_is_python_of_the_size_asked(self, name):
    source = codemod_shapes.SHAPES[name](5000)
    self.assertBetween(len(source), 5000, 5000 + 600)
    compile(source, name, "exec")
    self.assertIn("tf.contrib.mixed_precision.", source)


if __name__ == "__main__":
  absltest.main()
