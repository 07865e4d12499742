"""The examples run as documented and show LossScaleHook's report by default.

Each example runs in a fresh interpreter, as a user would start it. The
hook's lines are checked against the example's own accounting: the skipped
steps the hook reports up to its last report can never exceed the skipped
steps the example counts over the whole session, and each report covers
`every_n_steps` runs.
"""

import json
import pathlib
import re
import subprocess
import sys

from absl.testing import parameterized
from PIL import Image
import pytest
import tensorflow as tf

from examples import bert_pretraining

ROOT = pathlib.Path(__file__).resolve().parents[1]
REPORT = re.compile(r"loss scale (\S+) at step (\d+); (\d+) of the last (\d+) "
                    r"steps skipped \([\d.]+%\), (\d+) since the session started")
SESSION = re.compile(r"(\d+) runs[:,] (\d+) applied, (\d+) skipped")


def _run(example: str) -> subprocess.CompletedProcess:
  return subprocess.run(
      [sys.executable, str(ROOT / "examples" / example)], capture_output=True,
      text=True, timeout=900, cwd=str(ROOT),
      env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(ROOT)})


class ExamplesTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("monitored_session", "monitored_session_example.py", False),
      ("estimator", "estimator_example.py", True),
  )
  def test_hook_report_is_visible_and_adds_up(self, example, needs_estimator):
    if needs_estimator and not hasattr(tf, "estimator"):
      self.skipTest(f"TensorFlow {tf.__version__} has no tf.estimator")
    result = _run(example)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    reports = [tuple(int(float(g)) for g in m.groups())
               for m in REPORT.finditer(result.stderr)]
    sessions = [tuple(map(int, m.groups()))
                for m in SESSION.finditer(result.stdout)]
    # One report every 50 session runs, in the order the sessions ran.
    self.assertNotEmpty(sessions, result.stdout)
    self.assertLen(reports, sum(runs // 50 for runs, _, _ in sessions),
                   result.stderr[-3000:])
    start = 0
    for runs, applied, skipped in sessions:
      self.assertEqual(runs, applied + skipped)
      mine, start = reports[start:start + runs // 50], start + runs // 50
      self.assertEqual([r[1] for r in mine],
                       list(range(50, 50 * len(mine) + 1, 50)))
      self.assertTrue(all(r[3] == 50 for r in mine))
      # The running total is the sum of the per-window counts, and no more
      # than the session's skipped steps (runs after the last report count
      # there only).
      self.assertEqual(mine[-1][4], sum(r[2] for r in mine))
      self.assertLessEqual(mine[-1][4], skipped)


@pytest.mark.long_run
class BertDemoTest(parameterized.TestCase):
  """`make bert-demo`: the amax-set scale against the exponential one.

  The demo runs as `make bert-demo` starts it, but for 960 micro-steps, not
  2,400, in 40% of the time: long enough for the exponential scale to grow
  into more than ten overflows, so that the 10x claim can fail.
  docs/semantics.md's 2,400-step numbers are the committed picture's
  (`BertDemoWordsTest`).
  """

  MICRO_STEPS = 960

  def test_amax_scale_matches_the_loss_with_ten_times_fewer_skips(self):
    if tf.__version__.startswith("2.15"):
      # TF 2.15's float16 CPU kernels make these two runs about 20 times
      # slower; `make bert-demo` (TF 2.21) runs the full story.
      self.skipTest("float16 on TF 2.15's CPU kernels: run make bert-demo")
    picture = pathlib.Path(self.create_tempdir().full_path) / "bert.png"
    result = subprocess.run(
        [sys.executable, "-m", "examples.bert_pretraining", "--png",
         str(picture), "--micro_steps", str(self.MICRO_STEPS)],
        capture_output=True, text=True, timeout=1800, cwd=str(ROOT),
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin",
             "PYTHONPATH": str(ROOT)})
    self.assertEqual(result.returncode, 0, result.stdout[-3000:] +
                     result.stderr[-3000:])
    found = {name: (float(loss), int(skipped)) for name, loss, skipped in
             re.findall(r"^(\w+): final loss ([\d.]+), skipped micro-steps "
                        r"(\d+)", result.stdout, re.M)}
    (amax_loss, amax_skips), (exp_loss, exp_skips) = (
        found["amax"], found["exponential"])
    self.assertLessEqual(abs(amax_loss - exp_loss), 0.01 * exp_loss)
    self.assertGreaterEqual(exp_skips, 10 * max(amax_skips, 1))
    self.assertIn("As expected:", result.stdout)
    # The picture carries the numbers printed, and marks as many skipped
    # micro-steps (read from telemetry's skip reasons) as the counter counts.
    drawn = bert_results(picture)
    self.assertEqual(drawn["micro_steps"], self.MICRO_STEPS)
    for name, (loss, skipped) in found.items():
      self.assertAlmostEqual(drawn["runs"][name]["loss"], loss, places=4)
      self.assertEqual(drawn["runs"][name]["skipped"], skipped)
      self.assertEqual(drawn["runs"][name]["skipped_marked"], skipped)


def bert_results(path) -> dict:
  """The results `examples/bert_pretraining.py` stored in its picture."""
  with Image.open(path) as picture:
    return json.loads(picture.text[bert_pretraining.PNG_KEY])


def _results(amax_loss, amax_skips, exp_loss=3.0, exp_skips=50):
  return {"amax": {"loss": amax_loss, "skipped": amax_skips},
          "exponential": {"loss": exp_loss, "skipped": exp_skips}}


class BertDemoWordsTest(parameterized.TestCase):
  """The BERT demo's verdict and title are computed from its numbers."""

  @parameterized.named_parameters(
      ("holds", _results(3.01, 0), True, "As expected: "),
      ("loss_too_far", _results(3.04, 0), False, "NOT within 1%"),
      ("too_many_skips", _results(3.0, 6), False, "NOT 10x fewer"),
  )
  def test_title_says_what_the_numbers_show(self, results, holds, words):
    self.assertEqual(bert_pretraining.verdict(results)[0], holds)
    title = bert_pretraining.title(results)
    self.assertIn(words, title)
    self.assertEqual(title.startswith(bert_pretraining.LABELS["amax"]), True)
    self.assertIn("As expected" if holds else "NOT as expected", title)

  def test_docs_state_the_committed_pictures_numbers(self):
    runs = bert_results(ROOT / "docs" / "bert_demo.png")["runs"]
    amax, exponential = runs["amax"], runs["exponential"]
    text = " ".join(
        (ROOT / "docs" / "semantics.md").read_text(encoding="utf-8").split())
    self.assertIn(
        f"({amax['loss']:.4f} against {exponential['loss']:.4f}) with "
        f"{amax['skipped']} skipped micro-steps against "
        f"{exponential['skipped']}", text)
    self.assertTrue(bert_pretraining.verdict(runs)[0])
    self.assertIn("](bert_demo.png)", text)
    self.assertIn(
        f"median headroom is {exponential['median_headroom_bits']:.1f} bits "
        f"against {amax['median_headroom_bits']:.1f}", text)
