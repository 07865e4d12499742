"""`benchmarks/lock_share.py` runs: one tiny round, as a script.

Only its exit status and the table it prints are checked, never a timing.
"""

import os
import pathlib
import subprocess
import sys

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[2]


class LockShareSmokeTest(absltest.TestCase):

  def test_prints_both_designs_for_both_optimizers_with_the_load(self):
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "lock_share.py"),
         "--smoke", "--seconds", "0"],
        cwd=self.create_tempdir().full_path, capture_output=True, text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), check=False)
    self.assertEqual(run.returncode, 0, run.stderr[-3000:])
    rows = [line for line in run.stdout.splitlines()
            if line.startswith("| sgd") or line.startswith("| adam")]
    self.assertLen(rows, 4)
    for row in rows:
      self.assertRegex(row, r"(mutex every step \(before\)|lock-free count "
                       r"\(now\)) \| \d+\.\d{3} \|.* \| \d+\.\d / \d+\.\d \|$")


if __name__ == "__main__":
  absltest.main()
