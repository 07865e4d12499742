"""A BERT-style pre-training loop: fp16, loss scaling, clipping, accumulation.

A two-layer transformer encoder (`examples/bert_model.py`) learns a
masked-token task on generated data. Variables are float32 master weights;
matmuls, attention and the feed-forward run in float16; LayerNorm and
softmax statistics in float32.
The optimizer is BERT's recipe on top of `mp_optimizer`:

    LossScaleOptimizer(AdamWeightDecay(...), manager,
                       global_clipnorm=1.0, gradient_accumulation_steps=4)

By default it trains twice from the same start on the same data, once with
the usual dynamic scale (`ExponentialUpdateLossScaleManager(2**15, 100)`,
which grows the scale until a step overflows) and once with
`AmaxHistoryLossScaleManager` (which sets it from the gradients' size), and
checks that the second ends at the same loss (within 1%) with at least 10x
fewer skipped micro-steps; it exits 1 and says so if not.

Run with `make bert-demo`, or: python -m examples.bert_pretraining
[--manager exponential|amax]
"""

import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from examples import adamw
from examples import bert_model

v1 = tf.compat.v1


def learning_rate(global_step, args, peak=1e-3, warmup_share=0.1):
  """BERT's schedule: linear warmup, then linear decay to 0, per applied step.

  `global_step` counts applied (accumulated, finite) steps only, so skipped
  micro-steps do not move the schedule.
  """
  total = args.micro_steps // args.accumulation
  step = tf.cast(global_step, tf.float32)
  warmup = max(1.0, warmup_share * total)
  return peak * tf.minimum(step / warmup, 1.0) * tf.maximum(
      1.0 - step / total, 0.0)


PNG_KEY = "bert_demo_results"
LABELS = {"exponential": "ExponentialUpdateLossScaleManager(2**15, 100)",
          "amax": "AmaxHistoryLossScaleManager(2**15)"}
MANAGERS = {
    # BERT's usual dynamic scale: grow every 100 clean steps, shrink after
    # two overflows (contrib's defaults).
    "exponential": lambda: managers.ExponentialUpdateLossScaleManager(
        2**15, 100),
    # The scale set from the gradients' magnitude.
    "amax": lambda: managers.AmaxHistoryLossScaleManager(2**15),
}


def train(name: str, args: argparse.Namespace) -> dict:
  """Trains from the same start and data with one manager; returns results.

  The results hold the final loss (mean of the last `report_every`
  micro-steps), the skipped micro-steps and the final scale, and `history`:
  per micro-step, the loss, the scale after it and its float16 headroom
  (precision telemetry; NaN on a skipped micro-step), and the list of
  skipped micro-steps.
  """
  rng = np.random.RandomState(0)
  with tf.Graph().as_default():
    v1.set_random_seed(0)
    inputs = v1.placeholder(tf.int32, [None, bert_model.LENGTH])
    targets = v1.placeholder(tf.int32, [None, bert_model.LENGTH])
    mask = v1.placeholder(tf.float32, [None, bert_model.LENGTH])
    loss = bert_model.masked_lm_loss(inputs, targets, mask)
    global_step = v1.train.get_or_create_global_step()
    opt = mp_optimizer.LossScaleOptimizer(
        adamw.AdamWeightDecay(learning_rate(global_step, args),
                              weight_decay_rate=0.01),
        MANAGERS[name](), global_clipnorm=1.0,
        gradient_accumulation_steps=args.accumulation,
        precision_telemetry=True)
    train_op = opt.minimize(loss, global_step=global_step)
    report = {"scale": mp_optimizer.signals.loss_scale(),
              "skipped": mp_optimizer.skipped_steps(), "step": global_step}
    telemetry = mp_optimizer.signals.precision()
    after_step = {"scale": report["scale"],
                  "headroom_bits": telemetry["headroom_bits"],
                  "reason": telemetry["skip_reason"]}
    overflows = [i for i, reason in enumerate(mp_optimizer.signals.SKIP_REASONS)
                 if reason.startswith("overflow")]
    history = {"loss": [], "scale": [], "headroom_bits": [], "skipped": []}
    with v1.Session() as sess:
      sess.run(v1.global_variables_initializer())
      start = time.time()
      for micro_step in range(1, args.micro_steps + 1):
        tokens, masked, weights = bert_model.generate(rng, args.batch_size)
        _, value = sess.run([train_op, loss], {inputs: masked,
                                               targets: tokens, mask: weights})
        state = sess.run(after_step)  # What the micro-step just stored.
        history["loss"].append(float(value))
        history["scale"].append(float(state["scale"]))
        headroom = float(state["headroom_bits"])  # NaN/-Inf when skipped.
        history["headroom_bits"].append(
            headroom if np.isfinite(headroom) else float("nan"))
        if state["reason"] in overflows:
          history["skipped"].append(micro_step)
        if micro_step % args.report_every == 0:
          state = sess.run(report)
          print(f"{name:11s} micro-step {micro_step:4d}  applied steps "
                f"{state['step']:3d}  loss "
                f"{np.mean(history['loss'][-args.report_every:]):.3f}  loss "
                f"scale {state['scale']:8.0f}  skipped {state['skipped']}  "
                f"({time.time() - start:.0f}s)", flush=True)
      state = sess.run(report)
  return {"loss": float(np.mean(history["loss"][-args.report_every:])),
          "skipped": int(state["skipped"]), "scale": float(state["scale"]),
          "history": history}


def verdict(results: dict) -> tuple:
  """(holds, line): amax within 1% of exponential's loss, 10x fewer skips.

  The line starts with "As expected: " or "NOT as expected: ".
  """
  ours, theirs = results["amax"], results["exponential"]
  close = abs(ours["loss"] - theirs["loss"]) <= 0.01 * theirs["loss"]
  fewer = theirs["skipped"] >= 10 * max(ours["skipped"], 1)
  sentence = (
      f"final loss {ours['loss']:.4f} (amax) vs {theirs['loss']:.4f} "
      f"(exponential): {'within' if close else 'NOT within'} 1%; skipped "
      f"{ours['skipped']} vs {theirs['skipped']}: "
      f"{'at least' if fewer else 'NOT'} 10x fewer")
  holds = close and fewer
  return holds, ("As expected: " if holds else "NOT as expected: ") + sentence


def title(results: dict) -> str:
  """The picture's title: what was compared and the computed verdict."""
  return f"{LABELS['amax']} vs {LABELS['exponential']}\n{verdict(results)[1]}"


def draw(results: dict, path: str, micro_steps: int) -> None:
  """Writes the picture; its PNG metadata holds the numbers it shows."""
  from examples import bert_plot  # pylint: disable=import-outside-toplevel
  directory = os.path.dirname(path)
  if directory:
    os.makedirs(directory, exist_ok=True)
  summary = {name: {"loss": result["loss"], "skipped": result["skipped"],
                    "scale": result["scale"],
                    "skipped_marked": len(result["history"]["skipped"]),
                    "median_headroom_bits": float(np.nanmedian(
                        result["history"]["headroom_bits"]))}
             for name, result in results.items()}
  bert_plot.plot_runs({name: result["history"]
                       for name, result in results.items()}, LABELS, path,
                      title(results),
                      {PNG_KEY: json.dumps({"micro_steps": micro_steps,
                                            "runs": summary}, sort_keys=True)})


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--micro_steps", type=int, default=2400)
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--accumulation", type=int, default=4)
  parser.add_argument("--report_every", type=int, default=240)
  parser.add_argument("--manager", choices=sorted(MANAGERS) + ["compare"],
                      default="compare",
                      help="one manager, or both side by side (the default)")
  parser.add_argument("--png", default=os.path.join("runs", "bert",
                                                    "bert_demo.png"),
                      help="where the comparison's picture goes ('' for "
                           "none); needs matplotlib")
  args = parser.parse_args()
  model = bert_model
  print(f"encoder: {model.LAYERS} layers, hidden {model.HIDDEN}, "
        f"{model.HEADS} heads, sequence {model.LENGTH}; micro-batch "
        f"{args.batch_size} x {args.accumulation} accumulated, global-norm "
        "clip 1.0")
  names = sorted(MANAGERS) if args.manager == "compare" else [args.manager]
  results = {name: train(name, args) for name in names}
  for name, result in results.items():
    print(f"{name}: final loss {result['loss']:.4f}, skipped micro-steps "
          f"{result['skipped']}, final loss scale {result['scale']:g}")
  if args.manager == "compare":
    holds, line = verdict(results)
    print(line)
    if args.png:
      draw(results, args.png, args.micro_steps)
      print(f"Picture: {args.png}")
    if not holds:
      raise SystemExit(1)


if __name__ == "__main__":
  main()
