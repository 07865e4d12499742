"""Clean-step cost of each opt-in option, side by side in one run.

    python benchmarks/options.py [--seconds 60] [--shape many_small]
        [--output BENCHMARKS.md] [--smoke]

Contenders on one model shape (default many_small: 100 layers of 64x64, 200
variables), each in its own graph and Session, every step finite: our
optimizer around Adam with every option off, a second identical copy (the
noise floor: how far two equal graphs differ on this machine), and one per
option turned on: `overflow_report=True`,
`overflow_report=OverflowReport(first_nonfinite_op=True)` and
`precision_telemetry=True`. They are timed in interleaved rounds
(`benchmarks.timing`); the per-round ratios against "off", the ops in each
graph and the kernels one traced clean step ran (the reports' ops sit on
the skipped side of the gate, so a clean step should run none of them) are
printed and written to the options section of the output file
(`benchmarks.sections`), with the load average beside the timing.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # After the sys.path line above, as all below.

from mp_optimizer import managers
import mp_optimizer
from benchmarks import implementations as impls
from benchmarks import scaling_report
from benchmarks import sections
from benchmarks import shapes
from benchmarks import steps

v1 = tf.compat.v1


def _train_op(**options):
  def make(loss, global_step):
    opt = mp_optimizer.LossScaleOptimizer(
        impls.inner_optimizer(),
        managers.ExponentialUpdateLossScaleManager(impls.INITIAL_SCALE,
                                                   impls.GROWTH_STEPS),
        **options)
    return opt.minimize(loss, global_step=global_step)
  return make


CONTENDERS = {  # name: (label, options)
    "off": ("every option off", {}),
    "off_again": ("every option off, a second copy (noise floor)", {}),
    "report": ("overflow_report=True", {"overflow_report": True}),
    "first_op": ("OverflowReport(first_nonfinite_op=True)",
                 {"overflow_report": mp_optimizer.overflow.OverflowReport(
                     first_nonfinite_op=True)}),
    "telemetry": ("precision_telemetry=True", {"precision_telemetry": True}),
}


def _section(shape, counts, rounds, ratios, load) -> str:
  rows = [f"| {CONTENDERS[name][0]} | {ops} | {kernels} | "
          + ("1 (reference)" if name == "off" else
             f"{ratios[name].median:.3f} ({ratios[name].low:.3f}-"
             f"{ratios[name].high:.3f}; CI {ratios[name].ci_low:.3f}-"
             f"{ratios[name].ci_high:.3f})") + " |"
          for name, (ops, kernels) in counts.items()]
  return "\n".join([
      sections.OPTIONS_BEGIN, "## Opt-in options: clean-step cost", "",
      f"`python benchmarks/options.py` on {shape.name} ({shape.label}), "
      f"TF {tf.__version__}, {rounds} interleaved rounds, load average "
      f"{load[0]:.2f} at the start and {load[1]:.2f} at the end. Step time "
      "is the median per-round ratio to \"every option off\" (quartiles; "
      "95% interval of the median); kernels are those one traced clean "
      "step ran.", "",
      "| contender | ops in graph | kernels in a clean step | step time "
      "÷ off |", "|---|---|---|---|", *rows, "", sections.OPTIONS_END])


def _executed_ops(step: steps.Step) -> int:
  metadata = v1.RunMetadata()
  step.session.run(step.train_op, options=v1.RunOptions(
      trace_level=v1.RunOptions.FULL_TRACE), run_metadata=metadata)
  step.runs += 1
  return sum(len(device.node_stats)
             for device in metadata.step_stats.dev_stats)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seconds", type=float, default=60.0)
  parser.add_argument("--shape", default="many_small", choices=shapes.SHAPES)
  parser.add_argument("--smoke", action="store_true",
                      help="a tiny model and one round")
  parser.add_argument("--output", default="BENCHMARKS.md",
                      help="file whose options section to rewrite, relative "
                           "to the repository root ('' to write none)")
  args = parser.parse_args(argv)
  shape = shapes.SHAPES[args.shape]
  if args.smoke:
    shape = shapes.smoke(shape)
  make_loss = lambda: shape.build(shape.size)
  contenders = {name: steps.build(make_loss, _train_op(**options))
                for name, (_, options) in CONTENDERS.items()}
  print(f"shape: {shape.name} ({shape.label}), "
        f"{contenders['off'].trainable_variables} variables, TF {tf.__version__}")
  counts = {name: (len(step.graph.get_operations()), _executed_ops(step))
            for name, step in contenders.items()}
  for name, (ops, kernels) in counts.items():
    print(f"  {name:9s} ops in graph {ops:5d}, executed in a clean step "
          f"{kernels:5d}")
  rounds, ratios, load = steps.side_by_side(contenders, "off", args.seconds,
                                            args.smoke)
  steps.close_clean(contenders)
  if args.output:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sections.replace(os.path.join(root, args.output), sections.OPTIONS_BEGIN,
                     sections.OPTIONS_END,
                     _section(shape, counts, len(rounds["off"]), ratios, load),
                     before=scaling_report.BEGIN)
    print(f"\nWrote {args.output}")


if __name__ == "__main__":
  main()
