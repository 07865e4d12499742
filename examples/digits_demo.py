"""fp32 vs fp16 vs fp16 with loss scaling vs bf16, on scikit-learn's digits.

Four runs of the same TF1-style graph (same data order, same initial
weights; `examples/demo_model.py` builds it): variables are float32 in every
run; the forward and backward pass run in float32, float16, float16 with
dynamic loss scaling through `mp_optimizer.LossScaleOptimizer`, or bfloat16
in the bfloat16 mode (`managers.NoLossScale()`). Each image's cross-entropy
is weighted by 2**-30, so every unscaled float16 gradient entry is far below
float16's smallest subnormal (2**-24) and becomes zero; bfloat16, with
float32's range, keeps them.

Writes, each run into a fresh folder under `--logdir` (default runs/digits):
* TensorBoard event files with the same tags in every run:
  `mp_optimizer/loss_scale`, `mp_optimizer/skipped_steps` (from
  `mp_optimizer.add_summaries()`), `digits/train_loss`,
  `digits/test_accuracy_percent` and `digits/zero_gradient_entries_percent`;
* `--png` (default LOGDIR/digits_demo.png), titled with what was measured;
* `LOGDIR/results.json`, and with `--readme README.md` the README's table;
and prints the table, the verdict and a TensorBoard command. Exits with 1 if
the run did not show the effect (see `demo_report.verdict`).

Run with `make demo`, or, with the `examples` extra installed (`pip install
".[examples]"`: scikit-learn, matplotlib, TensorBoard):
python examples/digits_demo.py --steps 300
"""

import argparse
import json
import os
import platform
import shutil
import sys
import time
from typing import List, Optional, Tuple

import numpy as np
from sklearn import datasets
from sklearn import model_selection
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_model  # pylint: disable=wrong-import-position
import demo_plot  # pylint: disable=wrong-import-position
import demo_report  # pylint: disable=wrong-import-position

v1 = tf.compat.v1
RUNS = (("fp32", tf.float32, "fixed"), ("fp16", tf.float16, "fixed"),
        ("fp16 + loss scaling", tf.float16, "dynamic"),
        ("bf16", tf.bfloat16, "none"))
SIXTEEN_BITS = (tf.float16, tf.bfloat16)
ENVIRONMENT = ("TF_ENABLE_ONEDNN_OPTS", "ONEDNN_MAX_CPU_ISA")


def bfloat16_blocked() -> Optional[str]:
  """Why the bfloat16 run cannot run in this process, or None.

  With oneDNN's ops on (TF's default on x86-64), `ONEDNN_MAX_CPU_ISA` capped
  below AVX-512 makes oneDNN refuse a bfloat16 matmul that TensorFlow chose
  it for by the CPU's own flags, and the process aborts.
  """
  isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
  if (os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0" or not isa or
      isa.startswith(("AVX512", "AVX10", "ALL", "DEFAULT"))):
    return None
  return (f"ONEDNN_MAX_CPU_ISA={os.environ['ONEDNN_MAX_CPU_ISA']} caps "
          "oneDNN below AVX-512, where TensorFlow aborts on a bfloat16 matmul")


def folder(name: str) -> str:
  """The run's log folder name: fp32, fp16, fp16_loss_scaling, bf16."""
  return name.replace(" + ", "_").replace(" ", "_")


def load_data() -> list:
  """Returns (x_train, x_test, y_train, y_test), pixels centred.

  Pixels are scaled to [0, 1] and the training set's mean is subtracted, and
  the pixels blank in every training image are dropped. A pixel
  that is 0 in every image of a batch would give exactly zero gradients to
  its weights in float32 too; centred, it is not 0.
  """
  x, y = datasets.load_digits(return_X_y=True)
  x_train, x_test, y_train, y_test = model_selection.train_test_split(
      x / 16.0, y, test_size=0.2, random_state=0, stratify=y)
  mean, varies = x_train.mean(axis=0), x_train.std(axis=0) > 0
  return [((x_train - mean)[:, varies]).astype(np.float32),
          ((x_test - mean)[:, varies]).astype(np.float32), y_train, y_test]


def evaluate(sess: v1.Session, t: dict, step: int, data: list,
             history: dict, writer: v1.summary.FileWriter) -> None:
  """Records test accuracy and zero 16-bit gradient entries at `step`."""
  x_train, x_test, y_train, y_test = data
  accuracy, summary = sess.run([t["accuracy"], t["test_summary"]],
                               {t["x"]: x_test, t["y"]: y_test})
  writer.add_summary(summary, step)
  zeros, summary = sess.run([t["zeros"], t["zeros_summary"]],
                            {t["x"]: x_train, t["y"]: y_train})
  writer.add_summary(summary, step)
  history["eval_steps"].append(step)
  history["accuracy"].append(float(accuracy))
  history["zeros"].append(float(zeros))
  if step:  # Precision telemetry of the step just taken (none before).
    history["telemetry_zeros"].append(float(sess.run(t["telemetry_zeros"])))


def train(name: str, dtype: tf.DType, scaling: str, data: list,
          args: argparse.Namespace) -> Tuple[dict, dict]:
  """Trains one run in its own graph; returns its history and table row.

  Evaluates before the first step and every `eval_every` steps.
  """
  x_train, y_train = data[0], data[2]
  history = dict(loss=[], scale=[], skipped=[], eval_steps=[], accuracy=[],
                 zeros=[], telemetry_zeros=[])
  with tf.Graph().as_default() as graph:
    t = demo_model.build(dtype, scaling, data[0].shape[1], args)
    writer = v1.summary.FileWriter(os.path.join(args.logdir, folder(name)),
                                   graph)
    if args.batch_size:
      batches = np.random.RandomState(args.seed).randint(
          0, len(x_train), size=(args.steps, args.batch_size))
    else:  # Full batch: all 1437 training images every step.
      batches = [np.arange(len(x_train))] * args.steps
    with v1.Session(graph=graph) as sess:
      sess.run([v1.global_variables_initializer(),
                v1.local_variables_initializer()])
      evaluate(sess, t, 0, data, history, writer)
      for step, batch in enumerate(batches, start=1):
        _, loss, scale, applied, summary = sess.run(
            [t["train_op"], t["loss"], t["scale"], t["applied"],
             t["step_summaries"]],
            {t["x"]: x_train[batch], t["y"]: y_train[batch]})
        writer.add_summary(summary, step)
        history["loss"].append(float(loss))
        history["scale"].append(float(scale))
        if not applied:
          history["skipped"].append(step)
        if step % args.eval_every == 0 or step == args.steps:
          evaluate(sess, t, step, data, history, writer)
          print(f"  [{name:>19}] step {step:5d}  loss {loss:.4f}  test "
                f"accuracy {history['accuracy'][-1]:6.2f}%  loss scale "
                f"{scale:9.3g}  gradient entries zero in 16 bits "
                f"{history['zeros'][-1]:6.2f}%", flush=True)
      skipped = int(sess.run(t["skipped"]))
    writer.close()
  row = dict(name=name, accuracy=history["accuracy"][-1],
             loss=float(np.mean(history["loss"][-args.eval_every:])),
             skipped=skipped, scale=history["scale"][-1],
             dynamic=scaling == "dynamic", dtype=dtype.name,
             zeros=(float(np.mean(history["zeros"]))
                    if dtype in SIXTEEN_BITS else None),
             telemetry_zeros=(float(np.mean(history["telemetry_zeros"]))
                              if dtype == tf.float16 else None))
  return history, row


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
  """The demo's flags; `--steps` shortens it (the test uses a few steps)."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=2000)
  parser.add_argument("--batch_size", type=int, default=128,
                      help="0: every step uses the whole training set")
  parser.add_argument("--depth", type=int, default=2, help="hidden layers")
  parser.add_argument("--width", type=int, default=128)
  parser.add_argument("--learning_rate", type=float, default=1e-3,
                      help="Adam's learning rate")
  parser.add_argument("--example_weight", type=float, default=2.0**-30,
                      help="the weight of each image's cross-entropy")
  parser.add_argument("--init_loss_scale", type=float, default=2.0**32)
  parser.add_argument("--incr_every_n_steps", type=int, default=100)
  parser.add_argument("--eval_every", type=int, default=50)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--logdir", default=os.path.join("runs", "digits"))
  parser.add_argument("--png", default=None,
                      help="default: LOGDIR/digits_demo.png")
  parser.add_argument("--readme", default=None,
                      help="a README whose marked results block to rewrite")
  args = parser.parse_args(argv)
  for flag in ("steps", "depth", "width", "eval_every", "incr_every_n_steps"):
    if getattr(args, flag) < 1:
      parser.error(f"--{flag} must be >= 1, got {getattr(args, flag)}")
  if args.batch_size < 0:
    parser.error(f"--batch_size must be >= 0, got {args.batch_size}")
  for flag in ("learning_rate", "example_weight", "init_loss_scale"):
    if not 0 < getattr(args, flag) < float("inf"):
      parser.error(f"--{flag} must be positive, got {getattr(args, flag)}")
  args.png = args.png or os.path.join(args.logdir, "digits_demo.png")
  if args.readme:  # Before training, not after.
    try:
      demo_report.readme_block(args.readme)
    except (OSError, ValueError) as error:
      parser.error(f"--readme: {error}")
  return args


def report(args: argparse.Namespace, results: dict) -> None:
  """Prints the table, what its columns mean, the verdict and where to look."""
  print()
  print("\n".join(demo_report.table(results)))
  print("\nGradient entries zero in the run's 16-bit type: mean over the "
        "evaluations of the share\nof the float32 gradient's non-zero entries "
        "(same weights, same images, same branch of\neach leaky-ReLU unit) that "
        "were exactly zero in the run's float16 or bfloat16\ngradient. The "
        "same in float16, by precision telemetry (float16 runs only):\n"
        "measured inside the training step, without a float32 reference:\n"
        "`mp_optimizer.signals.precision()['zero_share']` of the step before "
        "each evaluation\n(mean over the variables), averaged over the "
        "evaluations.")
  print(f"\n{demo_report.verdict(results)[1]}")
  print(f"\nThe four runs took {results['wall_time']:.0f} s. Picture: "
        f"{args.png}")
  command = demo_report.tensorboard_command(args.logdir)
  print(f"TensorBoard: {command}" if command else
        "TensorBoard is not installed here: pip install tensorboard")


def main(argv: Optional[List[str]] = None) -> int:
  """Runs the four trainings, draws the PNG, prints the table and verdict.

  Returns:
    0 if the run showed the effect, else 1.
  """
  args = parse_args(argv)
  tf.config.experimental.enable_op_determinism()
  data = load_data()
  for name, _, _ in RUNS:  # A fresh folder per run: no stale event files.
    shutil.rmtree(os.path.join(args.logdir, folder(name)), ignore_errors=True)
  batch_size = args.batch_size or len(data[0])
  print(f"digits: {len(data[0])} train / {len(data[1])} test images; "
        f"{args.depth}x{args.width} leaky-ReLU MLP, Adam, {args.steps} steps of "
        f"{batch_size} images, each image's cross-entropy weighted "
        f"{demo_report.power_of_two(args.example_weight)}")
  start, histories, rows = time.time(), {}, []
  blocked = bfloat16_blocked()
  not_run = {} if blocked is None else {"bf16": blocked}
  for name, dtype, scaling in RUNS:
    if name in not_run:
      print(f"  [{name:>19}] not run: {not_run[name]}")
      continue
    histories[name], row = train(name, dtype, scaling, data, args)
    rows.append(row)
  results = dict(
      rows=rows, not_run=not_run, steps=args.steps, batch_size=batch_size,
      tensorflow=tf.__version__, wall_time=time.time() - start,
      machine=f"{demo_report.cpu()}, Python {platform.python_version()}",
      environment={key: os.environ.get(key) for key in ENVIRONMENT})
  os.makedirs(os.path.dirname(os.path.abspath(args.png)), exist_ok=True)
  demo_plot.plot_runs(histories, args.png, demo_report.title(results),
                      {demo_report.PNG_KEY: json.dumps(results)})
  with open(os.path.join(args.logdir, "results.json"), "w",
            encoding="utf-8") as out:
    json.dump(results, out, indent=1)
  report(args, results)
  shown, sentence = demo_report.verdict(results)
  if not shown:
    print(f"\n{sentence}" + (" README left unchanged." if args.readme else ""),
          file=sys.stderr)
    return 1
  if args.readme:
    demo_report.update_readme(args.readme, results)
    print(f"Wrote the table into {args.readme}.")
  return 0


if __name__ == "__main__":
  sys.exit(main())
