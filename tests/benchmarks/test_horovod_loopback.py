"""`benchmarks/horovod_loopback.py` times its set-ups one after the other.

Its section says the set-ups ran one after the other; the timings mean
nothing if two shared the cores. Here each set-up's processes are small
real processes that write the result file their role's rank 0 would, and
each start records whether every process started before it had ended.
"""

import argparse
import subprocess
import sys

from absl.testing import absltest

from benchmarks import horovod_loopback


class SequentialSetUpsTest(absltest.TestCase):

  def test_a_set_up_starts_after_the_one_before_ended(self):
    started = []
    overlaps = []

    def start(role, args, out, launcher=(), env=None):
      del args, launcher, env
      overlaps.append([p.args for p in started if p.poll() is None])
      process = subprocess.Popen(  # pylint: disable=consider-using-with
          [sys.executable, "-c", "import json, sys, time; time.sleep(0.2); "
           "json.dump({sys.argv[1]: 1.0}, open(sys.argv[2], 'w'))", role,
           out])
      started.append(process)
      return process

    original = horovod_loopback._start  # pylint: disable=protected-access
    horovod_loopback._start = start  # pylint: disable=protected-access
    try:
      results = horovod_loopback.measure(
          argparse.Namespace(steps=1, smoke=True))
    finally:
      horovod_loopback._start = original  # pylint: disable=protected-access
    self.assertEqual(results, {"local": 1.0, "hvd": 1.0, "mwms": 1.0})
    self.assertLen(started, 4)  # One, mpirun's one, two workers.
    # Only the two workers of one set-up may run together.
    self.assertEqual(overlaps[:3], [[], [], []])
    for running in overlaps[3]:
      self.assertIn("mwms", running)


if __name__ == "__main__":
  absltest.main()
