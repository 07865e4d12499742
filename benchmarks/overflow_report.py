"""Clean-step cost of `overflow_report=True`, side by side in one run.

    python benchmarks/overflow_report.py [--seconds 60] [--shape many_small]
        [--smoke]

Three contenders on one model shape (default many_small: 100 layers of
64x64, 200 variables), each in its own graph and Session, every step finite:
our optimizer around Adam with the report off, a second identical copy with
it off (the noise floor: how far two equal graphs differ on this machine),
and one with it on. They are timed in interleaved rounds
(`benchmarks.timing`) and the per-round ratios against "off" are printed.
Also printed: ops in each graph, and ops executed in one traced clean step
(the report's ops are built but sit on the skipped side of the gate, so on a
clean step none of them should run).
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
from benchmarks import shapes
from benchmarks import steps
from benchmarks import timing

v1 = tf.compat.v1


def _train_op(report: bool):
  def make(loss, global_step):
    opt = mp_optimizer.LossScaleOptimizer(
        impls.inner_optimizer(),
        managers.ExponentialUpdateLossScaleManager(impls.INITIAL_SCALE,
                                                   impls.GROWTH_STEPS),
        overflow_report=report)
    return opt.minimize(loss, global_step=global_step)
  return make


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
  args = parser.parse_args(argv)
  shape = shapes.SHAPES[args.shape]
  if args.smoke:
    shape = shapes.smoke(shape)
  make_loss = lambda: shape.build(shape.size)
  contenders = {
      "off": steps.build(make_loss, _train_op(False)),
      "off_again": steps.build(make_loss, _train_op(False)),
      "on": steps.build(make_loss, _train_op(True)),
  }
  print(f"shape: {shape.name} ({shape.label}), "
        f"{contenders['on'].trainable_variables} variables, TF {tf.__version__}")
  for name, step in contenders.items():
    print(f"  {name:9s} ops in graph {len(step.graph.get_operations()):5d}, "
          f"executed in a clean step {_executed_ops(step):5d}")
  rounds = timing.interleaved({name: step.run
                               for name, step in contenders.items()},
                              args.seconds,
                              min_rounds=1 if args.smoke else timing.MIN_ROUNDS)
  print(f"{len(rounds['off'])} interleaved rounds; median clean step "
        f"(off) {timing.step_seconds(rounds, 'off') * 1e3:.3f} ms")
  for name in ("off_again", "on"):
    r = timing.ratio(rounds, name, "off")
    print(f"  {name:9s}/ off: median {r.median:.4f} (quartiles {r.low:.4f}"
          f"-{r.high:.4f}; 95% CI of the median {r.ci_low:.4f}-"
          f"{r.ci_high:.4f})")
  for name, step in contenders.items():
    if step.steps_applied() != step.runs:
      raise RuntimeError(f"{name}: {step.runs - step.steps_applied()} steps "
                         "were skipped; the benchmark needs clean steps")
    step.close()


if __name__ == "__main__":
  main()
