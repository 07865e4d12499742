"""`compensated_update=`: Kahan summation for variables that stay bfloat16.

A bfloat16 weight of 1.0 has a spacing of 2**-7 above it, so +1e-3 rounds
back to 1.0 every time: a thousand such updates leave it at 1.0. With the
compensation slot the lost part is carried over and the weight reaches
1 + 1000 * 1e-3 = 2.0 (worked by hand; each update itself is rounded to
bfloat16 relative to its own size, within 2**-9 of 1e-3).
"""

import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import harness

v1 = tf.compat.v1
BF16, F32 = tf.bfloat16, tf.float32
STEPS, UPDATE = 1000, 1e-3
INNER = {"sgd": lambda: v1.train.GradientDescentOptimizer(UPDATE),
         "momentum": lambda: v1.train.MomentumOptimizer(UPDATE, 0.0)}
FACES = {"contrib": mp_optimizer.LossScaleOptimizer,
         "tf2": mp_optimizer.MixedPrecisionLossScaleOptimizer}


class _Run:
  """w = 1.0 in bfloat16; loss = -poison * w, so each step adds 1e-3 * poison."""

  def __init__(self, testcase, compensated_update, inner="sgd",
               face="contrib"):
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.weight = v1.get_variable("w", initializer=tf.constant([1.0], BF16),
                                    use_resource=True)
      self.poison = v1.placeholder_with_default(np.float32(1), [])
      self.opt = FACES[face](INNER[inner](), managers.NoLossScale(),
                      compensated_update=compensated_update)
      self.global_step = v1.train.get_or_create_global_step()
      loss = -self.poison * tf.reduce_sum(tf.cast(self.weight, F32))
      self.train_op = self.opt.minimize(loss, global_step=self.global_step)
      self.saver = v1.train.Saver()
      self.session = v1.Session(graph=self.graph)
      testcase.addCleanup(self.session.close)
      self.session.run(v1.global_variables_initializer())

  def train(self, steps=STEPS):
    for _ in range(steps):
      self.session.run(self.train_op)
    return float(self.session.run(self.weight)[0])


class CompensationTest(parameterized.TestCase):

  def test_without_compensation_the_updates_round_away(self):
    self.assertEqual(_Run(self, False).train(), 1.0)

  @parameterized.named_parameters(*harness.named_product(
      slot=("float32", "bfloat16", True), inner=sorted(INNER),
      face=sorted(FACES)))
  def test_thousand_small_updates_reach_two(self, slot, inner, face):
    run = _Run(self, slot, inner, face)
    self.assertAlmostEqual(run.train(), 2.0, delta=0.05)
    self.assertEqual(run.session.run(run.global_step), STEPS)

  @parameterized.named_parameters(("float32", "float32", np.float32),
                                  ("bfloat16", "bfloat16", BF16.as_numpy_dtype))
  def test_slot_is_the_optimizers_and_checkpointed(self, slot, numpy_dtype):
    run = _Run(self, slot)
    run.train(10)
    with run.graph.as_default():
      compensation = run.opt.get_slot(run.weight, "kahan_compensation")
      self.assertIn(compensation, run.opt.variables())
    self.assertIn("kahan_compensation", run.opt.get_slot_names())
    self.assertEqual(compensation.op.name, "w/kahan_compensation")
    value = run.session.run(compensation)
    self.assertEqual(value.dtype, numpy_dtype)
    self.assertNotEqual(float(value[0]), 0.0)  # 10e-3 is not in w yet.
    with run.graph.as_default():
      path = run.saver.save(run.session,
                            os.path.join(self.create_tempdir(), "ckpt"))
    self.assertIn("w/kahan_compensation",
                  dict(tf.train.list_variables(path)))
    restored = _Run(self, slot)
    with restored.graph.as_default():
      restored.saver.restore(restored.session, path)
    self.assertEqual(restored.session.run(restored.weight).tobytes(),
                     run.session.run(run.weight).tobytes())
    with restored.graph.as_default():
      restored_slot = restored.opt.get_slot(restored.weight,
                                            "kahan_compensation")
    self.assertEqual(restored.session.run(restored_slot).tobytes(),
                     value.tobytes())

  def test_object_checkpoint_holds_the_slot(self):
    run = _Run(self, True)
    run.train(10)
    with run.graph.as_default(), run.session.as_default():
      checkpoint = tf.train.Checkpoint(optimizer=run.opt, weight=run.weight)
      path = checkpoint.save(os.path.join(self.create_tempdir(), "ckpt"))
    self.assertTrue(any("kahan_compensation" in name
                        for name, _ in tf.train.list_variables(path)))

  def test_tensorflow_adam_on_a_bfloat16_variable_diverges(self):
    # Why Adam is refused: TensorFlow's own Adam, no wrapper, on the same
    # bfloat16 weight and gradient. 1 - 0.999 is 0 in bfloat16, so the
    # second moment stays 0 and the second step divides by epsilon.
    with tf.Graph().as_default():
      weight = v1.get_variable("w", initializer=tf.constant([1.0], BF16))
      train_op = v1.train.AdamOptimizer(UPDATE).minimize(
          -tf.reduce_sum(tf.cast(weight, F32)))
      with v1.Session() as session:
        session.run(v1.global_variables_initializer())
        for _ in range(2):
          session.run(train_op)
        self.assertGreater(float(session.run(weight)[0]), 1000.0)

  def test_skipped_step_moves_neither_weight_nor_slot(self):
    run = _Run(self, True)
    run.train(10)
    variables = run.graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES)
    before = harness.snapshot(run.session, variables)
    run.session.run(run.train_op, {run.poison: np.nan})
    harness.assert_bit_identical(
        self, before, harness.snapshot(run.session, variables))

  @parameterized.named_parameters(
      ("ftrl", lambda: v1.train.FtrlOptimizer(0.1), True, ValueError,
       "FtrlOptimizer"),
      ("adam", lambda: v1.train.AdamOptimizer(0.1), True, ValueError,
       "cannot help AdamOptimizer: .* 1 - beta2 rounds to 0"),
      ("string", lambda: v1.train.AdamOptimizer(0.1), "float16", ValueError,
       "got 'float16'"),
      ("number", lambda: v1.train.AdamOptimizer(0.1), 1, TypeError,
       "got 1"))
  def test_bad_option_refused(self, inner, value, error, words):
    with tf.Graph().as_default():
      with self.assertRaisesRegex(error, words):
        mp_optimizer.LossScaleOptimizer(inner(), managers.NoLossScale(),
                                        compensated_update=value)


if __name__ == "__main__":
  tf.test.main()
