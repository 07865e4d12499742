"""AmaxHistoryLossScaleManager against a plain-Python model of its rule.

`python_model` is written from the pseudocode in `managers.amax_rule`, with
numpy float32 for the scale and math's exact binary exponent (`frexp`).
Hypothesis draws settings and sequences of (finite, amax) steps; after
every step the graph's state must equal the model's.
"""

import math

from absl.testing import parameterized
import hypothesis
from hypothesis import strategies as st
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from tests.support import mirrored

v1 = tf.compat.v1
f32 = np.float32
SETTINGS = hypothesis.settings(max_examples=40, deadline=None,
                               derandomize=True, print_blob=True)


def python_model(init, length, margin, relax_after, low, high, steps):
  """Returns [(scale, history, extra)] after each (finite, amax) step."""
  scale, history, count, extra, clean = f32(init), [0.0] * length, 0, 0, 0
  out = []
  for finite, amax in steps:
    if finite:
      if f32(amax) > 0:  # Newest first; a zero amax measures nothing.
        history = [float(f32(amax))] + history[:length - 1]
        count += 1
      if extra > 0 and clean + 1 >= relax_after:
        extra, clean = extra - 1, 0
      else:
        clean += 1
      peak = max(history)
      if peak > 0:
        quotient = min(f32(65504.0) / f32(max(peak, 1e-38)),
                       np.finfo(np.float32).max)
        power = math.frexp(float(f32(quotient)))[1] - 1 - margin - extra
        target = f32(2.0) ** f32(min(max(power, -126), 126))
        scale = f32(min(max(target, f32(low)), f32(high)))
    else:
      extra, clean = extra + 1, 0
      scale = max(scale * f32(0.5), f32(low))
    out.append((scale, list(history), extra))
  return out


INT64_MAX = np.iinfo(np.int64).max


def run_manager(manager, steps):
  """Feeds (finite, amax) steps to the manager; returns its state each step."""
  with tf.Graph().as_default() as graph:
    made = manager()
    finite = v1.placeholder(tf.bool, [])
    amax = v1.placeholder(tf.float32, [])
    update = made.update_loss_scale(finite, gradient_amax=amax)
    state = {v.op.name: v for v in made.variables()}
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      out = []
      for is_finite, value in steps:
        sess.run(update, {finite: is_finite, amax: value})
        got = sess.run(state)
        out.append((got["loss_scale"], list(got["amax_history"]),
                    int(got["extra_margin"])))
      return out


STEPS = st.lists(st.tuples(st.booleans(),
                           st.floats(1e-30, 1e30) | st.sampled_from(
                               [0.0, 1.0, 65504.0, 3.0])),
                 min_size=1, max_size=30)


class TransitionTest(parameterized.TestCase):

  @hypothesis.given(
      init=st.sampled_from([1.0, 2.0**15, 2.0**24]),
      length=st.integers(1, 5), margin=st.integers(0, 3),
      relax_after=st.integers(1, 4),
      low=st.sampled_from([1.0, 0.25]), high=st.sampled_from([2.0**24, 2.0**40]),
      steps=STEPS)
  @SETTINGS
  def test_matches_the_model(self, init, length, margin, relax_after, low,
                             high, steps):
    expected = python_model(init, length, margin, relax_after, low, high,
                            steps)
    got = run_manager(lambda: managers.AmaxHistoryLossScaleManager(
        init, length, margin, relax_after, min_loss_scale=low,
        max_loss_scale=high), steps)
    for step, (ours, model) in enumerate(zip(got, expected)):
      self.assertEqual(ours[0], model[0], f"scale after step {step}")
      np.testing.assert_array_equal(ours[1], np.float32(model[1]))
      self.assertEqual(ours[2], model[2], f"extra margin after step {step}")

  @parameterized.named_parameters(
      # 65504 / 3 = 21834.7: exponent 14; margin 1 -> 2**13.
      ("sets_from_the_peak", [(True, 3.0)], 2.0**13),
      ("keeps_the_recent_peak", [(True, 3.0), (True, 0.1)], 2.0**13),
      ("overflow_halves_and_adds_margin",
       [(True, 3.0), (False, float("inf")), (True, 3.0)], 2.0**12),
      ("all_zero_gradients_keep_the_scale", [(True, 0.0)], 2.0**15),
      # Zeros are not measurements: 1.0 stays in the history of 4.
      ("zero_amax_does_not_push_out_the_peak",
       [(True, 1.0), (True, 0.05)] + [(True, 0.0)] * 4, 2.0**14),
      # 65504 / 2e-38 is beyond float32: at most 2**126, then the ceiling.
      ("tiny_amax_gets_the_ceiling", [(True, 2e-38)], 2.0**24),
  )
  def test_worked_by_hand(self, steps, scale):
    got = run_manager(lambda: managers.AmaxHistoryLossScaleManager(
        2.0**15, history_length=4, margin=1), steps)
    self.assertEqual(got[-1][0], scale)


class AmaxManagerTest(parameterized.TestCase):

  def test_skips_and_backs_off_then_trains_without_overflow(self):
    # float16 gradient 3 * S overflows at the starting 2**15 (one skip, one
    # more power of two of margin); from then on the scale is set from amax
    # 3: exponent(65504 / 3) = 14, minus margin 1, minus 1 -> 2**12.
    with tf.Graph().as_default() as graph:
      w = v1.get_variable("w", initializer=np.ones(4, np.float32))
      loss = tf.reduce_sum(tf.cast(w, tf.float16) *
                           tf.constant([3.0, 1.0, 0.5, 0.25], tf.float16))
      manager = managers.AmaxHistoryLossScaleManager(history_length=4)
      train_op = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.0), manager).minimize(loss)
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        for _ in range(20):
          sess.run(train_op)
        self.assertEqual(sess.run(mp_optimizer.skipped_steps()), 1)
        self.assertEqual(sess.run(manager.get_loss_scale()), 2.0**12)

  def test_state_round_trips_through_a_saver(self):
    path = self.create_tempdir().full_path + "/ckpt"
    values = []
    for restore in (False, True):
      with tf.Graph().as_default():
        manager = managers.AmaxHistoryLossScaleManager(history_length=3)
        update = manager.update_loss_scale(tf.constant(True),
                                           gradient_amax=tf.constant(2.0))
        saver = v1.train.Saver()
        with v1.Session() as sess:
          sess.run(v1.global_variables_initializer())
          if restore:
            saver.restore(sess, path)
          else:
            sess.run(update)
            saver.save(sess, path)
          values.append(sess.run({v.op.name: v for v in manager.variables()}))
    for name in values[0]:
      np.testing.assert_array_equal(values[0][name], values[1][name])
    self.assertEqual(values[1]["amax_steps"], 1)

  @parameterized.named_parameters(
      # clean_steps >= relax_after - 1: the extra margin is given back.
      ("relaxes", 1, True, {"extra_margin": 0, "clean_steps": 0}),
      # Nothing to give back: the count stays at its largest value.
      ("saturates_clean_steps", 0, True,
       {"extra_margin": 0, "clean_steps": INT64_MAX}),
      # An overflow with the margin at its largest value keeps it there.
      ("saturates_extra_margin", INT64_MAX, False,
       {"extra_margin": INT64_MAX, "clean_steps": 0}),
      # A finite step with that margin (one given back, as clean_steps is
      # due): the smallest scale, whatever the amax (65504 / 1e6 has
      # exponent -4, and subtracting the margin must not wrap).
      ("largest_margin_sets_the_smallest_scale", INT64_MAX, True,
       {"extra_margin": INT64_MAX - 1, "loss_scale": 1.0}),
  )
  def test_counters_restored_at_their_largest_value_do_not_wrap(
      self, extra, finite, expected):
    with tf.Graph().as_default():
      manager = managers.AmaxHistoryLossScaleManager(history_length=2,
                                                     relax_after=1000)
      update = manager.update_loss_scale(
          tf.constant(finite), gradient_amax=tf.constant(1e6))
      state = {v.op.name: v for v in manager.variables()}
      with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        state["clean_steps"].load(INT64_MAX, sess)  # As a restore would.
        state["extra_margin"].load(extra, sess)
        sess.run(update)
        got = sess.run({name: state[name] for name in expected})
    self.assertEqual(got, expected)

  def test_replicas_share_the_largest_amax(self):
    # Replica 1's gradient is 4x replica 0's: the scale follows replica 1.
    with tf.Graph().as_default() as graph:
      strategy = tf.distribute.MirroredStrategy(mirrored.DEVICES)
      with strategy.scope():
        w = v1.get_variable("w", initializer=np.ones(2, np.float32))
        manager = managers.AmaxHistoryLossScaleManager(history_length=2)
        opt = mp_optimizer.LossScaleOptimizer(
            v1.train.GradientDescentOptimizer(0.0), manager)

        def step():
          replica = tf.distribute.get_replica_context().replica_id_in_sync_group
          factor = tf.cast(1 + 3 * replica, tf.float32)
          return opt.minimize(tf.reduce_sum(w) * factor)

        train_op = strategy.group(strategy.run(step))
      with v1.Session(graph=graph, config=mirrored.SESSION_CONFIG) as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(train_op)
        # amax 4: 65504 / 4 = 16376 -> exponent 13; margin 1 -> 2**12.
        self.assertEqual(sess.run(manager.get_loss_scale()), 2.0**12)

  @parameterized.named_parameters(
      ("zero_history", dict(history_length=0), ValueError, "history_length"),
      ("negative_margin", dict(margin=-1), ValueError, "margin"),
      ("float_margin", dict(margin=1.5), TypeError, "margin"),
      ("init_above_max", dict(init_loss_scale=2.0**30), ValueError,
       "init_loss_scale"),
      ("zero_relax", dict(relax_after=0), ValueError, "relax_after"))
  def test_bad_settings_name_the_argument(self, kwargs, error, name):
    with self.assertRaisesRegex(error, f"`{name}`"):
      managers.AmaxHistoryLossScaleManager(**kwargs)

  def test_update_without_amax_says_what_it_needs(self):
    with tf.Graph().as_default():
      manager = managers.AmaxHistoryLossScaleManager()
      with self.assertRaisesRegex(ValueError, "gradient_amax"):
        manager.update_loss_scale(tf.constant(True))


if __name__ == "__main__":
  tf.test.main()
