"""`managers.get`: what TF's optimizer accepts as `loss_scale`, made ours.

'dynamic' and numbers become our TF2 faces; our objects pass through; TF's
own `FixedLossScale`/`DynamicLossScale` are rebuilt from their config, and a
TF `DynamicLossScale`'s variables become ours in their graph. Anything else is
refused with a message that lists what is accepted.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers

v1 = tf.compat.v1
tf_mp = tf.compat.v1.mixed_precision


class GetTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("dynamic_string", "dynamic", managers.DynamicLossScale,
       {"initial_loss_scale": 2.0**15, "increment_period": 2000,
        "multiplier": 2.0}),
      ("int", 256, managers.FixedLossScale, {"loss_scale_value": 256.0}),
      ("float", 1.5, managers.FixedLossScale, {"loss_scale_value": 1.5}),
  )
  def test_identifiers(self, identifier, cls, config):
    got = managers.get(identifier)
    self.assertIsInstance(got, cls)
    self.assertEqual(got.get_config(), config)

  @parameterized.named_parameters(
      ("fixed", lambda: managers.FixedLossScale(4)),
      ("dynamic", managers.DynamicLossScale),
      ("contrib_manager",
       lambda: managers.ExponentialUpdateLossScaleManager(8, 2)),
      ("contrib_fixed", lambda: managers.FixedLossScaleManager(8)),
  )
  def test_our_objects_pass_through(self, make):
    scale = make()
    self.assertIs(managers.get(scale), scale)

  def test_tf_fixed_is_converted_through_its_config(self):
    got = managers.get(tf_mp.FixedLossScale(12))
    self.assertIsInstance(got, managers.FixedLossScale)
    self.assertEqual(got.get_config(), {"loss_scale_value": 12.0})
    self.assertTrue(got.skips_nonfinite_steps)

  def test_tf_dynamic_is_converted_and_keeps_its_variables(self):
    with tf.Graph().as_default() as graph:
      theirs = tf_mp.DynamicLossScale(64, 3, 4)
      made_by_tf = {v.op.name: v for v in v1.global_variables()}
      got = managers.get(theirs)
      self.assertIsInstance(got, managers.DynamicLossScale)
      self.assertEqual(got.get_config(), theirs.get_config())
      update_op, _ = got.update([tf.constant(1.0)])
      self.assertEqual({v.op.name: v for v in v1.global_variables()},
                       made_by_tf)
      self.assertCountEqual(got.variables(), made_by_tf.values())
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        for _ in range(3):
          sess.run(update_op)
        # TF's own object reads the state our update moved.
        self.assertEqual(sess.run(theirs()), 256.0)

  @parameterized.named_parameters(
      # ValueError for all of them: the class TF's optimizer raises.
      ("none", None, ValueError, "None"),
      ("bool", True, ValueError, "True"),
      ("other_string", "Dynamic", ValueError, "'Dynamic'"),
      ("tuple", (2, 3), ValueError, "(2, 3)"),
      ("numpy_array", np.array([4.0]), ValueError, "array([4.])"),
      ("keras_like_dict", {"class_name": "DynamicLossScale"}, ValueError,
       "class_name"),
  )
  def test_rejected_identifiers_list_what_is_accepted(self, identifier, error,
                                                      shown):
    with self.assertRaises(error) as raised:
      managers.get(identifier)
    message = str(raised.exception)
    self.assertIn("`loss_scale`", message)
    self.assertIn(shown, message)
    for accepted in ("'dynamic'", "int or float", "LossScaleManager",
                     "tf.compat.v1.mixed_precision.FixedLossScale"):
      self.assertIn(accepted, message)

  @parameterized.named_parameters(("zero", 0, "0"), ("half", 0.5, "0.5"),
                                  ("infinite", float("inf"), "inf"))
  def test_numbers_out_of_range(self, identifier, shown):
    with self.assertRaisesRegex(ValueError, f"`loss_scale`.*{shown}"):
      managers.get(identifier)
