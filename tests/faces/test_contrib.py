"""mp_optimizer.contrib is tf.contrib.mixed_precision, name for name, in a graph.

The signatures and the state-machine table below are TF 1.15's
tensorflow/contrib/mixed_precision/python/loss_scale_manager.py and
loss_scale_optimizer.py, worked by hand.
"""

import inspect

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from mp_optimizer import contrib

v1 = tf.compat.v1
_REQUIRED = inspect.Parameter.empty
# Contrib's public names and their constructors' (name, default) parameters.
CONTRIB_SIGNATURES = {
    "LossScaleManager": [],
    "FixedLossScaleManager": [("loss_scale", _REQUIRED)],
    "ExponentialUpdateLossScaleManager": [
        ("init_loss_scale", _REQUIRED), ("incr_every_n_steps", _REQUIRED),
        ("decr_every_n_nan_or_inf", 2), ("incr_ratio", 2),
        ("decr_ratio", 0.8)],
    "LossScaleOptimizer": [("opt", _REQUIRED),
                           ("loss_scale_manager", _REQUIRED)],
}


def _quadratic(poison):
  """loss = 0.5 * sum(w**2) in float16, w = [2, -4]: its gradient is w."""
  w = v1.get_variable("w", initializer=np.array([2.0, -4.0], np.float32))
  half = tf.cast(w, tf.float16)
  return w, tf.cast(0.5 * tf.reduce_sum(half * half), tf.float32) * poison


class FourNames(contrib.LossScaleManager):
  """A user's own manager, written against contrib's abstract interface."""

  def get_loss_scale(self):
    return tf.constant(4.0)

  def update_loss_scale(self, finite_grads):
    del finite_grads
    return tf.no_op()


class ContribNamespaceTest(parameterized.TestCase):

  def test_public_names_are_exactly_contribs(self):
    public = {name for name in dir(contrib) if not name.startswith("_")}
    self.assertEqual(public, set(CONTRIB_SIGNATURES))
    self.assertCountEqual(contrib.__all__, CONTRIB_SIGNATURES)

  def test_names_are_the_package_objects(self):
    self.assertIs(contrib.LossScaleOptimizer, mp_optimizer.LossScaleOptimizer)
    for name in ("LossScaleManager", "FixedLossScaleManager",
                 "ExponentialUpdateLossScaleManager"):
      self.assertIs(getattr(contrib, name), getattr(managers, name))

  @parameterized.named_parameters(
      *[(name, name) for name in CONTRIB_SIGNATURES if name != "LossScaleManager"])
  def test_contrib_calls_still_bind(self, name):
    parameters = list(inspect.signature(getattr(contrib, name)).parameters
                      .values())
    expected = CONTRIB_SIGNATURES[name]
    self.assertEqual([(p.name, p.default) for p in parameters[:len(expected)]],
                     expected)
    self.assertTrue(all(p.kind == p.POSITIONAL_OR_KEYWORD
                        for p in parameters[:len(expected)]))
    # Anything this package adds is keyword-only: no contrib call changes.
    self.assertTrue(all(p.kind == p.KEYWORD_ONLY
                        for p in parameters[len(expected):]))

  def test_loss_scale_manager_is_abstract(self):
    with self.assertRaises(TypeError):
      contrib.LossScaleManager()  # pylint: disable=abstract-class-instantiated

  @parameterized.named_parameters(
      ("fixed", lambda: contrib.FixedLossScaleManager(128)),
      ("exponential", lambda: contrib.ExponentialUpdateLossScaleManager(2**10, 2)),
      ("own_subclass", FourNames))
  def test_trains_as_plain_sgd_would(self, make_manager):
    # Scales are powers of two, so scaling is exact: w <- w - 0.25 * w.
    with tf.Graph().as_default() as graph:
      w, loss = _quadratic(1.0)
      opt = contrib.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.25), make_manager())
      global_step = v1.train.get_or_create_global_step()
      train_op = opt.minimize(loss, global_step=global_step)
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        for _ in range(3):
          sess.run(train_op)
        self.assertEqual(sess.run(w).tolist(), [2.0 * 0.75**3, -4.0 * 0.75**3])
        self.assertEqual(sess.run(global_step), 3)

  def test_overflow_steps_follow_contribs_table(self):
    # init 8, grow after 2 finite steps, shrink by 0.5 after 2 overflows that
    # need not be consecutive; an overflow step changes no weight and no step.
    finite = [True, False, True, False, False, True, True]
    expected_scales = [8, 8, 8, 4, 4, 4, 8]
    expected_steps = [1, 1, 2, 2, 2, 3, 4]
    with tf.Graph().as_default() as graph:
      poison = v1.placeholder_with_default(1.0, [])
      w, loss = _quadratic(poison)
      manager = contrib.ExponentialUpdateLossScaleManager(
          8, 2, decr_every_n_nan_or_inf=2, decr_ratio=0.5)
      opt = contrib.LossScaleOptimizer(v1.train.GradientDescentOptimizer(0.25),
                                       manager)
      global_step = v1.train.get_or_create_global_step()
      train_op = opt.minimize(loss, global_step=global_step)
      self.assertCountEqual([v.op.name for v in manager.variables()],
                            ["loss_scale", "good_steps", "bad_steps"])
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        scales, steps = [], []
        for ok in finite:
          before = sess.run(w)
          sess.run(train_op, {poison: 1.0 if ok else np.nan})
          self.assertEqual(np.array_equal(sess.run(w), before), not ok)
          scales.append(sess.run(manager.get_loss_scale()))
          steps.append(sess.run(global_step))
    self.assertEqual(scales, expected_scales)
    self.assertEqual(steps, expected_steps)
