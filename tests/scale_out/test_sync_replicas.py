"""SyncReplicasOptimizer around the loss-scale optimizer, on a real cluster.

`SyncReplicasOptimizer(LossScaleOptimizer(...))`: the chief checks the
aggregated gradients once per round, so a round is skipped for every worker
or for none. A skipped round must still release the workers: the tokens it
hands out carry `global_step`, which therefore counts skipped rounds too.
The cluster (1 ps + 2 workers on 127.0.0.1, tests/workers/sync_replicas.py)
poisons rounds 2 and 5 of 8; before, it deadlocked at round 2. The other
order cannot work (the chief's queue runner would apply gradients gated on
a check it cannot run) and is refused.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.workers import launch
from tests.workers import ps_cluster
from tests.workers import sync_replicas

v1 = tf.compat.v1
TIMEOUT_SECONDS = 115  # Each cluster stays under two minutes.


def _expected_w():
  """GD on sum(w**2) in float32 for each applied round (the gradient is 2w)."""
  w = sync_replicas.INITIAL_W.copy()
  for _ in range(sync_replicas.ROUNDS - len(sync_replicas.POISONED)):
    w = w - np.float32(sync_replicas.LEARNING_RATE) * (np.float32(2) * w)
  return w


class SyncReplicasClusterTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.finished, cls.results = ps_cluster.run(
        cls.addClassCleanup, "sync_replicas.py", [], TIMEOUT_SECONDS)

  @parameterized.named_parameters(("chief", 0), ("other_worker", 1))
  def test_skipped_rounds_release_the_workers(self, index):
    self.assertEqual([f.returncode for f in self.finished], [0, 0, 0],
                     launch.describe(self.finished))
    result = self.results[index]
    self.assertNotIn("deadlock", result, result)
    self.assertEqual(result["global_step"], sync_replicas.ROUNDS)
    # The chief skips the poisoned rounds; the count lives on the ps, where
    # SyncReplicasOptimizer builds the apply, so both workers read it. It
    # was a LOCAL variable, and the other worker's
    # local_variables_initializer() reset it when that worker started after
    # a skipped round: the chief then read 0 in about one run in six.
    self.assertEqual(result["skipped_steps"], len(sync_replicas.POISONED))
    self.assertEqual(result["scale"], sync_replicas.START /
                     2**len(sync_replicas.POISONED))
    np.testing.assert_array_equal(np.float32(result["w"]), _expected_w())


class WrappingOrderTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("contrib_door", lambda opt: mp_optimizer.LossScaleOptimizer(
          opt, managers.FixedLossScaleManager(128))),
      ("tf2_door", lambda opt: mp_optimizer.MixedPrecisionLossScaleOptimizer(
          opt, "dynamic")))
  def test_loss_scaling_outside_sync_replicas_is_refused(self, wrap):
    with tf.Graph().as_default():
      sync = v1.train.SyncReplicasOptimizer(
          v1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=2)
      with self.assertRaisesRegex(ValueError,
                                  "SyncReplicasOptimizer.*other way round"):
        wrap(sync)


if __name__ == "__main__":
  tf.test.main()
