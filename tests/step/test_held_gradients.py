"""Gradients held in 16 bits until the gate apply contrib's bits.

A float32 gradient that is the cast of a float16 or bfloat16 one is held
as that 16-bit source (stacked with others of its shape, or alone if it is
large) until the finite verdict; the cast to float32 and the multiply by
1/S that the update uses are made behind the gate. These tests compare the
update with TensorFlow's own optimizer applied to `g * (1/S)` in float32
(contrib's unscale) bit for bit, and check that a non-finite 16-bit source,
or an S whose reciprocal is not a normal float32, still skips the step.
"""

import warnings

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers

v1 = tf.compat.v1
INNER = {"sgd": lambda: v1.train.GradientDescentOptimizer(0.5),
         "adam": lambda: v1.train.AdamOptimizer(0.01)}
# Five alike kernels (stacked), a bias pair (stacked), one kernel above
# managers.finite.GROUP_MAX_ELEMENTS entries (held alone).
SHAPES = [(8, 8)] * 5 + [(8,)] * 2 + [(8, 300), (300, 300), (300, 8)]


def _loss(compute_dtype, poison):
  """A float32 loss of float32 variables read through casts."""
  rng = np.random.RandomState(0)
  variables = [v1.get_variable(f"v{i}", initializer=(
      rng.randn(*shape) * 0.3).astype(np.float32))
               for i, shape in enumerate(SHAPES)]
  hidden = tf.cast(tf.constant(rng.randn(4, 8).astype(np.float32)),
                   compute_dtype)
  kernels = variables[:5] + variables[7:]
  for kernel in kernels:
    hidden = tf.tanh(tf.matmul(hidden, tf.cast(kernel, compute_dtype)))
  hidden += tf.cast(variables[5], compute_dtype) * tf.cast(
      variables[6], compute_dtype)
  # Inf or NaN reaches every 16-bit gradient; 0 makes every gradient 0.
  output = tf.cast(hidden, tf.float32) * poison
  return tf.reduce_mean(tf.square(output)), variables


def _contrib_step(loss, variables, inner, scale):
  """TF's optimizer applying contrib's unscale: g * (1/S), in float32."""
  grads = tf.gradients(loss * scale, variables)
  inverse = tf.math.reciprocal(tf.constant(scale))
  return inner.apply_gradients([(g * inverse, v)
                                for g, v in zip(grads, variables)])


def _run(make_train_op, compute_dtype, steps, poison_value=1.0,
         ours=True):
  """The variables after `steps` steps, and whether ours applied each."""
  with tf.Graph().as_default() as graph:
    poison = v1.placeholder_with_default(np.float32(1.0), [])
    loss, variables = _loss(compute_dtype, poison)
    with warnings.catch_warnings():  # bfloat16 alone: "use NoLossScale".
      warnings.simplefilter("ignore", UserWarning)
      train_op = make_train_op(loss, variables)
    step_applied = mp_optimizer.step_applied() if ours else None
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      applied = []
      for _ in range(steps):
        fetched = sess.run([train_op, step_applied] if ours else train_op,
                           {poison: poison_value})
        if ours:  # Read in the same run: it reads the fed poison.
          applied.append(fetched[1])
      return sess.run(variables), applied


class HeldGradientsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("float16_sgd_2_12", tf.float16, "sgd", 2.0**12),
      ("float16_adam_3", tf.float16, "adam", 3.0),
      ("bfloat16_sgd_2_12", tf.bfloat16, "sgd", 2.0**12),
      ("bfloat16_adam_2_20", tf.bfloat16, "adam", 2.0**20))
  def test_the_update_has_contribs_bits(self, compute_dtype, inner, scale):

    def ours(loss, variables):
      opt = mp_optimizer.LossScaleOptimizer(
          INNER[inner](), managers.FixedLossScaleManager(scale))
      return opt.minimize(loss, var_list=variables)

    def contrib(loss, variables):
      return _contrib_step(loss, variables, INNER[inner](), scale)

    got, applied = _run(ours, compute_dtype, steps=3)
    want, _ = _run(contrib, compute_dtype, steps=3, ours=False)
    self.assertEqual(applied, [True] * 3)
    for a, b in zip(got, want):
      np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))

  @parameterized.named_parameters(
      ("float16_inf", tf.float16, float("inf"), 2.0**12),
      ("float16_nan", tf.float16, float("nan"), 2.0**12),
      ("bfloat16_inf", tf.bfloat16, float("inf"), 2.0**12),
      # Finite (zero) gradients, but 1/S is not a normal float32.
      ("float16_zero_scale_2_127", tf.float16, 0.0, 2.0**127))
  def test_a_non_finite_step_is_skipped_and_changes_nothing(
      self, compute_dtype, poison_value, scale):

    def ours(loss, variables):
      opt = mp_optimizer.LossScaleOptimizer(
          INNER["adam"](), managers.FixedLossScaleManager(scale))
      return opt.minimize(loss, var_list=variables)

    def unchanged(loss, variables):
      del loss, variables
      return tf.no_op()

    got, applied = _run(ours, compute_dtype, 1, poison_value)
    want, _ = _run(unchanged, compute_dtype, 1, ours=False)
    self.assertEqual(applied, [False])
    for a, b in zip(got, want):
      np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


if __name__ == "__main__":
  tf.test.main()
