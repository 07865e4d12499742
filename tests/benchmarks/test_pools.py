"""A pool too large for memory is timed in parts, each with bare and the floor.

The floor grid's largest pool (the embedding shape at N=1,000 with Adam,
about 2 GB of resident memory per contender) was killed by the kernel with
its ten contenders alive at once. `scaling.measure` now keeps at most
`alive` contenders built: bare and the references stay, the others come and
go in parts, and every ratio is taken in rounds where both of its
contenders ran. (In that process the first guess at `alive` counted the
heap freed by earlier pools as free; `process_memory.trim_heap` hands it back
before bare is built.)
"""

import contextlib
import io

from absl.testing import absltest

from benchmarks import scaling
from benchmarks import scaling_report
from benchmarks import shapes

NAMES = ["bare", "tf", "ours", "ours_fixed"]
REFERENCES = {"ours": "tf", "ours_fixed": "tf"}


def _measure(alive, copies=1):
  log = io.StringIO()
  with contextlib.redirect_stderr(log):
    pool = scaling.measure(2, "sgd", 0.0, NAMES, min_rounds=2,
                           model=lambda n: shapes.chain(n, width=4, batch=2),
                           references=REFERENCES, alive=alive,
                           copies=lambda bare_ms: copies)
  return pool, log.getvalue().splitlines()


class PartsTest(absltest.TestCase):

  def test_a_pool_is_timed_in_parts_with_its_references_alive(self):
    pool, log = _measure(alive=3)
    self.assertEqual(pool.parts, 2)
    self.assertEqual(list(pool.rows), NAMES)
    # Built once each, and "ours_fixed" only after the first part's rounds.
    built = [line.split("building ")[1] for line in log if "building" in line]
    self.assertEqual(built, NAMES)
    timed = [i for i, line in enumerate(log) if "timing 3 steps" in line]
    self.assertLen(timed, 2)
    self.assertLess(timed[0], next(i for i, line in enumerate(log)
                                   if line.endswith("building ours_fixed")))
    for name in ("ours", "ours_fixed"):
      self.assertIsNotNone(pool.rows[name].vs_other, name)
      self.assertGreater(pool.rows[name].vs_bare.median, 0)
    self.assertIn("in each of 2 parts", scaling_report.rounds_text(pool))

  def test_a_pool_that_fits_is_timed_at_once(self):
    pool, log = _measure(alive=None)
    self.assertEqual(pool.parts, 1)
    self.assertLen([line for line in log if "timing 4 steps" in line], 1)
    self.assertEqual(scaling_report.rounds_text(pool), str(pool.rounds))


class CopiesTest(absltest.TestCase):
  """Each contender built in several Sessions (`benchmarks.sessions`)."""

  def test_every_copy_is_built_and_timed_on_its_own(self):
    pool, log = _measure(alive=None, copies=2)
    built = [line.split("building ")[1] for line in log if "building" in line]
    self.assertCountEqual(built, NAMES + [f"{name}@2" for name in NAMES])
    self.assertLen([line for line in log if "timing 8 steps" in line], 1)
    self.assertEqual(pool.copies, 2)
    for name, row in pool.rows.items():
      self.assertLen(row.copies, 2, name)
      self.assertTrue(row.all_applied, name)
    self.assertIn("each contender in 2 Sessions",
                  scaling_report.rounds_text(pool))

  def test_a_contenders_copies_are_timed_in_one_part(self):
    pool, log = _measure(alive=6, copies=2)  # Three contenders' copies.
    self.assertEqual(pool.parts, 2)
    first_timing = next(i for i, line in enumerate(log) if "timing" in line)
    for key in ("ours_fixed", "ours_fixed@2"):
      self.assertGreater(next(i for i, line in enumerate(log)
                              if line.endswith(f"building {key}")),
                         first_timing, key)
    self.assertLen([line for line in log if "timing 6 steps" in line], 2)


if __name__ == "__main__":
  absltest.main()
