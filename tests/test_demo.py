"""`examples/digits_demo.py`, shortened: its PNG and its TensorBoard runs.

The demo runs twice in a subprocess (it sets TF's global op determinism)
with a few steps into the same log folder. Checked: the PNG is a valid PNG
(signature, IHDR size, decodable by matplotlib), every run folder holds
exactly one event file after the second run, and each run's events carry the
same tags.
"""

import os
import pathlib
import struct
import subprocess
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
from matplotlib import image
import tensorflow as tf

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "digits_demo.py"
STEPS, EVAL_EVERY = 6, 3
RUN_FOLDERS = ("fp32", "fp16", "fp16_loss_scaling")
PER_STEP_TAGS = ("mp_optimizer/loss_scale", "mp_optimizer/skipped_steps",
                 "digits/train_loss")
PER_EVAL_TAGS = ("digits/test_accuracy", "digits/underflow_share")


def run_demo(logdir):
  result = subprocess.run(
      [sys.executable, str(DEMO), "--steps", str(STEPS), "--eval_every",
       str(EVAL_EVERY), "--batch_size", "64", "--logdir", logdir],
      capture_output=True, text=True, timeout=600, cwd=ROOT,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  if result.returncode != 0:
    raise AssertionError(result.stderr[-3000:])
  return result.stdout


def read_events(path):
  """Returns {tag: [step, ...]} of the scalar summaries in one event file."""
  steps = {}
  for event in tf.compat.v1.train.summary_iterator(str(path)):
    for value in event.summary.value:
      steps.setdefault(value.tag, []).append(event.step)
  return steps


class DigitsDemoTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.logdir = tempfile.mkdtemp()
    run_demo(cls.logdir)
    cls.stdout = run_demo(cls.logdir)  # The second run must start afresh.
    cls.png = pathlib.Path(cls.logdir) / "digits_demo.png"

  def test_png_signature_and_header(self):
    data = self.png.read_bytes()
    self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n")
    length, chunk = struct.unpack(">I4s", data[8:16])
    self.assertEqual((length, chunk), (13, b"IHDR"))
    width, height = struct.unpack(">II", data[16:24])
    pixels = image.imread(str(self.png))
    self.assertEqual(pixels.shape[:2], (height, width))
    self.assertGreater(width, height)
    self.assertGreater(pixels.std(), 0.0)  # Not a blank canvas.

  @parameterized.named_parameters(*[(folder, folder) for folder in RUN_FOLDERS])
  def test_run_has_one_event_file_with_the_common_tags(self, folder):
    files = sorted((pathlib.Path(self.logdir) / folder).glob(
        "events.out.tfevents.*"))
    self.assertLen(files, 1)
    steps = read_events(files[0])
    for tag in PER_STEP_TAGS:
      self.assertEqual(steps.get(tag), list(range(1, STEPS + 1)), tag)
    for tag in PER_EVAL_TAGS:
      self.assertEqual(steps.get(tag),
                       list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)), tag)

  def test_table_lists_every_run(self):
    for name in ("| fp32 ", "| fp16 ", "| fp16 + loss scaling "):
      self.assertIn(name, self.stdout)


if __name__ == "__main__":
  absltest.main()
