"""A contender's copies in several Sessions, combined per round.

The arrays are worked by hand: three copies, three rounds.
"""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from benchmarks import sessions

ROUNDS = {"a": np.array([1.0, 4.0, 2.0]), "a@2": np.array([3.0, 2.0, 2.0]),
          "a@3": np.array([2.0, 3.0, 5.0]), "b": np.array([9.0, 9.0, 9.0])}


class SessionsTest(parameterized.TestCase):

  def test_the_first_copy_keeps_the_name(self):
    self.assertEqual(sessions.instances("a", 3), ["a", "a@2", "a@3"])
    self.assertEqual(sessions.instances("a", 1), ["a"])

  @parameterized.parameters(0, -1, 1.5, True, "2")
  def test_copies_must_be_a_positive_int(self, copies):
    with self.assertRaisesRegex(ValueError, "`copies` must be a positive "
                                f"int, got {copies!r}"):
      sessions.instances("a", copies)

  def test_each_round_takes_the_median_of_the_copies(self):
    combined = sessions.combine(ROUNDS, ["a"], 3)
    np.testing.assert_array_equal(combined["a"], [2.0, 3.0, 2.0])

  def test_one_copy_is_its_own_times(self):
    np.testing.assert_array_equal(sessions.combine(ROUNDS, ["b"], 1)["b"],
                                  ROUNDS["b"])

  def test_spread_is_each_copys_median_over_the_combined_median(self):
    # Medians over rounds: a 2, a@2 2, a@3 3; combined [2, 3, 2]: 2.
    self.assertEqual(sessions.spread(ROUNDS, "a", 3), [1.0, 1.0, 1.5])

  def test_short_steps_get_copies(self):
    limit = sessions.SHORT_STEP_MS
    self.assertEqual(sessions.copies_for(limit * 0.99),
                     sessions.SHORT_STEP_COPIES)
    self.assertEqual(sessions.copies_for(limit), 1)


if __name__ == "__main__":
  absltest.main()
