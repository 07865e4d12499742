"""bfloat16 vs float32 step time on this machine, side by side in one run.

    python benchmarks/bfloat16.py [--seconds 60] [--width 1024] [--layers 4]
        [--batch 256] [--output BENCHMARKS.md] [--smoke]

One MLP (`--layers` dense layers of `--width` units, ReLU, batch `--batch`),
trained with Adam under `LossScaleOptimizer(..., managers.NoLossScale())`,
each contender in its own graph and Session, every step finite:

* float32: the model as written, no rewrite;
* oneDNN rewrite: the same float32 graph in a Session whose config turns on
  TensorFlow's `auto_mixed_precision_onednn_bfloat16` pass
  (`mp_optimizer.bfloat16_session_config`);
* bfloat16 model: the model written in bfloat16 (activations and matmuls),
  float32 master weights (`float32_master_weights`).

They are timed in interleaved rounds (`benchmarks.timing`): the per-round
ratios to float32 are printed and written to the bfloat16 section of the
output file (`benchmarks.sections`) with the CPU's name and its bfloat16
flags. On a CPU without AVX512-BF16 or AMX TensorFlow skips the rewrite and
the bfloat16 kernels are emulated: the table then says so.
"""

import argparse
import os
import platform
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # After the sys.path line above, as all below.
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from benchmarks import scaling_report
from benchmarks import sections
from benchmarks import steps
from benchmarks import timing

v1 = tf.compat.v1
LABELS = {"float32": "float32 (reference)",
          "rewrite": "float32 graph + oneDNN bfloat16 rewrite",
          "bfloat16": "bfloat16 model, float32 master weights"}


def _model(width: int, layers: int, batch: int, dtype: tf.DType):
  """The MLP's float32 loss; its matmuls in `dtype`."""
  def make_loss() -> tf.Tensor:
    rng = np.random.RandomState(0)
    hidden = tf.cast(tf.constant(rng.randn(batch, width).astype(np.float32)),
                     dtype)
    with mp_optimizer.float32_master_weights():
      for layer in range(layers):
        kernel = v1.get_variable(
            f"dense_{layer}/kernel", [width, width], dtype,
            v1.initializers.glorot_uniform(layer))
        hidden = tf.nn.relu(tf.matmul(hidden, kernel))
    return tf.reduce_mean(tf.square(tf.cast(hidden, tf.float32)))
  return make_loss


def _train_op(loss: tf.Tensor, global_step: tf.Variable) -> tf.Operation:
  opt = mp_optimizer.LossScaleOptimizer(v1.train.AdamOptimizer(1e-4),
                                        managers.NoLossScale())
  return opt.minimize(loss, global_step=global_step)


def _cpu_name() -> str:
  if os.path.exists("/proc/cpuinfo"):
    with open("/proc/cpuinfo") as lines:
      for line in lines:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  return platform.processor() or "unknown CPU"


def _section(args, rounds, ratios, load) -> str:
  flags = mp_optimizer.bfloat16_cpu_flags()
  flag_text = (", ".join(sorted(flags)) if flags else
               "neither avx512_bf16 nor amx_bf16 (the rewrite is skipped, "
               "bfloat16 kernels are emulated)" if flags is not None else
               "unknown (no /proc/cpuinfo)")
  float32_ms = timing.step_seconds(rounds, "float32") * 1e3
  rows = [f"| {LABELS['float32']} | {float32_ms:.2f} | 1 |"]
  rows += [f"| {LABELS[name]} | "
           f"{timing.step_seconds(rounds, name) * 1e3:.2f} | "
           f"{r.median:.3f} ({r.low:.3f}-{r.high:.3f}; CI {r.ci_low:.3f}-"
           f"{r.ci_high:.3f}) |" for name, r in ratios.items()]
  return "\n".join([
      sections.BFLOAT16_BEGIN, "## bfloat16 vs float32", "",
      f"`python benchmarks/bfloat16.py` on {_cpu_name()} ({os.cpu_count()} "
      f"logical CPUs; bfloat16 flags: {flag_text}), TF {tf.__version__}: "
      f"{args.layers} dense layers of {args.width} units, batch "
      f"{args.batch}, Adam under `NoLossScale()`; {len(rounds['float32'])} "
      f"interleaved rounds, load average {load[0]:.2f} at the start and "
      f"{load[1]:.2f} at the end. Step time is each contender's median "
      "fastest step per round; the ratio is the median per-round ratio to "
      "float32 (quartiles; 95% interval of the median): below 1 is faster.",
      "", "| contender | step (ms) | step time ÷ float32 |", "|---|---|---|",
      *rows, "", sections.BFLOAT16_END])


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seconds", type=float, default=60.0)
  parser.add_argument("--width", type=int, default=1024)
  parser.add_argument("--layers", type=int, default=4)
  parser.add_argument("--batch", type=int, default=256)
  parser.add_argument("--smoke", action="store_true",
                      help="a tiny model and one round")
  parser.add_argument("--output", default="BENCHMARKS.md",
                      help="file whose bfloat16 section to rewrite, relative "
                           "to the repository root ('' to write none)")
  args = parser.parse_args(argv)
  if args.smoke:
    args.width, args.layers, args.batch = 8, 2, 4
  shape = (args.width, args.layers, args.batch)
  contenders = {
      "float32": steps.build(_model(*shape, tf.float32), _train_op),
      "rewrite": steps.build(_model(*shape, tf.float32), _train_op,
                             mp_optimizer.bfloat16_session_config()),
      "bfloat16": steps.build(_model(*shape, tf.bfloat16), _train_op)}
  print(f"{_cpu_name()}, bfloat16 flags {mp_optimizer.bfloat16_cpu_flags()}, "
        f"TF {tf.__version__}")
  rounds, ratios, load = steps.side_by_side(contenders, "float32",
                                            args.seconds, args.smoke)
  steps.close_clean(contenders)
  if args.output:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sections.replace(os.path.join(root, args.output), sections.BFLOAT16_BEGIN,
                     sections.BFLOAT16_END,
                     _section(args, rounds, ratios, load),
                     before=scaling_report.BEGIN)
    print(f"\nWrote {args.output}")


if __name__ == "__main__":
  main()
