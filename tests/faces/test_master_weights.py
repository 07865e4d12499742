"""float32 master weights for models that build float16 variables.

The training test is a float16 linear regression with weights near 1 and
updates near 1e-4, below half the float16 spacing at 1 (2**-11 ≈ 4.9e-4):
plain float16 variables never move, master weights follow the float32 model
(TensorFlow's own optimizer on float32 variables, run side by side).
"""

import warnings

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer

v1 = tf.compat.v1
F16, F32 = tf.float16, tf.float32
LEARNING_RATE = 1e-4
STEPS = 200


def _data():
  rng = np.random.RandomState(0)
  x = rng.randn(32, 4).astype(np.float16)
  y = (x.astype(np.float32) @ np.full([4, 1], 0.5, np.float32))
  return x, y


def _regression_loss(dtype):
  """Linear regression with `dtype` weights (initialized to 1) and compute."""
  x, y = _data()
  w = v1.get_variable("w", [4, 1], dtype=dtype,
                      initializer=v1.initializers.ones())
  pred = tf.matmul(tf.constant(x, dtype), w)
  return tf.reduce_mean(tf.square(tf.cast(pred, F32) - y))


def _train(dtype, master: bool, wrap: bool):
  """Trains STEPS steps of SGD; returns the trained float32 values of `w`."""
  with tf.Graph().as_default() as graph:
    if master:
      with mp_optimizer.float32_master_weights():
        loss = _regression_loss(dtype)
    else:
      loss = _regression_loss(dtype)
    opt = v1.train.GradientDescentOptimizer(LEARNING_RATE)
    if wrap:
      opt = mp_optimizer.LossScaleOptimizer(
          opt, managers.FixedLossScaleManager(128))
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      train_op = opt.minimize(loss)
    w, = v1.global_variables()
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      grad = sess.run(tf.gradients(loss, w)[0])
      for _ in range(STEPS):
        sess.run(train_op)
      return np.abs(grad).max(), sess.run(w).astype(np.float32), w.dtype


def _variable(name):
  found, = [v for v in v1.global_variables() if v.op.name == name]
  return found


class Float32MasterWeightsTest(parameterized.TestCase):

  def test_float16_variables_stall_and_master_weights_train(self):
    largest_grad, stalled, dtype = _train(F16, master=False, wrap=True)
    self.assertEqual(dtype.base_dtype, F16)
    # Every update is below half the float16 spacing at 1: nothing moves.
    self.assertLess(LEARNING_RATE * largest_grad, 2.0**-11)
    np.testing.assert_array_equal(stalled, np.ones([4, 1], np.float32))

    _, reference, _ = _train(F32, master=False, wrap=False)
    moved = np.abs(reference - 1.0).min()
    self.assertGreater(moved, 0.01)
    _, trained, dtype = _train(F16, master=True, wrap=True)
    self.assertEqual(dtype.base_dtype, F32)
    # float16 compute rounds each gradient to ~1e-3 relative.
    np.testing.assert_allclose(trained, reference, atol=moved * 0.01)

  @parameterized.named_parameters(
      ("float16", dict(shape=[3], dtype=F16), "zeros", F32, F16, 0.0),
      ("bfloat16", dict(shape=[3], dtype=tf.bfloat16), "zeros", F32,
       tf.bfloat16, 0.0),
      ("float32", dict(shape=[3], dtype=F32), "zeros", F32, F32, 0.0),
      ("float16_not_trainable", dict(shape=[3], dtype=F16, trainable=False),
       "zeros", F16, F16, 0.0),
      ("float16_array_initializer", {}, "array", F32, F16, np.float16(0.1)),
      ("float16_tensor_initializer", {}, "tensor", F32, F16, np.float16(0.1)),
      ("float16_initializer_object", dict(shape=[3], dtype=F16), "object",
       F32, F16, np.float32(0.1)),
      ("float16_ref_variable", dict(shape=[3], dtype=F16, use_resource=False),
       "zeros", F32, F16, 0.0),
      ("float16_resource_variable",
       dict(shape=[3], dtype=F16, use_resource=True), "zeros", F32, F16, 0.0),
  )
  def test_stored_and_returned_dtypes(self, kwargs, initializer, stored,
                                      returned, initial):
    with tf.Graph().as_default():
      kwargs["initializer"] = {
          "zeros": v1.zeros_initializer,
          "array": lambda: np.full([3], 0.1, np.float16),
          "tensor": lambda: tf.fill([3], tf.constant(0.1, F16)),
          "object": lambda: v1.constant_initializer(0.1, dtype=F16),
      }[initializer]()
      with v1.variable_scope(
          "model", custom_getter=mp_optimizer.float32_variable_getter):
        value = v1.get_variable("v", **kwargs)
      variable = _variable("model/v")
      self.assertEqual(variable.dtype.base_dtype, stored)
      self.assertEqual(value.dtype.base_dtype, returned)
      if "use_resource" in kwargs:
        self.assertEqual("Resource" in type(variable).__name__,
                         kwargs["use_resource"])
      with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        np.testing.assert_array_equal(
            sess.run(variable), np.full([3], initial, stored.as_numpy_dtype))

  def test_reuse_returns_the_same_float32_variable(self):
    with tf.Graph().as_default():
      with mp_optimizer.float32_master_weights():
        with v1.variable_scope("layer"):
          first = v1.get_variable("w", [2], dtype=F16)
        with v1.variable_scope("layer", reuse=True):
          second = v1.get_variable("w", [2], dtype=F16)
      self.assertLen(v1.global_variables(), 1)
      self.assertEqual(first.dtype, F16)
      self.assertEqual(second.dtype, F16)
      self.assertEqual(_variable("layer/w").dtype.base_dtype, F32)

  def test_regularizer_sees_the_float32_variable(self):
    with tf.Graph().as_default():
      with mp_optimizer.float32_master_weights():
        v1.get_variable("w", dtype=F16,
                        initializer=np.array([1.0, 2.0], np.float16),
                        regularizer=lambda w: tf.reduce_sum(w * w))
      loss, = v1.get_collection(v1.GraphKeys.REGULARIZATION_LOSSES)
      self.assertEqual(loss.dtype, F32)
      with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        self.assertEqual(sess.run(loss), 5.0)

  def test_partitioned_variable_is_saved_as_float32_parts(self):
    path = self.create_tempdir().full_path + "/ckpt"
    with tf.Graph().as_default():
      with mp_optimizer.float32_master_weights():
        value = v1.get_variable(
            "table", dtype=F16, initializer=np.arange(12, dtype=np.float16)
            .reshape(6, 2), partitioner=v1.fixed_size_partitioner(2))
      self.assertEqual(value.dtype, F16)
      self.assertEqual(value.shape.as_list(), [6, 2])
      parts = v1.global_variables()
      self.assertEqual(sorted(v.op.name for v in parts),
                       ["table/part_0", "table/part_1"])
      self.assertEqual({v.dtype.base_dtype for v in parts}, {F32})
      with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(value),
                                      np.arange(12).reshape(6, 2))
        v1.train.Saver().save(sess, path)
    reader = tf.train.load_checkpoint(path)
    self.assertEqual(reader.get_variable_to_dtype_map(), {"table": F32})
    np.testing.assert_array_equal(reader.get_tensor("table"),
                                  np.arange(12, dtype=np.float32).reshape(6, 2))

  def test_checkpoint_holds_float32_variables_under_the_requested_names(self):
    path = self.create_tempdir().full_path + "/ckpt"
    with tf.Graph().as_default():
      with v1.variable_scope("model"), mp_optimizer.float32_master_weights():
        v1.get_variable("w", dtype=F16, initializer=np.ones(2, np.float16))
      with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        v1.train.Saver().save(sess, path)
    reader = tf.train.load_checkpoint(path)
    self.assertEqual(reader.get_variable_to_dtype_map(), {"model/w": F32})

  @parameterized.named_parameters(("scope", "scope"), ("manager", "manager"))
  def test_an_enclosing_custom_getter_still_runs(self, how):
    seen = []

    def user_getter(getter, name, *args, **kwargs):
      seen.append((name, kwargs["dtype"]))
      return getter(name, *args, **kwargs)

    with tf.Graph().as_default():
      with v1.variable_scope("outer", custom_getter=user_getter):
        if how == "scope":
          with v1.variable_scope(
              "inner", custom_getter=mp_optimizer.float32_variable_getter):
            value = v1.get_variable("w", [2], dtype=F16)
          name = "outer/inner/w"
        else:
          with mp_optimizer.float32_master_weights():
            value = v1.get_variable("w", [2], dtype=F16)
            self.assertEqual(tf.identity(value).name, "outer/Identity:0")
          name = "outer/w"
      self.assertEqual(seen, [(name, F32)])
      self.assertEqual(value.dtype, F16)
      self.assertEqual(_variable(name).dtype.base_dtype, F32)


class MissingMasterWeightsWarningTest(parameterized.TestCase):

  def _minimize(self, opt, master, times):
    with tf.Graph().as_default():
      if master:
        with mp_optimizer.float32_master_weights():
          loss = _regression_loss(F16)
      else:
        loss = _regression_loss(F16)
      with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(times):
          opt.minimize(loss)
    found = [w for w in caught if "master weights" in str(w.message)]
    for warning in found:  # At the caller's line, not inside a library.
      self.assertEqual(warning.filename, __file__)
    return [str(w.message) for w in found]

  @parameterized.named_parameters(
      ("plain_once", False, 1, 1), ("plain_twice", False, 2, 1),
      ("master", True, 2, 0))
  def test_warns_once_per_optimizer_naming_the_variables_and_fix(
      self, master, times, expected):
    opt = mp_optimizer.LossScaleOptimizer(
        v1.train.GradientDescentOptimizer(0.1),
        managers.FixedLossScaleManager(128))
    messages = self._minimize(opt, master, times)
    self.assertLen(messages, expected)
    for message in messages:
      self.assertIn("w:0", message)
      self.assertIn("mp_optimizer.float32_master_weights()", message)

  def test_another_optimizer_warns_again(self):
    make = lambda: mp_optimizer.LossScaleOptimizer(
        v1.train.GradientDescentOptimizer(0.1),
        managers.FixedLossScaleManager(128))
    self.assertLen(self._minimize(make(), False, 1), 1)
    self.assertLen(self._minimize(make(), False, 1), 1)
