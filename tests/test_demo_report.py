"""The digits demo's verdict, and the README table it wrote.

The verdict's thresholds are the demo's promise: unscaled float16 more than
5 points below float32, scaled float16 and bfloat16 no more than 1 point
below it. The
README's results block must be exactly what `demo_report.markdown` makes of
the results stored in `docs/digits_demo.png`, so the table, its sentence and
the picture come from one run of the full demo.
"""

import os
import pathlib
import sys

from absl.testing import absltest
from absl.testing import parameterized

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import demo_report  # pylint: disable=wrong-import-position

PNG = ROOT / "docs" / "digits_demo.png"
README = ROOT / "README.md"


def results(fp32, fp16, scaled, bf16=None):
  """Results of a run with the given test accuracies (%); bf16 as fp32 by
  default."""
  row = dict(loss=0.01, skipped=0, scale=1.0, dynamic=False, zeros=None,
             telemetry_zeros=None)
  return dict(
      rows=[dict(row, name="fp32", accuracy=fp32),
            dict(row, name="fp16", accuracy=fp16, zeros=100.0,
                 telemetry_zeros=100.0),
            dict(row, name="fp16 + loss scaling", accuracy=scaled,
                 skipped=3, scale=2.0**40, dynamic=True, zeros=0.001,
                 telemetry_zeros=1.5),
            dict(row, name="bf16", accuracy=fp32 if bf16 is None else bf16,
                 dtype="bfloat16", zeros=0.0)],
      steps=2000, batch_size=128, tensorflow="2.x", wall_time=12.3,
      machine="a CPU", environment={"TF_ENABLE_ONEDNN_OPTS": "0",
                                    "ONEDNN_MAX_CPU_ISA": None})


class VerdictTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("story", 98.0, 10.0, 98.0, True),
      ("scaled_above_fp32", 97.0, 10.0, 98.0, True),
      ("unscaled_just_more_than_5_below", 98.0, 92.75, 98.0, True),
      ("unscaled_5_below", 98.0, 93.0, 98.0, False),
      ("unscaled_above", 90.0, 95.0, 90.0, False),
      ("scaled_1_below", 98.0, 10.0, 97.0, True),
      ("scaled_more_than_1_below", 98.0, 10.0, 96.75, False),
      ("bf16_1_below", 98.0, 10.0, 98.0, True, 97.0),
      ("bf16_more_than_1_below", 98.0, 10.0, 98.0, False, 96.75),
      ("bf16_above", 97.0, 10.0, 97.0, True, 98.0),
  )
  def test_thresholds(self, fp32, fp16, scaled, shown, bf16=None):
    run = results(fp32, fp16, scaled, bf16)
    self.assertEqual(demo_report.verdict(run)[0], shown)
    self.assertEqual(not demo_report.problems(run), shown)
    first_line = demo_report.title(run).splitlines()[0]
    self.assertEqual(first_line.startswith("The demo's effect did not show"),
                     not shown)

  def test_sentences_quote_the_numbers(self):
    shown = demo_report.verdict(results(97.5, 11.25, 96.75))[1]
    for text in ("11.25%", "97.50%", "96.75%", "86.25 points",
                 "100.00% of its gradient entries"):
      self.assertIn(text, shown)
    not_shown = demo_report.verdict(results(97.5, 95.0, 90.0))[1]
    self.assertIn("reached 95.00%, within 5 points of float32's 97.50%",
                  not_shown)
    self.assertIn("reached 90.00%, more than 1 point below", not_shown)
    bf16 = demo_report.verdict(results(97.5, 11.25, 97.5, 95.0))[1]
    self.assertIn("bfloat16 reached 95.00%, more than 1 point below float32's "
                  "97.50%", bf16)
    shown_bf16 = demo_report.verdict(results(97.5, 11.25, 97.5, 97.25))[1]
    self.assertIn("bfloat16, with no loss scale, reached 97.25% (0.00% of its "
                  "gradient entries zero in bfloat16, 0 skipped steps)",
                  shown_bf16)

  def test_bfloat16_not_run_is_said(self):
    run = results(98.0, 10.0, 98.0)
    del run["rows"][3]
    run["not_run"] = {"bf16": "no bfloat16 here"}
    self.assertTrue(demo_report.verdict(run)[0])
    self.assertIn("bfloat16 was not run: no bfloat16 here.",
                  demo_report.verdict(run)[1])
    self.assertIn("bfloat16 not run", demo_report.title(run))
    self.assertEqual(demo_report.table(run)[5],
                     "| bf16 | not run: no bfloat16 here | – | – | – | – | – |")

  def test_a_row_is_missing(self):
    run = results(98.0, 10.0, 98.0)
    del run["rows"][1]
    with self.assertRaisesRegex(ValueError, "no row for fp16"):
      demo_report.verdict(run)

  def test_table_units_and_scale(self):
    lines = demo_report.table(results(98.0, 10.0, 98.0))
    self.assertEqual(lines[2], "| fp32 | 98.00% | 0.0100 | n/a (float32) "
                     "| n/a (float32) | 0 | 1 (fixed) |")
    self.assertEqual(lines[4], "| fp16 + loss scaling | 98.00% | 0.0100 | "
                     "<0.01% | 1.50% | 3 | 2^40 |")
    self.assertEqual(lines[5], "| bf16 | 98.00% | 0.0100 | 0.00% | n/a "
                     "(float16's measure) | 0 | none (NoLossScale) |")


class ReadmeBlockTest(parameterized.TestCase):

  def test_update_readme_replaces_only_the_block(self):
    path = os.path.join(self.create_tempdir().full_path, "README.md")
    pathlib.Path(path).write_text(
        f"before\n{demo_report.BEGIN}\nold\n{demo_report.END}\nafter\n",
        encoding="utf-8")
    run = results(98.0, 10.0, 98.0)
    demo_report.update_readme(path, run)
    self.assertEqual(pathlib.Path(path).read_text(encoding="utf-8"),
                     f"before\n{demo_report.BEGIN}\n"
                     f"{demo_report.markdown(run)}{demo_report.END}\nafter\n")
    self.assertEqual(demo_report.readme_block(path), demo_report.markdown(run))

  def test_update_readme_fills_an_empty_block(self):
    path = os.path.join(self.create_tempdir().full_path, "README.md")
    pathlib.Path(path).write_text(
        f"{demo_report.BEGIN}\n{demo_report.END}\n", encoding="utf-8")
    run = results(98.0, 10.0, 98.0)
    demo_report.update_readme(path, run)
    self.assertEqual(demo_report.readme_block(path), demo_report.markdown(run))

  @parameterized.named_parameters(
      ("no_markers", "no markers\n"),
      ("end_before_begin", f"{demo_report.END}\n{demo_report.BEGIN}\n"),
      ("begin_not_on_its_own_line",
       f"text {demo_report.BEGIN}\n{demo_report.END}\n"),
      ("two_ends",
       f"{demo_report.BEGIN}\n{demo_report.END}\n{demo_report.END}\n"),
  )
  def test_update_readme_refuses_bad_markers(self, text):
    path = os.path.join(self.create_tempdir().full_path, "README.md")
    pathlib.Path(path).write_text(text, encoding="utf-8")
    with self.assertRaisesRegex(ValueError, "must hold the line"):
      demo_report.update_readme(path, results(98.0, 10.0, 98.0))
    self.assertEqual(pathlib.Path(path).read_text(encoding="utf-8"), text)

  def test_readme_table_is_the_committed_pictures_run(self):
    run = demo_report.png_results(str(PNG))
    self.assertEqual(demo_report.readme_block(str(README)),
                     demo_report.markdown(run))
    self.assertTrue(demo_report.verdict(run)[0], demo_report.verdict(run)[1])
    self.assertEqual(run["steps"], 2000)  # The full demo, not a shortened one.

  def test_tensorboard_command(self):
    command = demo_report.tensorboard_command("runs/digits")
    if command is None:
      self.skipTest("no TensorBoard in this environment")
    self.assertTrue(command.endswith(
        "--logdir " + os.path.abspath("runs/digits")), command)


class DemoPageTest(absltest.TestCase):
  """docs/demo.md describes the model and the data the demo builds."""

  def test_model_and_pixels_are_as_the_page_says(self):
    import demo_model  # pylint: disable=import-outside-toplevel
    import digits_demo  # pylint: disable=import-outside-toplevel
    args = digits_demo.parse_args([])
    text = " ".join((ROOT / "docs" / "demo.md").read_text(
        encoding="utf-8").split())
    words = {1: "one", 2: "two", 3: "three"}
    self.assertIn(f"{words[args.depth]} hidden layers of {args.width} "
                  f"leaky-ReLU units (slope {demo_model.LEAK:g} below 0)", text)
    self.assertIn("pixels centred on the training set's mean", text)
    x_train, x_test = digits_demo.load_data()[:2]
    self.assertLess(abs(x_train.mean(axis=0)).max(), 1e-6)
    self.assertTrue((x_train.std(axis=0) > 0).all())  # None blank throughout.
    self.assertEqual(x_test.shape[1], x_train.shape[1])


if __name__ == "__main__":
  absltest.main()
