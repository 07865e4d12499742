"""Concurrent updates of one loss-scale state end as if run one after another.

Three shapes of concurrency, each run many times so the executor's thread
pool (and Python's threads) pick many interleavings:

* two train ops of one manager in one `sess.run` (a GAN's D and G), both
  finite exactly at the growth step: run in either order, the scale grows
  once and the second step counts one good step;
* both overflowing with contrib's `decr_every_n_nan_or_inf=2`: the first
  counts one overflow, the second shrinks the scale once;
* one finite and one overflowing train op in one `sess.run` (also one
  optimizer minimized twice): the scale halves exactly once, whatever the
  order, and the good-step count ends as in one of the two orders;
* two Python threads running one train op 10,000 times: the final state is
  that of 10,000 sequential finite steps, and every skipped step is counted.

Expected states are worked by hand from the state machine.
"""

import threading

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers

v1 = tf.compat.v1
RUNS = 500
PERIOD = 7
START = 2.0**10


def _loss(name: str, poison: tf.Tensor) -> tf.Tensor:
  w = v1.get_variable(name, initializer=np.ones(8, np.float32))
  return tf.reduce_sum(tf.square(w)) * 1e-3 * poison


def _contrib():
  return managers.ExponentialUpdateLossScaleManager(
      START, incr_every_n_steps=PERIOD, decr_every_n_nan_or_inf=2,
      decr_ratio=0.5)


def _tf2_face():
  return managers.DynamicLossScale(START, PERIOD, 2)


def _state(manager):
  """The manager's variables by role: scale, good_steps, bad_steps (or None)."""
  by_name = {v.op.name.split("/")[-1]: v for v in manager.variables()}
  scale = by_name.get("loss_scale", by_name.get("current_loss_scale"))
  return scale, by_name["good_steps"], by_name.get("bad_steps")


class TwoTrainOpsOneRunTest(parameterized.TestCase):
  """A GAN's two optimizers share one manager; both run in one sess.run."""

  def _assert_every_run_ended_at(self, ends, expected, prefix=None):
    wrong = [end for end in ends if end[:prefix] != expected]
    self.assertEqual(len(wrong), 0, f"{len(wrong)} of {RUNS} runs ended "
                     f"otherwise: {sorted(set(wrong))[:5]}")

  def _run_pairs(self, make_manager, finite, preset_good, preset_bad):
    """Runs both train ops RUNS times from a preset state; returns ends."""
    with tf.Graph().as_default() as graph:
      manager = make_manager()
      poisons = [v1.placeholder_with_default(1.0, []) for _ in range(2)]
      train_ops = [mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.0), manager).minimize(
              _loss(name, poison))
                   for name, poison in zip(("g", "d"), poisons)]
      scale, good, bad = _state(manager)
      preset = [scale.assign(START), good.assign(preset_good)]
      if bad is not None:
        preset.append(bad.assign(preset_bad))
      fetch = [scale, good] + ([bad] if bad is not None else [])
      feed = {} if finite else {p: np.inf for p in poisons}
      init = v1.global_variables_initializer()
      graph.finalize()
      with v1.Session(graph=graph) as sess:
        sess.run(init)
        ends = []
        for _ in range(RUNS):
          sess.run(preset)
          sess.run(train_ops, feed)
          ends.append(tuple(float(x) for x in sess.run(fetch)))
    return ends

  @parameterized.named_parameters(("contrib", _contrib),
                                  ("tf2_face", _tf2_face))
  def test_both_finite_at_the_growth_step_grow_once(self, make_manager):
    # First: good_steps 6 + 1 >= 7 -> scale x2, good_steps 0.
    # Second: 0 + 1 < 7 -> good_steps 1.
    ends = self._run_pairs(make_manager, True, PERIOD - 1, 0)
    self._assert_every_run_ended_at(ends, (2 * START, 1.0), prefix=2)

  def test_both_overflowing_with_hysteresis_shrink_once(self):
    # First: bad_steps 0 + 1 < 2 -> bad_steps 1. Second: 1 + 1 >= 2 ->
    # scale x0.5, bad_steps 0.
    ends = self._run_pairs(_contrib, False, 0, 0)
    self._assert_every_run_ended_at(ends, (START / 2, 0.0, 0.0))

  def test_tf2_face_both_overflowing_shrinks_twice(self):
    ends = self._run_pairs(_tf2_face, False, 3, 0)
    self._assert_every_run_ended_at(ends, (START / 4, 0.0))


class TwoThreadsTest(parameterized.TestCase):
  """Two Python threads share one session and one train op."""

  STEPS_PER_THREAD = 5000

  @parameterized.named_parameters(
      # 10,000 finite steps, growth every 97: 103 growths, 9 good steps left.
      ("finite", 1.0, 1.0, 2.0**103, 10_000 % 97, 0),
      # 10,000 overflows, a shrink every 97: 103 halvings, 9 overflows left.
      ("overflowing", np.inf, 2.0**110, 2.0**7, 0, 10_000 % 97))
  def test_final_state_is_that_of_sequential_steps(
      self, poison, start, scale, good_steps, bad_steps):
    with tf.Graph().as_default() as graph:
      manager = managers.ExponentialUpdateLossScaleManager(
          start, incr_every_n_steps=97, decr_every_n_nan_or_inf=97,
          decr_ratio=0.5)
      train_op = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.0), manager).minimize(
              _loss("w", tf.constant(poison)))
      state = _state(manager)
      init = v1.global_variables_initializer()
      graph.finalize()
      with v1.Session(graph=graph) as sess:
        sess.run(init)
        self._run_in_threads(lambda: sess.run(train_op))
        end = sess.run(state)
    self.assertEqual(2 * self.STEPS_PER_THREAD, 10_000)
    self.assertEqual(tuple(end), (scale, good_steps, bad_steps))

  def test_every_skipped_step_is_counted(self):
    with tf.Graph().as_default() as graph:
      poison = v1.placeholder_with_default(1.0, [])
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.0),
          managers.FixedLossScaleManager(8))
      train_op = opt.minimize(_loss("w", poison))
      skipped = mp_optimizer.skipped_steps()
      init = v1.global_variables_initializer()  # The LOCAL count: never.
      graph.finalize()
      with v1.Session(graph=graph) as sess:
        sess.run(init)
        self._run_in_threads(lambda: sess.run(train_op, {poison: np.inf}),
                             steps=300)
        self.assertEqual(sess.run(skipped), 600)

  def _run_in_threads(self, step, steps=None):
    steps = steps or self.STEPS_PER_THREAD
    errors = []

    def work():
      try:
        for _ in range(steps):
          step()
      except Exception as error:  # pylint: disable=broad-except
        errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
    self.assertEmpty(errors)


def _two_optimizers(manager):
  """A GAN's two optimizers (G clean, D overflowing) with one manager."""
  return [mp_optimizer.LossScaleOptimizer(
      v1.train.GradientDescentOptimizer(0.0), manager).minimize(
          _loss(name, tf.constant(poison)))
          for name, poison in (("g", 1.0), ("d", np.inf))]


def _one_optimizer_twice(manager):
  """One optimizer minimized twice: its train ops share one state."""
  opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(
      v1.train.GradientDescentOptimizer(0.0), manager)
  return [opt.minimize(_loss(name, tf.constant(poison)))
          for name, poison in (("g", 1.0), ("d", np.inf))]


def _contrib_halving(hysteresis):
  return managers.ExponentialUpdateLossScaleManager(
      START, incr_every_n_steps=10**6, decr_every_n_nan_or_inf=1,
      decr_ratio=0.5, hysteresis=hysteresis)


class OneFiniteOneOverflowingTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("gan_contrib", _two_optimizers, lambda: _contrib_halving("contrib")),
      ("gan_consecutive", _two_optimizers, lambda: _contrib_halving("consecutive")),
      ("gan_sticky", _two_optimizers, lambda: _contrib_halving("sticky")),
      ("gan_tf2_face", _two_optimizers,
       lambda: managers.DynamicLossScale(START, 10**6, 2)),
      ("minimized_twice_tf2_face", _one_optimizer_twice,
       lambda: managers.DynamicLossScale(START, 10**6, 2)),
      ("minimized_twice_contrib", _one_optimizer_twice,
       lambda: _contrib_halving("contrib")),
  )
  def test_no_halving_is_lost(self, build, make_manager):
    with tf.Graph().as_default() as graph:
      manager = make_manager()
      train_ops = build(manager)
      scale = manager.get_loss_scale()
      scale_var = [v for v in manager.variables()
                   if v.dtype.base_dtype == tf.float32][0]
      reset = scale_var.assign(START)
      init = v1.global_variables_initializer()
      graph.finalize()
      with v1.Session(graph=graph) as sess:
        sess.run(init)
        after = []
        for _ in range(RUNS):
          sess.run(reset)
          sess.run(train_ops)
          after.append(sess.run(scale))
    lost = sum(value != START / 2 for value in after)  # START halved once.
    self.assertEqual(lost, 0, f"{lost} of {RUNS} runs did not end at "
                     f"{START / 2:g}; values seen: {sorted(set(after))}")

  @parameterized.named_parameters(
      ("contrib", lambda: _contrib_halving("contrib"), "good_steps"),
      ("tf2_face", lambda: managers.DynamicLossScale(START, 10**6, 2),
       "good_steps"),
  )
  def test_good_steps_end_as_in_some_order(self, make_manager, counter_name):
    # Overflow then finite: 1; finite then overflow: 0. Nothing else.
    with tf.Graph().as_default() as graph:
      manager = make_manager()
      train_ops = _two_optimizers(manager)
      counter = [v for v in manager.variables()
                 if v.op.name == counter_name][0]
      preset = counter.assign(tf.constant(5, counter.dtype.base_dtype))
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        seen = set()
        for _ in range(RUNS // 3):
          sess.run(preset)
          sess.run(train_ops)
          seen.add(int(sess.run(counter)))
    self.assertContainsSubset(seen, {0, 1})


if __name__ == "__main__":
  tf.test.main()
