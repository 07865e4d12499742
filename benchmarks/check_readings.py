"""What each reading of a held float16 gradient costs, kernel by kernel.

    python benchmarks/check_readings.py [--sizes 8192,24576,...]
        [--steps 60] [--output BENCHMARKS.md] [--smoke]

Before the gate, the finite check reads a held float16 tensor in one of two
ways, chosen by its size (`mp_optimizer._step.held_check`): `is_finite` on
its 16 bits (`IsFinite`, then `All`) or a float32 sum of its cast (`Cast`,
then `Sum`). Here both readings of one float16 variable of each size are
built in one graph and run in turn, each alone in its Session run, traced
(FULL_TRACE); a kernel's time is its own (`op_end_rel_micros`), the median
over the traced steps. The table says which reading was cheaper at each
size and which the rule picks; the closing line counts where they agree.
These are the costs the rule's bounds come from: TensorFlow's CPU kernels
hand a reduction to more threads above a size of their own.
"""

import argparse
import collections
import os
import platform
import statistics
import sys
from typing import Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # After the sys.path line above, as all below.
import tensorflow as tf

from mp_optimizer._step import held_check
from benchmarks import scaling_report
from benchmarks import sections

v1 = tf.compat.v1
SIZES = (4096, 8192, 16384, 24576, 32768, 65536, 98304, 106496, 110592,
         131072, 262144, 1048576)
READINGS = {"bits": ("IsFinite", "All"), "sum": ("Cast", "Sum")}
# Readings closer than this are called even: a trace's times are whole us.
EVEN_US = 2.0


def _kernel_us(session: v1.Session, fetch, kinds) -> Dict[str, float]:
  """Each kernel of `kinds` in one traced run of `fetch`: its own us."""
  metadata = v1.RunMetadata()
  session.run(fetch, options=v1.RunOptions(
      trace_level=v1.RunOptions.FULL_TRACE), run_metadata=metadata)
  out = collections.Counter()
  for device in metadata.step_stats.dev_stats:
    for node in device.node_stats:
      kind = node.timeline_label.partition(" = ")[2].partition("(")[0]
      if kind in kinds:
        out[kind] += node.op_end_rel_micros
  return out


def measure(size: int, steps: int) -> Dict[str, Dict[str, float]]:
  """{reading: {kernel: median us}} for a float16 tensor of `size`."""
  graph = tf.Graph()
  with graph.as_default():
    values = np.random.default_rng(0).standard_normal(size)
    held = v1.get_variable("held", initializer=values.astype(np.float16))
    read = held.read_value()
    fetches = {"bits": tf.reduce_all(tf.math.is_finite(read)),
               "sum": tf.reduce_sum(tf.cast(read, tf.float32))}
    init = v1.global_variables_initializer()
  times = {name: collections.defaultdict(list) for name in READINGS}
  with v1.Session(graph=graph) as session:
    session.run(init)
    for step in range(steps + 2):
      for name, fetch in fetches.items():
        traced = _kernel_us(session, fetch, READINGS[name])
        if step >= 2:  # The first runs allocate and warm up.
          for kind in READINGS[name]:
            times[name][kind].append(traced[kind])
  return {name: {kind: statistics.median(times[name][kind])
                 for kind in READINGS[name]} for name in READINGS}


def rule(size: int) -> str:
  """The reading `held_check` picks for a held float16 tensor of `size`."""
  return "bits" if held_check.reads_bits(tf.float16, size) else "sum"


def cheaper(costs: Dict[str, Dict[str, float]]) -> str:
  """"bits", "sum", or "even" (within `EVEN_US`)."""
  bits, total = (sum(costs[name].values()) for name in ("bits", "sum"))
  if abs(bits - total) <= EVEN_US:
    return "even"
  return "bits" if bits < total else "sum"


def section(rows: List[tuple], steps: int, load) -> str:
  """The Markdown section for `rows` of (size, costs)."""
  agree = sum(cheaper(costs) in ("even", rule(size)) for size, costs in rows)
  lines = [
      sections.READINGS_BEGIN,
      "## What the check's two readings of a float16 gradient cost", "",
      f"`python benchmarks/check_readings.py` on {platform.platform()}, "
      f"{os.cpu_count()} cores, TF {tf.__version__}, load average "
      f"{load[0]:.2f} at the start and {load[1]:.2f} at the end. Each "
      "kernel's own time (FULL_TRACE `op_end_rel_micros`), median of "
      f"{steps} traced runs of each reading alone. \"bits\" is "
      "`reduce_all(is_finite(x))`, \"sum\" is "
      "`reduce_sum(cast(x, float32))`; \"even\" is within "
      f"{EVEN_US:.0f} us. The rule is `held_check`'s (at most "
      f"{held_check.SMALL_BITS_MAX_ELEMENTS:,} entries or above "
      f"{held_check.FLOAT16_SUM_MAX_ELEMENTS:,}: bits).", "",
      "| entries | IsFinite us | All us | Cast us | Sum us | bits us | "
      "sum us | cheaper | the rule reads |",
      "|---|---|---|---|---|---|---|---|---|"]
  for size, costs in rows:
    bits, total = costs["bits"], costs["sum"]
    lines.append(
        f"| {size:,} | {bits['IsFinite']:.1f} | {bits['All']:.1f} | "
        f"{total['Cast']:.1f} | {total['Sum']:.1f} | "
        f"{sum(bits.values()):.1f} | {sum(total.values()):.1f} | "
        f"{cheaper(costs)} | {rule(size)} |")
  lines += ["", f"The rule reads the cheaper way (or one within {EVEN_US:.0f} "
            f"us of it) at {agree} of {len(rows)} sizes.", "",
            sections.READINGS_END]
  return "\n".join(lines)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
  parser.add_argument("--steps", type=int, default=60)
  parser.add_argument("--smoke", action="store_true",
                      help="two small sizes, two traced runs each")
  parser.add_argument("--output", default="BENCHMARKS.md",
                      help="file whose readings section to rewrite, "
                           "relative to the repository root ('' for none)")
  args = parser.parse_args(argv)
  sizes = [int(size) for size in args.sizes.split(",") if size]
  if args.smoke:
    sizes, args.steps = [64, 16384], 2
  load_start = os.getloadavg()[0]
  rows = [(size, measure(size, args.steps)) for size in sizes]
  text = section(rows, args.steps, (load_start, os.getloadavg()[0]))
  print(text)
  if args.output:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sections.replace(os.path.join(root, args.output), sections.READINGS_BEGIN,
                     sections.READINGS_END, text, before=scaling_report.BEGIN)
    print(f"\nWrote {args.output}")


if __name__ == "__main__":
  main()
