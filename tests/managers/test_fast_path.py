"""The dynamic update's lock-free common step, and the races it opens.

A finite step with no growth due counts with one atomic increment and no
mutex; the step that finds growth due, or that raced past the boundary,
takes the mutex. Each race below runs many times so the executor picks many
interleavings; every run must end in a state some serial order of its
steps gives, worked by hand from the state machine:

* two (three) finite steps at one count from the growth boundary: one
  counts to the boundary, the next grows, (the third counts 1);
* a finite step at one count from the boundary racing an overflow that
  shrinks: either the count is reset by the overflow, or it follows it;
* four threads of finite steps with a short period: every growth happens.

The common step runs no `MutexLock` kernel; a growth step and an overflow
do (step statistics of the run, not timings).
"""

import threading

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from tests.support import models

v1 = tf.compat.v1
RUNS, PERIOD, START = 500, 7, 2.0**10


def _contrib(**kwargs):
  """contrib's face, shrinking by half on every second overflow."""
  return managers.ExponentialUpdateLossScaleManager(
      START, PERIOD, 2, decr_ratio=0.5, **kwargs)


def _tf2_face():
  return managers.DynamicLossScale(START, PERIOD, 2)


def _sgd_step(manager, name: str, poison) -> tf.Operation:
  """A train op of a zero-rate SGD on its own variables, scaled by `manager`."""
  return mp_optimizer.LossScaleOptimizer(
      v1.train.GradientDescentOptimizer(0.0), manager).minimize(
          models.dense_loss(tf.constant(poison), scope=name,
                            compute_dtype=tf.float32))


def _by_role(manager):
  """(scale, good_steps, bad_steps or None) variables of `manager`."""
  by_name = {v.op.name.split("/")[-1]: v for v in manager.variables()}
  scale = by_name.get("loss_scale", by_name.get("current_loss_scale"))
  return scale, by_name["good_steps"], by_name.get("bad_steps")


def _run_together(make_manager, poisons, good, bad=0, runs=RUNS):
  """Runs one train op per poison in one sess.run, `runs` times, each from
  the state (START, good, bad); returns the set of end states."""
  with tf.Graph().as_default() as graph:
    manager = make_manager()
    train_ops = [_sgd_step(manager, f"w{i}", poison)
                 for i, poison in enumerate(poisons)]
    scale, good_steps, bad_steps = _by_role(manager)
    preset = [scale.assign(START), good_steps.assign(good)]
    fetch = [scale, good_steps]
    if bad_steps is not None:
      preset.append(bad_steps.assign(bad))
      fetch.append(bad_steps)
    init = v1.global_variables_initializer()
    graph.finalize()
    with v1.Session(graph=graph) as sess:
      sess.run(init)
      ends = set()
      for _ in range(runs):
        sess.run(preset)
        sess.run(train_ops)
        ends.add(tuple(float(x) for x in sess.run(fetch)))
  return ends


class GrowthBoundaryRaceTest(parameterized.TestCase):

  @parameterized.named_parameters(("contrib", _contrib, (0.0,)),
                                  ("tf2_face", _tf2_face, ()))
  def test_two_steps_one_count_before_the_boundary_count_then_grow(
      self, make_manager, bad_end):
    # 5 + 1 = 6 < 7: count to 6; then 6 + 1 >= 7: grow, good 0, bad 0.
    ends = _run_together(make_manager, [1.0, 1.0], PERIOD - 2)
    self.assertEqual(ends, {(2 * START, 0.0) + bad_end})

  @parameterized.named_parameters(("contrib", _contrib, (0.0,)),
                                  ("tf2_face", _tf2_face, ()))
  def test_three_steps_count_grow_count(self, make_manager, bad_end):
    ends = _run_together(make_manager, [1.0, 1.0, 1.0], PERIOD - 2,
                         runs=RUNS // 2)
    self.assertEqual(ends, {(2 * START, 1.0) + bad_end})

  def test_sticky_hysteresis_keeps_its_count_on_a_lock_free_step(self):
    # Two lock-free counts (4 -> 6) leave bad_steps at 1.
    ends = _run_together(lambda: _contrib(hysteresis="sticky"),
                         [1.0, 1.0], PERIOD - 3, bad=1)
    self.assertEqual(ends, {(START, PERIOD - 1.0, 1.0)})


class OverflowRacesACountTest(parameterized.TestCase):

  def test_count_before_the_boundary_and_a_shrinking_overflow(self):
    # bad 1 + 1 >= 2: the overflow halves the scale and zeroes both counts.
    # Count first: 6, then the overflow: good 0. Overflow first: good 0,
    # then the count: good 1.
    ends = _run_together(_contrib, [1.0, np.inf], PERIOD - 2, bad=1)
    self.assertContainsSubset(ends, {(START / 2, 0.0, 0.0),
                                     (START / 2, 1.0, 0.0)})

  def test_growth_due_and_an_overflow(self):
    # Growth first: x2, then the overflow halves it: START, good 0.
    # Overflow first: START / 2, good 0; then the count: good 1.
    ends = _run_together(_tf2_face, [1.0, np.inf], PERIOD - 1)
    self.assertContainsSubset(ends, {(START, 0.0), (START / 2, 1.0)})


class ThreadsAtAShortPeriodTest(parameterized.TestCase):

  @parameterized.named_parameters(("contrib", False), ("tf2_face", True))
  def test_every_growth_happens(self, tf2_face):
    threads, steps, period = 4, 301, 5
    low = 2.0**-126  # 240 growths from here end at 2**114, no cap reached.
    with tf.Graph().as_default() as graph:
      manager = (managers.DynamicLossScale(low, period, 2,
                                           min_loss_scale=low)
                 if tf2_face else managers.ExponentialUpdateLossScaleManager(
                     low, period, min_loss_scale=low))
      train_op = _sgd_step(manager, "w", 1.0)
      scale, good_steps, _ = _by_role(manager)
      init = v1.global_variables_initializer()
      graph.finalize()
      with v1.Session(graph=graph) as sess:
        sess.run(init)
        errors = []

        def work():
          try:
            for _ in range(steps):
              sess.run(train_op)
          except Exception as error:  # pylint: disable=broad-except
            errors.append(error)

        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
          worker.start()
        for worker in workers:
          worker.join()
        end = sess.run([scale, good_steps])
    self.assertEmpty(errors)
    total = threads * steps  # 1204 = 240 * 5 + 4.
    self.assertEqual((float(end[0]), int(end[1])),
                     (low * 2.0**(total // period), total % period))


def _kernels_run(make_manager, finite, good):
  """The op types of the update's kernels that ran in one step."""
  with tf.Graph().as_default() as graph:
    manager = make_manager()
    flag = v1.placeholder(tf.bool, [])
    update = manager.update_loss_scale(flag)
    _, good_steps, _ = _by_role(manager)
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      good_steps.load(good, sess)
      metadata = v1.RunMetadata()
      sess.run(update, {flag: finite},
               options=v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE),
               run_metadata=metadata)
    names = {node.node_name.split(":")[0]
             for device in metadata.step_stats.dev_stats
             for node in device.node_stats}
    return {graph.get_operation_by_name(name).type for name in names
            if name in {op.name for op in graph.get_operations()}}


class WhichStepsTakeTheMutexTest(parameterized.TestCase):

  @parameterized.named_parameters(("contrib", _contrib),
                                  ("tf2_face", _tf2_face))
  def test_the_common_step_takes_no_mutex(self, make_manager):
    kernels = _kernels_run(make_manager, True, 0)
    self.assertIn("ResourceCountUpTo", kernels)
    self.assertNotIn("MutexLock", kernels)

  @parameterized.named_parameters(
      ("growth", _contrib, True, PERIOD - 1),
      ("overflow", _contrib, False, 0),
      ("tf2_face_growth", _tf2_face, True, PERIOD - 1),
      ("consecutive_hysteresis", lambda: _contrib(hysteresis="consecutive"),
       True, 0),
      ("fail_at_floor_after", lambda: _contrib(fail_at_floor_after=3),
       True, 0))
  def test_these_steps_take_it(self, make_manager, finite, good):
    self.assertIn("MutexLock", _kernels_run(make_manager, finite, good))


if __name__ == "__main__":
  tf.test.main()
