"""AmaxHistoryLossScaleManager at its edges: clipping, zero and tiny amax,
the scale's range, and checkpoints of another history length.

Expected scales are worked by hand from the rule in `managers.amax_rule`:
scale = 2 ** (exponent(65504 / peak) - margin - extra), exponent(q) =
floor(log2(q)).
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers

v1 = tf.compat.v1
F32_MAX = float(np.finfo(np.float32).max)


def _train(manager, feeds, size=2, **options):
  """Trains w (float32, used in float16) on loss sum(w * x) for each feed of
  x (float16 gradients x * S); returns (scales used, skipped steps, w)."""
  with tf.Graph().as_default() as graph:
    w = v1.get_variable("w", initializer=np.ones(size, np.float32))
    x = v1.placeholder(tf.float16, [size])
    loss = tf.reduce_sum(tf.cast(w, tf.float16) * x)
    made = manager()
    train_op = mp_optimizer.LossScaleOptimizer(
        v1.train.GradientDescentOptimizer(0.0), made, **options).minimize(loss)
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      scales = []
      for feed in feeds:
        scales.append(float(sess.run(made.get_loss_scale())))
        sess.run(train_op, {x: feed})
      return scales, int(sess.run(mp_optimizer.skipped_steps()))


class MeasuresWhatOverflowsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("clipnorm", dict(clipnorm=1.0)),
      ("global_clipnorm", dict(global_clipnorm=1.0)),
  )
  def test_norm_clip_does_not_change_the_measured_amax(self, clip):
    # float16 gradients of 1000 * S in every entry. The clip shrinks the
    # update to norm 1, but the backward pass still holds 1000 * S: amax is
    # 1000, 65504 / 1000 = 65.5 has exponent 6, margin 1 -> 2**5 from the
    # second step on, and no step overflows (as without the clip).
    feeds = [[1000.0] * 8] * 40
    make = lambda: managers.AmaxHistoryLossScaleManager(1.0, history_length=4)
    unclipped = _train(make, feeds, size=8)
    clipped = _train(make, feeds, size=8, **clip)
    self.assertEqual(clipped, unclipped)
    self.assertEqual(clipped[0][1:], [2.0**5] * 39)
    self.assertEqual(clipped[1], 0)


class ZeroAndTinyAmaxTest(parameterized.TestCase):

  def test_all_zero_gradient_steps_keep_the_peak(self):
    # amax 1, 1, 1, 0.05 and then four all-zero steps: zero is not a
    # measurement, the peak stays 1 -> exponent(65504) = 15, margin 1 ->
    # 2**14, and the next gradients of 1 (1 * 2**14 < 65504) apply.
    feeds = [[1.0, 0.05]] * 3 + [[0.0, 0.05]] + [[0.0, 0.0]] * 4 + [
        [1.0, 1.0]] * 3
    scales, skipped = _train(
        lambda: managers.AmaxHistoryLossScaleManager(history_length=4), feeds)
    self.assertEqual(scales[1:], [2.0**14] * (len(feeds) - 1))
    self.assertEqual(skipped, 0)

  @parameterized.named_parameters(
      # 65504 / 2e-38 is beyond float32 (exponent 127 once clamped to its
      # largest value); margin 0 would choose 2**127, whose reciprocal is
      # subnormal. The rule stops at 2**126.
      ("margin_0", 0, 2.0**126),
      ("margin_1", 1, 2.0**126),
      ("margin_2", 2, 2.0**125),
  )
  def test_tiny_gradients_never_get_a_scale_above_2_to_the_126(
      self, margin, scale):
    with tf.Graph().as_default() as graph:
      w = v1.get_variable("w", initializer=np.zeros(2, np.float32))
      manager = managers.AmaxHistoryLossScaleManager(
          1.0, margin=margin, max_loss_scale=F32_MAX)
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(1.0), manager)
      train_op = opt.minimize(tf.reduce_sum(w) * 2e-38)
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        scales = []
        for _ in range(6):
          sess.run(train_op)
          scales.append(float(sess.run(manager.get_loss_scale())))
        self.assertEqual(scales, [scale] * 6)
        self.assertEqual(sess.run(mp_optimizer.skipped_steps()), 0)
        # Every step applied its gradient, 2e-38: w moved by 6 * 2e-38.
        np.testing.assert_allclose(sess.run(w), [-1.2e-37] * 2, rtol=1e-6)


class HistoryLengthTest(parameterized.TestCase):

  def _saved(self, length, amaxes):
    """Path of a checkpoint after finite steps with `amaxes`."""
    path = self.create_tempdir().full_path + "/ckpt"
    with tf.Graph().as_default():
      manager = managers.AmaxHistoryLossScaleManager(history_length=length)
      amax = v1.placeholder(tf.float32, [])
      update = manager.update_loss_scale(tf.constant(True),
                                         gradient_amax=amax)
      saver = v1.train.Saver()
      with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        for value in amaxes:
          sess.run(update, {amax: value})
        saver.save(sess, path)
    return path

  @parameterized.named_parameters(
      # Written newest first: [4, 3, 2, 1]. Restored into 8 entries and one
      # step of amax 0.5: [0.5, 4, 3, 2, 1, 0, 0, 0]; peak 4 -> 65504 / 4 =
      # 16376, exponent 13, margin 1 -> 2**12.
      ("shorter_into_longer", 4, [1.0, 2.0, 3.0, 4.0], 8,
       [0.5, 4.0, 3.0, 2.0, 1.0, 0.0, 0.0, 0.0], 2.0**12),
      # Written: [8, 7, ..., 1]. Restored into 4 and one step of 0.5: the
      # newest three are kept, [0.5, 8, 7, 6]; 65504 / 8 = 8188, exponent 12
      # -> 2**11.
      ("longer_into_shorter", 8, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], 4,
       [0.5, 8.0, 7.0, 6.0], 2.0**11),
  )
  def test_history_of_another_length_is_adapted(
      self, written, amaxes, length, history, scale):
    path = self._saved(written, amaxes)
    with tf.Graph().as_default():
      manager = managers.AmaxHistoryLossScaleManager(history_length=length)
      update = manager.update_loss_scale(tf.constant(True),
                                         gradient_amax=tf.constant(0.5))
      state = {v.op.name: v for v in manager.variables()}
      with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        v1.train.Saver().restore(sess, path)
        sess.run(update)
        got = sess.run(state)
    np.testing.assert_array_equal(got["amax_history"], history)
    self.assertEqual(got["loss_scale"], scale)
    self.assertEqual(got["amax_steps"], len(amaxes) + 1)

  def test_object_checkpoint_of_another_length_is_adapted(self):
    # tf.train.Checkpoint's keys: written [3, 0, 0, 0], restored into 8 and
    # one step of amax 0.5: [0.5, 3, 0, ...]; 65504 / 3 -> 2**14 -> 2**13.
    prefix = self.create_tempdir().full_path + "/ckpt"
    for length, amax in ((4, 3.0), (8, 0.5)):
      with tf.Graph().as_default():
        manager = managers.AmaxHistoryLossScaleManager(history_length=length)
        update = manager.update_loss_scale(tf.constant(True),
                                           gradient_amax=tf.constant(amax))
        checkpoint = v1.train.Checkpoint(manager=manager)
        with v1.Session() as sess:
          sess.run(v1.global_variables_initializer())
          if length == 8:
            checkpoint.restore(path).run_restore_ops(sess)
          sess.run(update)
          if length == 4:
            path = checkpoint.save(prefix, session=sess)
          got = sess.run({v.op.name: v for v in manager.variables()})
    np.testing.assert_array_equal(got["amax_history"],
                                  [0.5, 3.0, 0, 0, 0, 0, 0, 0])
    self.assertEqual(got["loss_scale"], 2.0**13)

  def test_longest_history_is_accepted_and_one_more_refused(self):
    longest = managers.AmaxHistoryLossScaleManager.MAX_HISTORY_LENGTH
    self.assertEqual(longest, 2**16)
    managers.AmaxHistoryLossScaleManager(history_length=longest)
    with self.assertRaisesRegex(
        ValueError, r"`history_length` must be <= 65536 .*, got 65537\."):
      managers.AmaxHistoryLossScaleManager(history_length=longest + 1)

  def test_huge_history_is_refused_before_anything_is_built(self):
    with tf.Graph().as_default() as graph:
      with self.assertRaisesRegex(ValueError,
                                  r"`history_length` .*, got 10000000000\."):
        managers.AmaxHistoryLossScaleManager(history_length=10**10)
      self.assertEmpty(graph.get_operations())


if __name__ == "__main__":
  tf.test.main()
