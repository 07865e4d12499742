"""Two train ops sharing one loss-scale state in one `sess.run`.

A GAN's generator and discriminator with one manager, or one optimizer
minimized twice: in the same `sess.run` one step is finite and the other
overflows. Run one after the other, the overflow halves the scale and the
finite step only counts a good step, whatever the order; run concurrently they
must end the same way. The pair is run many times (the executor's thread
pool picks a new interleaving each time), each time from a scale of 2**20,
and not one halving may be lost.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import managers
import mp_optimizer

v1 = tf.compat.v1
RUNS = 300
START = 2.0**20


def _loss(name: str, poison: float) -> tf.Tensor:
  w = v1.get_variable(name, initializer=np.ones(64, np.float32))
  return tf.reduce_sum(tf.square(w)) * poison


def _two_optimizers(manager):
  """A GAN's two optimizers (G clean, D overflowing) with one manager."""
  return [mp_optimizer.LossScaleOptimizer(
      v1.train.GradientDescentOptimizer(0.0), manager).minimize(
          _loss(name, poison)) for name, poison in (("g", 1.0), ("d", np.inf))]


def _one_optimizer_twice(manager):
  """One optimizer minimized twice: its train ops share one state."""
  opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(
      v1.train.GradientDescentOptimizer(0.0), manager)
  return [opt.minimize(_loss(name, poison))
          for name, poison in (("g", 1.0), ("d", np.inf))]


def _contrib(hysteresis):
  return managers.ExponentialUpdateLossScaleManager(
      START, incr_every_n_steps=10**6, decr_every_n_nan_or_inf=1,
      decr_ratio=0.5, hysteresis=hysteresis)


class SharedStateRaceTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("gan_contrib", _two_optimizers, lambda: _contrib("contrib")),
      ("gan_consecutive", _two_optimizers, lambda: _contrib("consecutive")),
      ("gan_sticky", _two_optimizers, lambda: _contrib("sticky")),
      ("gan_tf2_face", _two_optimizers,
       lambda: managers.DynamicLossScale(START, 10**6, 2)),
      ("minimized_twice_tf2_face", _one_optimizer_twice,
       lambda: managers.DynamicLossScale(START, 10**6, 2)),
      ("minimized_twice_contrib", _one_optimizer_twice,
       lambda: _contrib("contrib")),
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
    lost = sum(value != START / 2 for value in after)
    self.assertEqual(lost, 0, f"{lost} of {RUNS} runs did not end at "
                     f"{START / 2:g}; values seen: {sorted(set(after))}")

  @parameterized.named_parameters(
      ("contrib", lambda: _contrib("contrib"), "good_steps"),
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
