"""Loss scaling adds ops and kernels that do not grow with N.

Counted, not timed (so independent of load): the train ops of
`benchmarks/scaling.py` on a chain of N layers of 32x32, in fresh graphs.
Kernels are the nodes a traced step ran (FULL_TRACE step stats); ops are
the nodes of the GraphDef. The ops added differ by at most one per stack
of the unscale (`STACK_CHUNKS` of them): what the check reads of a held
stack depends on its size (`_step.held_check`). Fewer kernels run as N
grows: the float32 gradients of the chain are casts of float16 ones, which
the unscale holds and casts itself behind the gate, so the casts backprop
built per variable never run: on this chain the step runs 2 kernels fewer
per variable than bare does.
"""

import pathlib

from absl.testing import parameterized
import pytest
import tensorflow as tf

from benchmarks import scaling
from mp_optimizer._step import unscale

v1 = tf.compat.v1
ROOT = pathlib.Path(__file__).resolve().parents[2]
# Any count that grows with N differs between 16, 100 and 300 variables;
# from 16 on, the chain's gradients fill all `STACK_CHUNKS` (eight) stacks.
SIZES = (16, 100, 300)
# Kernels a fixed scale (check and gate, no scale update) may add to bare at
# the smallest N: among them the unscale's eight stacks of the chain's
# float16 gradients (each a Pack, IsFinite and All before the gate, read on
# its 16 bits, and a Cast, Mul and Unpack behind it: 48), the check's range
# flag on 1/S and the join of the flags (LessEqual, its Const, Pack and All:
# 4), less backprop's casts of the gradients, which no longer run (2 kernels
# per variable, 32 at N=16). More, smaller stacks keep what the check makes
# of each small (tests/benchmarks/test_memory.py).
FIXED_LIMIT = 40
# Kernels the dynamic scale may add on a finite step with no growth due:
# the fixed scale's (40), the mutex and the state's variable handles, the
# scale's read, reciprocal and range check, the start of backprop (not
# constant-folded once the scale is a variable), and the locked
# `good_steps += 1` (the rest of the state machine does not run).
DYNAMIC_LIMIT = 71


def _counts(size: int, inner: str, name: str):
  built = scaling.Built(size, inner, scaling.CONTENDERS[name][1])
  built.session.close()
  return built.kernels, built.ops


@pytest.mark.long_run
class CountsTest(parameterized.TestCase):

  @parameterized.named_parameters(("sgd", "sgd", SIZES),
                                  ("adam", "adam", SIZES[:2]))
  def test_ops_and_kernels_added_do_not_grow(self, inner, sizes):
    added = {name: [] for name in ("ours", "ours_fixed")}
    for size in sizes:
      bare_kernels, bare_ops = _counts(size, inner, "bare")
      for name, rows in added.items():
        kernels, ops = _counts(size, inner, name)
        rows.append((kernels - bare_kernels, ops - bare_ops))
    for name, rows in added.items():
      kernels = [kernels for kernels, _ in rows]
      ops = [ops for _, ops in rows]
      self.assertEqual(ops, sorted(ops, reverse=True),
                       f"{name}: ops added at N={sizes}: {rows}")
      self.assertLessEqual(max(ops) - min(ops), unscale.STACK_CHUNKS,
                           f"{name}: ops added at N={sizes}: {rows}")
      self.assertEqual(kernels, sorted(kernels, reverse=True),
                       f"{name}: kernels added at N={sizes}: {rows}")
    self.assertLessEqual(added["ours_fixed"][0][0], FIXED_LIMIT)
    self.assertLessEqual(added["ours"][0][0], DYNAMIC_LIMIT)

  def test_performance_page_states_these_sizes_and_limits(self):
    text = " ".join((ROOT / "docs" / "performance.md").read_text(
        encoding="utf-8").split())
    self.assertIn(
        f"on chains of {SIZES[0]}, {SIZES[1]} and {SIZES[2]} variables "
        f"({SIZES[0]} and {SIZES[1]} with Adam)", text)
    self.assertIn(f"at {SIZES[0]} a dynamic scale adds {DYNAMIC_LIMIT} or "
                  f"fewer, a fixed one {FIXED_LIMIT} or fewer", text)


if __name__ == "__main__":
  tf.test.main()
