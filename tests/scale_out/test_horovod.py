"""Horovod: our optimizer outside `hvd.DistributedOptimizer`.

Two ranks on this machine (`horovodrun --gloo`), started by the test and
killed with their process group at the deadline. Skipped where Horovod is
not installed: it builds from source against the installed TensorFlow.
"""

import os
import pathlib
import sys

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

from tests.workers import launch
from tests.workers import replicated

hvd = pytest.importorskip(
    "horovod.tensorflow",
    reason="horovod is not installed (it is built from source against the "
           "installed TensorFlow; see docs/training-loops.md)")
# Imports horovod itself, so only after the check above.
from tests.workers import horovod_worker  # pylint: disable=C0413

TIMEOUT_SECONDS = 300
RANKS = replicated.REPLICAS
HOROVODRUN = [str(pathlib.Path(sys.executable).parent / "horovodrun"),
              "-np", str(RANKS), "-H", f"localhost:{RANKS}", "--gloo"]


def _load(path: str) -> dict:
  with np.load(path) as data:
    return {name: data[name] for name in data.files}


class HorovodTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.out_dir = launch.scratch_dir(cls.addClassCleanup)
    logs = launch.scratch_dir(cls.addClassCleanup)
    cls.finished = launch.wait_all(
        [launch.Worker("horovod_worker.py", [cls.out_dir], logs,
                       launcher=HOROVODRUN)], TIMEOUT_SECONDS)

  def results(self, case: str) -> list:
    self.assertEqual(self.finished[0].returncode, 0,
                     launch.describe(self.finished))
    return [_load(os.path.join(self.out_dir, f"{rank}_{case}.npz"))
            for rank in range(RANKS)]

  def test_one_rank_overflowing_skips_every_rank(self):
    ranks = self.results("schedule")
    for name in ranks[0]:
      self.assertEqual(ranks[0][name].tobytes(), ranks[1][name].tobytes(),
                       name)
    self.assertEqual(list(ranks[0]["scales"]),
                     replicated.EXPECTED_SCALES["tf2"])
    applied_so_far = list(np.cumsum(replicated.APPLIED))
    self.assertEqual(list(ranks[0]["steps"]), applied_so_far)
    reference = replicated.reference_weights(average=True)
    for w, applied in zip(ranks[0]["ws"], applied_so_far):
      np.testing.assert_allclose(w, reference[applied], rtol=1e-5, atol=1e-6)

  def test_fp16_compression_carries_scaled_gradients_only_when_outside(self):
    # One SGD step (learning rate 1) from w = 0 moves w by -gradient.
    for rank in self.results("tiny_ours_outside"):
      np.testing.assert_allclose(rank["w"], -horovod_worker.TINY_GRADIENTS,
                                 rtol=1e-3)
    for rank in self.results("tiny_hvd_outside"):
      np.testing.assert_array_equal(rank["w"], np.zeros(3, np.float32))

  def test_overflow_in_compression_is_seen_and_skipped(self):
    for rank in self.results("huge_scale"):
      self.assertEqual(list(rank["steps"]), [0, 0])
      self.assertEqual(list(rank["scales"]), [2.0**29, 2.0**28])


if __name__ == "__main__":
  tf.test.main()
