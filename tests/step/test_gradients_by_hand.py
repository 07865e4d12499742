"""Gradients made by hand: scaled with the optimizer's own scale, accumulated.

* Legacy loops scale the loss themselves with `opt.get_loss_scale()` and
  divide the gradients by it: correct, and accepted. Leaving out one of the
  two is refused, each with the message that names what is missing.
* An MLPerf BERT-style fp16 accumulation hands `apply_gradients` what
  `accum.assign_add(g)` returns (variables, or ref tensors), directly or
  through a `tf.cond`; TF's own optimizer accepts that, so ours does too, and
  the update equals TF's applied to the same values.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from tests.support import control_flow
from tests.support import models

v1 = tf.compat.v1
NEVER_DIVIDED = r"never divided by the loss scale.*S times too large"
NEVER_MULTIPLIED = r"divided by the loss scale, but .* never multiplied.*too small"
MANAGERS = {
    "dynamic": lambda: managers.ExponentialUpdateLossScaleManager(2**10, 3),
    "tf2_dynamic": lambda: managers.DynamicLossScale(2**10, 3),
    "fixed": lambda: managers.FixedLossScaleManager(2**10),
}


def _divided(grads, scale):
  return [g / scale for g in grads]


def _times_reciprocal(grads, scale):
  inverse = 1.0 / scale
  return [g * inverse for g in grads]


def _cast_divided(grads, scale):
  return [g / tf.cast(scale, g.dtype) for g in grads]


UNSCALINGS = {"divided": _divided, "times_reciprocal": _times_reciprocal,
              "cast_divided": _cast_divided}


def _rows():
  return [dict(testcase_name=f"{unscale}_{manager}_v{version}",
               unscale=unscale, manager=manager, version=version)
          for unscale in UNSCALINGS for manager in MANAGERS
          for version in (1, 2)]


class ScaledByHandTest(parameterized.TestCase):

  def _setup(self, manager):
    loss = models.dense_loss(models.poison_input())
    opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["sgd"](),
                                          MANAGERS[manager]())
    return loss, opt, v1.trainable_variables()

  @parameterized.named_parameters(*_rows())
  def test_scaled_and_unscaled_by_hand_is_accepted_and_exact(
      self, unscale, manager, version):
    with control_flow.control_flow(f"v{version}"), \
        tf.Graph().as_default() as graph:
      loss, opt, variables = self._setup(manager)
      scale = opt.get_loss_scale()
      grads = UNSCALINGS[unscale](tf.gradients(loss * scale, variables), scale)
      train_op = opt.apply_gradients(zip(grads, variables))
      reference = [g for g, _ in opt.compute_gradients(loss)]
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        got, want = sess.run([grads, reference])
        sess.run(train_op)
        self.assertTrue(sess.run(mp_optimizer.step_applied()))
    for a, b in zip(got, want):
      np.testing.assert_allclose(a, b, rtol=1e-3)

  @parameterized.named_parameters(
      (f"{manager}_v{version}", manager, version)
      for manager in MANAGERS for version in (1, 2))
  def test_scaled_by_hand_but_never_divided_says_so(self, manager, version):
    with control_flow.control_flow(f"v{version}"), tf.Graph().as_default():
      loss, opt, variables = self._setup(manager)
      grads = tf.gradients(loss * opt.get_loss_scale(), variables)
      with self.assertRaisesRegex(ValueError, NEVER_DIVIDED):
        opt.apply_gradients(zip(grads, variables))

  @parameterized.named_parameters(
      (f"{manager}_v{version}", manager, version)
      for manager in MANAGERS for version in (1, 2))
  def test_divided_but_never_scaled_says_so(self, manager, version):
    with control_flow.control_flow(f"v{version}"), tf.Graph().as_default():
      loss, opt, variables = self._setup(manager)
      grads = _divided(tf.gradients(loss, variables), opt.get_loss_scale())
      with self.assertRaisesRegex(ValueError, NEVER_MULTIPLIED):
        opt.apply_gradients(zip(grads, variables))


N = 2  # Micro-steps per window in the accumulation tests.


def _accumulating(opt, variables, grads, through_cond):
  """MLPerf BERT's shape: accumulate, apply the sums every N micro-steps."""
  step = v1.get_variable("local_step", initializer=0, trainable=False)
  sums = [v1.get_variable(f"accum/{v.op.name}", v.shape, trainable=False,
                          initializer=v1.zeros_initializer())
          for v in variables]
  current = step.read_value()
  if through_cond:  # Reset on the window's first micro-step, else add.
    accumulated = tf.cond(
        tf.equal(current % N, 0),
        lambda: [s.assign(g) for s, g in zip(sums, grads)],
        lambda: [s.assign_add(g) for s, g in zip(sums, grads)])
  else:
    accumulated = [s.assign_add(g) for s, g in zip(sums, grads)]
  apply_now = tf.equal((current + 1) % N, 0)
  update = tf.cond(apply_now,
                   lambda: opt.apply_gradients(zip(accumulated, variables)),
                   tf.no_op)
  # The count moves only after every read of it: with ref variables `current`
  # aliases the counter's buffer, and on a micro-step that does not apply,
  # `update` is ready before the reset-or-add `tf.cond` has read its predicate.
  with tf.control_dependencies([update, *accumulated]):
    after = [step.assign_add(1)]
    if not through_cond:
      after.append(tf.cond(apply_now, lambda: tf.group(
          *[s.assign(tf.zeros_like(s)) for s in sums]), tf.no_op))
  return tf.group(*after)


class AccumulatedByHandTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{shape}_{kind}_variables", shape == "cond", kind == "ref")
      for shape in ("assign_add", "cond") for kind in ("resource", "ref"))
  def test_accumulated_sums_are_applied_as_tfs_optimizer_applies_them(
      self, through_cond, legacy):
    results = {}
    for wrapped in (True, False):
      with models.legacy_graph_behavior(legacy), \
          tf.Graph().as_default() as graph:
        x, y, loss = models.regression()
        variables = v1.trainable_variables()
        inner = v1.train.GradientDescentOptimizer(0.1)
        if wrapped:
          opt = mp_optimizer.LossScaleOptimizer(inner, MANAGERS["dynamic"]())
          grads = [g for g, _ in opt.compute_gradients(loss, variables)]
        else:
          opt, grads = inner, tf.gradients(loss, variables)
        train_op = _accumulating(opt, variables, grads, through_cond)
        x_data, y_data = models.regression_data(4 * N * 8)
        with v1.Session(graph=graph) as sess:
          sess.run(v1.global_variables_initializer())
          initial = sess.run(variables)
          for i in range(4 * N):
            sess.run(train_op, {x: x_data[8 * i:8 * i + 8],
                                y: y_data[8 * i:8 * i + 8]})
          results[wrapped] = sess.run(variables)
    for ours, theirs in zip(results[True], results[False]):
      np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    self.assertFalse(np.allclose(results[True][0], initial[0]), "never moved")


if __name__ == "__main__":
  tf.test.main()
