"""fp32 vs fp16 vs fp16 with dynamic loss scaling, on scikit-learn's digits.

Three runs of the same TF1-style graph (same data order, same initial
weights; `examples/demo_model.py` builds it): variables are float32 in every
run; the forward and backward pass run in float32, float16, or float16 with
dynamic loss scaling through `mp_optimizer.LossScaleOptimizer`.

Writes, each run into a fresh folder under `--logdir` (default runs/digits):
* TensorBoard event files with the same tags in every run:
  `mp_optimizer/loss_scale`, `mp_optimizer/skipped_steps` (from
  `mp_optimizer.add_summaries()`), `digits/train_loss`,
  `digits/test_accuracy` and `digits/underflow_share`;
      .venv/tf2.21/bin/tensorboard --logdir runs/digits
* `--png` (default runs/digits/digits_demo.png): loss curves, the loss scale
  with skipped steps marked, test accuracy;
* and prints a table at the end.

Run with `make demo`, or: python examples/digits_demo.py --steps 300
"""

import argparse
import os
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

v1 = tf.compat.v1
RUNS = (("fp32", tf.float32, False), ("fp16", tf.float16, False),
        ("fp16 + loss scaling", tf.float16, True))


def folder(name: str) -> str:
  """The run's log folder name: fp32, fp16, fp16_loss_scaling."""
  return name.replace(" + ", "_").replace(" ", "_")


def load_data() -> list:
  """Returns (x_train, x_test, y_train, y_test); pixels scaled to [0, 1]."""
  x, y = datasets.load_digits(return_X_y=True)
  return model_selection.train_test_split(
      (x / 16.0).astype(np.float32), y, test_size=0.2, random_state=0,
      stratify=y)


def train(name: str, dtype: tf.DType, scaled: bool, data: list,
          args: argparse.Namespace) -> Tuple[dict, dict]:
  """Trains one run in its own graph; returns its history and table row."""
  x_train, x_test, y_train, y_test = data
  history = dict(loss=[], scale=[], skipped=[], eval_steps=[], accuracy=[],
                 underflow=[])
  with tf.Graph().as_default() as graph:
    t = demo_model.build(dtype, scaled, args)
    writer = v1.summary.FileWriter(os.path.join(args.logdir, folder(name)),
                                   graph)
    if args.batch_size:
      batches = np.random.RandomState(args.seed).randint(
          0, len(x_train), size=(args.steps, args.batch_size))
    else:  # Full batch: the mean loss over all 1437 training images.
      batches = [np.arange(len(x_train))] * args.steps
    train_feed = {t["x"]: x_train, t["y"]: y_train}
    test_feed = {t["x"]: x_test, t["y"]: y_test}
    with v1.Session(graph=graph) as sess:
      sess.run([v1.global_variables_initializer(),
                v1.local_variables_initializer()])
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
          accuracy, summary = sess.run([t["accuracy"], t["test_summary"]],
                                       test_feed)
          writer.add_summary(summary, step)
          underflow, summary = sess.run(
              [t["underflow"], t["underflow_summary"]], train_feed)
          writer.add_summary(summary, step)
          history["eval_steps"].append(step)
          history["accuracy"].append(float(accuracy))
          history["underflow"].append(float(underflow))
          print(f"  [{name:>19}] step {step:5d}  loss {loss:.4f}  test acc "
                f"{accuracy:6.2%}  loss scale {scale:8.0f}  underflowed "
                f"gradient entries {underflow:6.2%}", flush=True)
      skipped = int(sess.run(t["skipped"]))
    writer.close()
  row = dict(name=name, accuracy=history["accuracy"][-1],
             loss=float(np.mean(history["loss"][-args.eval_every:])),
             skipped=skipped, scale=history["scale"][-1],
             underflow=float(np.mean(history["underflow"])))
  return history, row


def print_table(rows: List[dict]) -> None:
  """Prints the end-of-run table (Markdown)."""
  print("| run                 | test accuracy | final training loss "
        "| skipped steps | final loss scale | underflowed gradient entries |")
  print("|---------------------|---------------|---------------------"
        "|---------------|------------------|------------------------------|")
  for r in rows:
    scale = f"{r['scale']:.0f}" if r["name"].endswith("scaling") else "1"
    print(f"| {r['name']:<19} | {r['accuracy']:>13.2%} | {r['loss']:>19.4f} "
          f"| {r['skipped']:>13d} | {scale:>16} | {r['underflow']:>28.2%} |")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
  """The demo's flags; `--steps` shortens it (the test uses a few steps)."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=1500)
  parser.add_argument("--batch_size", type=int, default=0,
                      help="0 (default): every step uses the whole training set")
  parser.add_argument("--depth", type=int, default=4, help="hidden layers")
  parser.add_argument("--width", type=int, default=128)
  parser.add_argument("--init_std", type=float, default=0.02)
  parser.add_argument("--learning_rate", type=float, default=0.1)
  parser.add_argument("--momentum", type=float, default=0.9)
  parser.add_argument("--weight_decay", type=float, default=5e-4)
  parser.add_argument("--eval_every", type=int, default=50)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--logdir", default=os.path.join("runs", "digits"))
  parser.add_argument("--png", default=None,
                      help="default: LOGDIR/digits_demo.png")
  args = parser.parse_args(argv)
  for flag in ("steps", "depth", "width", "eval_every"):
    if getattr(args, flag) < 1:
      parser.error(f"--{flag} must be >= 1, got {getattr(args, flag)}")
  if args.batch_size < 0:
    parser.error(f"--batch_size must be >= 0, got {args.batch_size}")
  args.png = args.png or os.path.join(args.logdir, "digits_demo.png")
  return args


def main(argv: Optional[List[str]] = None) -> None:
  """Runs the three trainings, draws the PNG, prints the table."""
  args = parse_args(argv)
  tf.config.experimental.enable_op_determinism()
  data = load_data()
  for name, _, _ in RUNS:  # A fresh folder per run: no stale event files.
    shutil.rmtree(os.path.join(args.logdir, folder(name)), ignore_errors=True)
  print(f"digits: {len(data[0])} train / {len(data[1])} test images; "
        f"{args.depth}x{args.width} ReLU MLP (init std {args.init_std}), "
        f"momentum SGD, weight decay {args.weight_decay}, {args.steps} steps "
        f"of {args.batch_size or len(data[0])} images")
  start_all, histories, rows = time.time(), {}, []
  for name, dtype, scaled in RUNS:
    start = time.time()
    histories[name], row = train(name, dtype, scaled, data, args)
    rows.append(row)
    print(f"  [{name:>19}] done in {time.time() - start:.0f}s", flush=True)
  os.makedirs(os.path.dirname(os.path.abspath(args.png)), exist_ok=True)
  demo_plot.plot_runs(
      histories, args.png,
      f"scikit-learn digits, {args.depth}x{args.width} ReLU MLP: "
      "float16 without loss scaling falls behind; with dynamic loss scaling "
      "it tracks float32")
  print()
  print_table(rows)
  print(f"\nUnderflowed gradient entries: mean over the evaluations of the "
        "share of the float32 gradient's\nnon-zero entries that came out "
        "exactly zero in the run.")
  print(f"\nWall time {time.time() - start_all:.0f}s. Picture: {args.png}")
  print(f"TensorBoard: tensorboard --logdir {args.logdir}")


if __name__ == "__main__":
  main()
