"""`examples/digits_demo.py`, shortened: its story, its files, its verdict.

The demo runs in subprocesses (it sets TF's global op determinism), 150
steps each, under each CPU setting a user may have: oneDNN's custom ops on
(TF's default on x86-64), off (`TF_ENABLE_ONEDNN_OPTS=0`), and oneDNN capped
at AVX2 (`ONEDNN_MAX_CPU_ISA=AVX2`, which TF's oneDNN honours; the run
checks oneDNN's own report of the ISA it used). In each, the story must
hold: float16 without loss scaling at least 20 points below float32, with
loss scaling within 2 points of it, and bfloat16 with no loss scale within 2
points of it too, with less than 1% of its gradient entries zero. The default run also goes twice into one
log folder (the second must start afresh) and its PNG, TensorBoard events,
table and TensorBoard command are checked; a run whose float16 gradients do
not underflow (`--example_weight 1`) must say so and exit 1.
"""

import json
import os
import pathlib
import platform
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
from matplotlib import image
import pytest
import tensorflow as tf

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import demo_report  # pylint: disable=wrong-import-position

DEMO = ROOT / "examples" / "digits_demo.py"
STEPS, EVAL_EVERY = 150, 50
SETTINGS = {"onednn_on": {},
            "onednn_off": {"TF_ENABLE_ONEDNN_OPTS": "0"},
            "isa_avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ONEDNN_VERBOSE": "1"}}
RUN_FOLDERS = {"fp32": "fp32", "fp16": "fp16",
               "fp16_loss_scaling": "fp16 + loss scaling",
               "bf16": "bf16"}  # folder: run
PER_STEP_TAGS = ("mp_optimizer/loss_scale", "mp_optimizer/skipped_steps",
                 "digits/train_loss")
PER_EVAL_TAGS = ("digits/test_accuracy_percent",
                 "digits/zero_gradient_entries_percent")


def run_demo(logdir, *flags, setting=None):
  """Runs the shortened demo; returns the finished process."""
  env = {key: value for key, value in os.environ.items()
         if key not in ("TF_ENABLE_ONEDNN_OPTS", "ONEDNN_MAX_CPU_ISA",
                        "ONEDNN_VERBOSE")}
  env.update(setting or {}, TF_CPP_MIN_LOG_LEVEL="2")
  return subprocess.run(
      [sys.executable, str(DEMO), "--steps", str(STEPS), "--eval_every",
       str(EVAL_EVERY), "--logdir", logdir, *flags],
      capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)


def read_events(path):
  """Returns {tag: [(step, value), ...]} of the scalars in one event file."""
  scalars = {}
  for event in tf.compat.v1.train.summary_iterator(str(path)):
    for value in event.summary.value:
      scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
  return scalars


@pytest.mark.long_run
class DigitsDemoTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    cls.runs = {}
    for name, setting in SETTINGS.items():
      logdir = os.path.join(cls.tmp, name)
      if name == "onednn_on":  # Twice: the second run must start afresh.
        run_demo(logdir, setting=setting)
      result = run_demo(logdir, setting=setting)
      with open(os.path.join(logdir, "results.json"), encoding="utf-8") as f:
        cls.runs[name] = (result, json.load(f))
    cls.logdir = pathlib.Path(cls.tmp) / "onednn_on"
    cls.stdout = cls.runs["onednn_on"][0].stdout

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()

  @parameterized.named_parameters(*[(name, name) for name in SETTINGS])
  def test_story_holds(self, setting):
    result, results = self.runs[setting]
    rows = demo_report.by_name(results)
    fp32, fp16, scaled = (rows[name]["accuracy"]
                          for name in demo_report.RUNS[:3])
    self.assertGreaterEqual(fp32 - fp16, 20.0, results)
    self.assertLessEqual(abs(fp32 - scaled), 2.0, results)
    if setting == "isa_avx2":  # oneDNN capped below bfloat16: said, not run.
      self.assertNotIn("bf16", rows)
      self.assertIn("ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN below AVX-512",
                    results["not_run"]["bf16"])
      self.assertIn("| bf16 | not run: ONEDNN_MAX_CPU_ISA=AVX2", result.stdout)
    else:
      # bfloat16 has float32's range: no scale, and its gradients keep their
      # entries; the bfloat16 mode still checked every step.
      self.assertEqual(results["not_run"], {})
      self.assertLessEqual(abs(fp32 - rows["bf16"]["accuracy"]), 2.0, results)
      self.assertLess(rows["bf16"]["zeros"], 1.0)
      self.assertEqual(rows["bf16"]["skipped"], 0)
      self.assertIsNone(rows["bf16"]["telemetry_zeros"])
    # Unscaled float16 gradients underflow entirely, scaled ones hardly.
    self.assertEqual(rows["fp16"]["zeros"], 100.0)
    self.assertLess(rows["fp16 + loss scaling"]["zeros"], 1.0)
    # Precision telemetry sees the same underflow from inside the step,
    # with no float32 reference: every entry zero in the unscaled run, at
    # least 10x fewer in the scaled one (the model has no exact zeros of its
    # own: leaky ReLU, centred pixels).
    unscaled = rows["fp16"]["telemetry_zeros"]
    scaled_zeros = rows["fp16 + loss scaling"]["telemetry_zeros"]
    self.assertEqual(unscaled, 100.0)
    self.assertLess(scaled_zeros, 1.0)
    self.assertGreaterEqual(unscaled, 10 * scaled_zeros)
    self.assertIsNone(rows["fp32"]["telemetry_zeros"])
    # The exit status is the demo's own verdict on these numbers.
    self.assertEqual(result.returncode,
                     0 if demo_report.verdict(results)[0] else 1,
                     result.stderr[-3000:])
    expected = {key: SETTINGS[setting].get(key)
                for key in ("TF_ENABLE_ONEDNN_OPTS", "ONEDNN_MAX_CPU_ISA")}
    self.assertEqual(results["environment"], expected)

  def test_onednn_used_the_reduced_isa(self):
    if platform.machine() not in ("x86_64", "AMD64"):
      self.skipTest("ONEDNN_MAX_CPU_ISA=AVX2 names an x86-64 ISA")
    self.assertIn("isa:Intel AVX2\n", self.runs["isa_avx2"][0].stdout)

  def test_png_signature_header_and_results(self):
    png = self.logdir / "digits_demo.png"
    data = png.read_bytes()
    self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n")
    length, chunk = struct.unpack(">I4s", data[8:16])
    self.assertEqual((length, chunk), (13, b"IHDR"))
    width, height = struct.unpack(">II", data[16:24])
    pixels = image.imread(str(png))
    self.assertEqual(pixels.shape[:2], (height, width))
    self.assertGreater(pixels.std(), 0.0)  # Not a blank canvas.
    self.assertEqual(demo_report.png_results(str(png)),
                     self.runs["onednn_on"][1])

  @parameterized.named_parameters(*[(folder, folder) for folder in RUN_FOLDERS])
  def test_run_has_one_event_file_with_the_common_tags(self, folder):
    files = sorted((self.logdir / folder).glob("events.out.tfevents.*"))
    self.assertLen(files, 1)
    scalars = read_events(files[0])
    for tag in PER_STEP_TAGS:
      self.assertEqual([step for step, _ in scalars.get(tag, [])],
                       list(range(1, STEPS + 1)), tag)
    for tag in PER_EVAL_TAGS:
      self.assertEqual([step for step, _ in scalars.get(tag, [])],
                       list(range(0, STEPS + 1, EVAL_EVERY)), tag)
    # TensorBoard's accuracy is in %, as in the table.
    row = demo_report.by_name(self.runs["onednn_on"][1])[RUN_FOLDERS[folder]]
    self.assertAlmostEqual(scalars["digits/test_accuracy_percent"][-1][1],
                           row["accuracy"], places=3)

  def test_prints_table_verdict_and_a_working_tensorboard_command(self):
    results = self.runs["onednn_on"][1]
    for line in demo_report.table(results):
      self.assertIn(line + "\n", self.stdout)
    self.assertIn(demo_report.verdict(results)[1], self.stdout)
    command = [line for line in self.stdout.splitlines()
               if line.startswith("TensorBoard: ")]
    self.assertLen(command, 1)
    argv = shlex.split(command[0][len("TensorBoard: "):])
    self.assertTrue(os.access(argv[0], os.X_OK), argv)
    self.assertEqual(argv[-2:], ["--logdir", str(self.logdir)])


class DigitsDemoVerdictTest(absltest.TestCase):

  def test_no_underflow_no_story_exit_1_readme_unchanged(self):
    tmp = self.create_tempdir().full_path
    readme = os.path.join(tmp, "README.md")
    shutil.copy(ROOT / "README.md", readme)
    result = run_demo(os.path.join(tmp, "runs"), "--example_weight", "1",
                      "--readme", readme)
    self.assertEqual(result.returncode, 1, result.stderr[-3000:])
    self.assertIn("The demo's effect did not show: float16 without loss "
                  "scaling reached", result.stderr)
    self.assertIn("README left unchanged", result.stderr)
    self.assertEqual(pathlib.Path(readme).read_text(encoding="utf-8"),
                     (ROOT / "README.md").read_text(encoding="utf-8"))
    results = demo_report.png_results(os.path.join(tmp, "runs",
                                                   "digits_demo.png"))
    self.assertFalse(demo_report.verdict(results)[0])
    self.assertStartsWith(demo_report.title(results),
                          "The demo's effect did not show")


if __name__ == "__main__":
  absltest.main()
