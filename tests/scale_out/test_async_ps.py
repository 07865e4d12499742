"""Asynchronous parameter-server training: no halving of the scale is lost.

A real cluster on 127.0.0.1 (1 ps + 2 workers, each its own process, see
tests/workers/async_ps.py): the scale state lives on the ps, worker 0 runs
overflowing steps while worker 1 runs finite steps against the same state with
no synchronization. Every overflow must halve the scale; a finite step that
wrote the scale back would undo a halving made in between. The cluster runs
under a deadline; every process group is killed when the test ends.
"""

from absl.testing import parameterized
import pytest
import tensorflow as tf

from tests.workers import async_ps
from tests.workers import launch
from tests.workers import ps_cluster

TIMEOUT_SECONDS = 115  # Each cluster stays under two minutes.
OVERFLOWS = 90


@pytest.mark.long_run
class AsyncParameterServerTest(parameterized.TestCase):

  @parameterized.named_parameters(("contrib_face", "contrib"),
                                  ("tf2_face", "tf2"))
  def test_every_overflow_halves_the_scale(self, manager):
    finished, results = ps_cluster.run(
        self.addCleanup, "async_ps.py", [manager, str(OVERFLOWS)],
        TIMEOUT_SECONDS)
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
