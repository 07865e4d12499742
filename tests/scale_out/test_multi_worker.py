"""MultiWorkerMirroredStrategy: two worker processes on 127.0.0.1.

Each worker is a separate process driven by `TF_CONFIG`, one replica each,
reducing with collective all-reduce. Worker i poisons its own loss at the
steps `replicated.SCHEDULE` names it. Every worker must skip those steps, back
off the scale once, and end with bit-identical variables; the clean steps
must give what TF's own optimizer gives on one device.

Two routes for graph code: a v1 graph and Session on a `tf.distribute.Server`
(every TF version), and Estimator's `train_distribute` (TF <= 2.15). Each
cluster runs under a deadline; its process groups are killed when it passes.
"""

import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tests.workers import estimator_model
from tests.workers import launch
from tests.workers import replicated

TIMEOUT_SECONDS = 300  # A cluster needs 10-20 s; the rest is for a busy host.
EXPECTED_STEPS = list(np.cumsum(replicated.APPLIED))


def run_cluster(add_cleanup, script: str, make_args):
  """Runs `script` as worker 0 and 1 of a loopback cluster.

  Args:
    add_cleanup: Registers the removal of the directories made here.
    script: The worker script in tests/workers.
    make_args: `make_args(out_dir, index)` gives worker `index`'s arguments.

  Returns:
    (out_dir, one `launch.Finished` per worker).
  """
  out_dir = launch.scratch_dir(add_cleanup)
  logs = launch.scratch_dir(add_cleanup)
  ports = launch.free_ports(replicated.REPLICAS)
  workers = [
      launch.Worker(script, make_args(out_dir, index), logs,
                    env={"TF_CONFIG": launch.tf_config(ports, index)})
      for index in range(replicated.REPLICAS)]
  return out_dir, launch.wait_all(workers, TIMEOUT_SECONDS)


def load(path: str) -> dict:
  with np.load(path) as data:
    return {name: data[name] for name in data.files}


class _AgreementAssertions(parameterized.TestCase):

  def assert_all_exited_cleanly(self, finished) -> None:
    self.assertEqual([f.returncode for f in finished],
                     [0] * replicated.REPLICAS, launch.describe(finished))

  def assert_workers_identical(self, results) -> None:
    first = results[0]
    for other in results[1:]:
      self.assertEqual(sorted(first), sorted(other))
      for name in first:
        self.assertEqual(first[name].tobytes(), other[name].tobytes(), name)


class GraphMultiWorkerTest(_AgreementAssertions):
  """v1 graph + Session on each worker's server: every TF version."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # One cluster trains every manager (one graph, one model each).
    cls.out_dir, cls.finished = run_cluster(
        cls.addClassCleanup, "multi_worker_graph.py",
        lambda out, _: [out, *sorted(replicated.MANAGERS)])
    cls.reference = replicated.reference_weights()

  def results(self, manager: str) -> list:
    self.assert_all_exited_cleanly(self.finished)
    return [load(os.path.join(self.out_dir, f"{index}_{manager}.npz"))
            for index in range(replicated.REPLICAS)]

  @parameterized.named_parameters(
      (name, name) for name in sorted(replicated.MANAGERS))
  def test_one_worker_overflowing_skips_every_worker(self, manager):
    results = self.results(manager)
    self.assert_workers_identical(results)
    self.assertEqual(list(results[0]["scales"]),
                     replicated.EXPECTED_SCALES[manager])
    self.assertEqual(list(results[0]["steps"]), EXPECTED_STEPS)
    for w, applied_so_far in zip(results[0]["ws"], EXPECTED_STEPS):
      np.testing.assert_allclose(w, self.reference[applied_so_far],
                                 rtol=1e-5, atol=1e-6)


@parameterized.named_parameters(
    (name, name) for name in sorted(estimator_model.MANAGERS))
class EstimatorMultiWorkerTest(_AgreementAssertions):
  """Estimator `train_distribute` + `train_and_evaluate`: TF <= 2.15."""

  def setUp(self):
    super().setUp()
    if not hasattr(tf, "estimator"):
      self.skipTest(f"TensorFlow {tf.__version__} has no tf.estimator "
                    "(removed in 2.16); the v1-graph route above is the "
                    "multi-worker route there")

  def test_one_worker_overflowing_skips_every_worker(self, manager):
    out_dir, finished = run_cluster(
        self.addCleanup, "multi_worker_estimator.py",
        lambda out, index: [os.path.join(out, f"{index}.npz"),
                            os.path.join(out, "model"), manager])
    self.assert_all_exited_cleanly(finished)
    results = [load(os.path.join(out_dir, f"{index}.npz"))
               for index in range(replicated.REPLICAS)]
    self.assert_workers_identical(results)
    # The same table as the graph route, from 1024 instead of 8.
    self.assertEqual(list(results[0]["scales"]),
                     [128 * s for s in replicated.EXPECTED_SCALES["tf2"]])
    self.assertEqual(list(results[0]["steps"]), EXPECTED_STEPS)
    self.assertFalse(np.array_equal(results[0]["w"], np.zeros((4, 1))))


if __name__ == "__main__":
  tf.test.main()
