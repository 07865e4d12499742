"""gradient_accumulation_steps: N micro-batches behave like one batch of N*b.

The reference is the same model trained without accumulation on the
concatenated batch, in the same process; float32 compute, so both sides are
exact up to float32 summation order.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import harness
from tests.support import models

v1 = tf.compat.v1
N, B, WINDOWS = 4, 8, 3


def _train(batches, accumulate, make_opt, poisoned=()):
  """Feeds `batches` ((x, y) pairs); returns (variables, global_step, opt)."""
  with tf.Graph().as_default() as g:
    x, y, loss = models.regression()
    poison = models.poison_input()
    opt = make_opt(gradient_accumulation_steps=N if accumulate else None)
    global_step = v1.train.get_or_create_global_step()
    train_op = opt.minimize(loss * poison, global_step=global_step)
    with v1.Session(graph=g) as sess:
      sess.run(v1.global_variables_initializer())
      for i, (xb, yb) in enumerate(batches):
        feed = {x: xb, y: yb}
        if i in poisoned:
          feed[poison] = np.inf
        sess.run(train_op, feed)
      return (sess.run(v1.trainable_variables()), sess.run(global_step),
              sess.run(opt.get_loss_scale()),
              sess.run(mp_optimizer.skipped_steps()))


def _micro_batches(windows=WINDOWS, seed=0):
  x, y = models.regression_data(windows * N * B, seed)
  return [(x[i:i + B], y[i:i + B]) for i in range(0, len(x), B)]


def _big_batches(micro):
  return [(np.concatenate([m[0] for m in micro[i:i + N]]),
           np.concatenate([m[1] for m in micro[i:i + N]]))
          for i in range(0, len(micro), N)]


def _opt(inner, manager):
  def make(**kwargs):
    return mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS[inner](),
                                           manager(), **kwargs)
  return make


FIXED = lambda: managers.FixedLossScaleManager(2**10)
GROWING = lambda: managers.ExponentialUpdateLossScaleManager(  # x2 each step
    2**4, 1, incr_ratio=2)


class AccumulationTest(parameterized.TestCase):

  @parameterized.named_parameters(harness.named_product(inner=["sgd", "adam"], manager=["fixed", "growing"]))
  def test_micro_batches_equal_one_big_batch(self, inner, manager):
    # "growing" doubles the loss scale on every micro-step: the scale changes
    # inside every window, and the result must not notice.
    make = _opt(inner, {"fixed": FIXED, "growing": GROWING}[manager])
    micro = _micro_batches()
    got, step, scale, _ = _train(micro, True, make)
    want, want_step, _, _ = _train(_big_batches(micro), False, make)
    self.assertEqual((step, want_step), (WINDOWS, WINDOWS))
    if manager == "growing":
      self.assertEqual(scale, 2.0**(4 + WINDOWS * N))
    for a, b in zip(got, want):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

  def test_overflowed_micro_batch_is_dropped_and_window_waits(self):
    # Micro-step 1 overflows and is dropped, so window one is micro-batches
    # 0, 2, 3, 4 and window two is 5, 6, 7 and one extra batch fed last.
    fed = _micro_batches(windows=2) + [_micro_batches(windows=1, seed=9)[0]]
    make = _opt("adam", lambda: managers.ExponentialUpdateLossScaleManager(
        2**10, 100, decr_every_n_nan_or_inf=1, decr_ratio=0.5))
    got, step, scale, skipped = _train(fed, True, make, poisoned=(1,))
    kept = [fed[0]] + fed[2:]
    want, want_step, _, _ = _train(_big_batches(kept), False, make)
    self.assertEqual((step, want_step, skipped), (2, 2, 1))
    self.assertEqual(scale, 2.0**9)
    for a, b in zip(got, want):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

  def test_global_clipnorm_clips_the_window_mean(self):
    micro = _micro_batches()
    clipped = lambda **kw: mp_optimizer.LossScaleOptimizer(
        v1.train.GradientDescentOptimizer(0.5), FIXED(), global_clipnorm=0.1,
        **kw)
    got, _, _, _ = _train(micro, True, clipped)
    want, _, _, _ = _train(_big_batches(micro), False, clipped)
    for a, b in zip(got, want):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


class AccumulatorStateTest(parameterized.TestCase):

  def test_state_is_checkpointed_and_listed(self):
    with tf.Graph().as_default():
      _, _, loss = models.regression()
      opt = mp_optimizer.LossScaleOptimizer(
          models.OPTIMIZERS["adam"](), FIXED(), gradient_accumulation_steps=N)
      opt.minimize(loss)
      names = {"gradient_accumulation/regression/w",
               "gradient_accumulation/regression/b",
               "gradient_accumulation/micro_steps"}
      self.assertContainsSubset(names, {v.op.name for v in opt.variables()})
      self.assertContainsSubset(
          names, {v.op.name for v in v1.global_variables()})
      accumulators = [v for v in opt.variables()
                      if v.op.name.endswith(("/w", "/b"))
                      and v.op.name.startswith("gradient_accumulation")]
      self.assertEqual({v.dtype.base_dtype for v in accumulators},
                       {tf.float32})

  def test_saver_round_trip_inside_a_window(self):
    micro = _micro_batches(windows=2)
    make = _opt("adam", FIXED)
    want, _, _, _ = _train(micro, True, make)
    path = self.create_tempdir().full_path + "/ckpt"
    results = []
    for part in (micro[:6], micro[6:]):  # Saved after 2 of window two's 4.
      with tf.Graph().as_default() as g:
        x, y, loss = models.regression()
        opt = make(gradient_accumulation_steps=N)
        train_op = opt.minimize(loss,
                                global_step=v1.train.get_or_create_global_step())
        saver = v1.train.Saver()
        with v1.Session(graph=g) as sess:
          sess.run(v1.global_variables_initializer())
          if results:
            saver.restore(sess, path)
          for xb, yb in part:
            sess.run(train_op, {x: xb, y: yb})
          saver.save(sess, path)
          results.append(sess.run(v1.trainable_variables()))
    for a, b in zip(results[-1], want):
      np.testing.assert_array_equal(a, b)

  def test_two_train_ops_of_one_optimizer_keep_separate_windows(self):
    # One optimizer minimized over w, then over b: each train op has its
    # own window, so N steps of the first apply exactly one update to w and
    # none to b, and the second op's window is still empty.
    micro = _micro_batches(windows=1)
    with tf.Graph().as_default() as g:
      x, y, loss = models.regression()
      w, b = v1.trainable_variables()
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.5), FIXED(),
          gradient_accumulation_steps=N)
      train_w = opt.minimize(loss, var_list=[w])
      train_b = opt.minimize(loss, var_list=[b])
      names = {v.op.name for v in opt.variables()}
      self.assertContainsSubset({"gradient_accumulation/regression/w",
                                 "gradient_accumulation/micro_steps",
                                 "gradient_accumulation_1/regression/b",
                                 "gradient_accumulation_1/micro_steps"}, names)
      mean_grad_w = tf.gradients(loss, [w])[0]
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        w0, b0 = sess.run([w, b])
        grads = [sess.run(mean_grad_w, {x: xb, y: yb}) for xb, yb in micro]
        for xb, yb in micro:
          sess.run(train_w, {x: xb, y: yb})
        np.testing.assert_allclose(sess.run(w), w0 - 0.5 * np.mean(grads, 0),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(sess.run(b), b0)
        xb, yb = micro[0]
        sess.run(train_b, {x: xb, y: yb})  # 1 of N: nothing applied yet.
        np.testing.assert_array_equal(sess.run(b), b0)

  @parameterized.named_parameters(("one", 1, ValueError), ("zero", 0, ValueError),
                                  ("float", 2.0, TypeError),
                                  ("bool", True, TypeError))
  def test_bad_steps(self, steps, error):
    message = (r"`gradient_accumulation_steps` must be >= 2, got "
               if error is ValueError else "gradient_accumulation_steps")
    with self.assertRaisesRegex(error, message):
      mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["sgd"](), FIXED(),
                                      gradient_accumulation_steps=steps)
