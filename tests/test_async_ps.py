"""Asynchronous parameter-server training: no halving of the scale is lost.

A real cluster on 127.0.0.1 (1 ps + 2 workers, each its own process, see
tests/workers/async_ps.py): the scale state lives on the ps, worker 0 runs
overflowing steps while worker 1 runs finite steps against the same state with
no synchronization. Every overflow must halve the scale; a finite step that
wrote the scale back would undo a halving made in between. The cluster runs
under a deadline; every process group is killed when the test ends.
"""

import json
import os

from absl.testing import parameterized
import tensorflow as tf

from tests.workers import async_ps
from tests.workers import launch

TIMEOUT_SECONDS = 115  # Each cluster stays under two minutes.
OVERFLOWS = 90


def run_cluster(add_cleanup, manager: str):
  out_dir = launch.scratch_dir(add_cleanup)
  logs = launch.scratch_dir(add_cleanup)
  ps_port, *worker_ports = launch.free_ports(3)
  cluster = json.dumps({
      "ps": [f"{launch.LOOPBACK}:{ps_port}"],
      "worker": [f"{launch.LOOPBACK}:{port}" for port in worker_ports]})
  tasks = [("ps", 0), ("worker", 0), ("worker", 1)]
  processes = [
      launch.Worker("async_ps.py", [out_dir, cluster, job, str(index),
                                    manager, str(OVERFLOWS)], logs)
      for job, index in tasks]
  finished = launch.wait_all(processes, TIMEOUT_SECONDS)
  results = {}
  for index in range(2):
    path = os.path.join(out_dir, f"worker_{index}.json")
    if os.path.exists(path):
      with open(path) as f:
        results[index] = json.load(f)
  return finished, results


class AsyncParameterServerTest(parameterized.TestCase):

  @parameterized.named_parameters(("contrib_face", "contrib"),
                                  ("tf2_face", "tf2"))
  def test_every_overflow_halves_the_scale(self, manager):
    finished, results = run_cluster(self.addCleanup, manager)
    self.assertEqual([f.returncode for f in finished], [0, 0, 0],
                     launch.describe(finished))
    overflowing, clean = results[0], results[1]
    self.assertTrue(all("/job:ps" in d for d in overflowing["state_devices"]),
                    overflowing["state_devices"])
    self.assertGreater(clean["finite_steps"], 0)
    expected = [async_ps.START / 2.0**(n + 1) for n in range(OVERFLOWS)]
    lost = [n for n, (got, want) in enumerate(
        zip(overflowing["scales"], expected)) if got != want]
    self.assertEqual(overflowing["final_scale"], expected[-1],
                     f"halvings lost around steps {lost[:10]} "
                     f"(worker 1 ran {clean['finite_steps']} finite steps)")


if __name__ == "__main__":
  tf.test.main()
