"""Estimator: a float32 run's `model_dir` continues in float16 with loss scaling.

`tf.estimator` exists up to TensorFlow 2.15 (with tensorflow-estimator); on
newer TensorFlow every test here is reported as skipped.
"""

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers

v1 = tf.compat.v1
pytestmark = pytest.mark.skipif(
    not hasattr(tf, "estimator"),
    reason=(f"TensorFlow {tf.__version__} has no tf.estimator (removed in "
            "2.16; tensorflow-estimator ends at 2.15): Estimator tests run "
            "on TensorFlow 2.15"))

INITIAL_SCALE = 2.0**10


def _input_fn():
  rng = np.random.RandomState(0)
  features = rng.randn(8, 4).astype(np.float32)
  labels = rng.randn(8, 2).astype(np.float32)
  return tf.data.Dataset.from_tensors((features, labels)).repeat()


def _model_fn(loss_scaled: bool, tolerant_saver: bool):
  """A linear regression trained with Adam, in float16 when `loss_scaled`."""

  def model_fn(features, labels, mode):
    dtype = tf.float16 if loss_scaled else tf.float32
    w = v1.get_variable("w", initializer=np.full((4, 2), 0.5, np.float32))
    prediction = tf.cast(tf.matmul(tf.cast(features, dtype),
                                   tf.cast(w, dtype)), tf.float32)
    loss = tf.reduce_mean(tf.square(prediction - labels))
    opt = v1.train.AdamOptimizer(0.01)
    if loss_scaled:
      opt = mp_optimizer.LossScaleOptimizer(
          opt, managers.ExponentialUpdateLossScaleManager(INITIAL_SCALE, 1000))
    train_op = opt.minimize(loss, global_step=v1.train.get_global_step())
    scaffold = (v1.train.Scaffold(saver=mp_optimizer.Saver(
        sharded=True, defer_build=True, save_relative_paths=True))
                if tolerant_saver else None)
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op,
                                      scaffold=scaffold)

  return model_fn


def _train(model_dir, loss_scaled, tolerant_saver=False, warm_start=None):
  estimator = tf.estimator.Estimator(
      _model_fn(loss_scaled, tolerant_saver), model_dir=model_dir,
      config=tf.estimator.RunConfig(log_step_count_steps=None),
      warm_start_from=warm_start)
  estimator.train(_input_fn, steps=2)
  return estimator


class EstimatorPrecisionTest(parameterized.TestCase):

  def test_model_dir_of_a_float32_run_continues_with_the_tolerant_saver(self):
    model_dir = self.create_tempdir().full_path
    _train(model_dir, loss_scaled=False)
    with self.assertLogs("tensorflow", "WARNING") as logs:
      estimator = _train(model_dir, loss_scaled=True, tolerant_saver=True)
    value = estimator.get_variable_value
    self.assertEqual(value("global_step"), 4)
    # Adam went on counting: 0.9 ** (1 + 4 steps), not 0.9 ** (1 + 2).
    self.assertAlmostEqual(float(value("beta1_power")), 0.9**5, places=6)
    self.assertEqual(value("loss_scale"), INITIAL_SCALE)
    self.assertTrue(any("holds no loss-scale state" in r.getMessage()
                        for r in logs.records))

  def test_model_dir_of_a_float32_run_fails_with_the_default_saver(self):
    model_dir = self.create_tempdir().full_path
    _train(model_dir, loss_scaled=False)
    with self.assertRaisesRegex(tf.errors.NotFoundError, "not found in "
                                "checkpoint"):
      _train(model_dir, loss_scaled=True)

  def _warm_started(self, from_dir, loss_scaled):
    """One step of a new Estimator warm-started from `from_dir`."""
    estimator = tf.estimator.Estimator(
        _model_fn(loss_scaled=loss_scaled, tolerant_saver=False),
        model_dir=self.create_tempdir().full_path,
        config=tf.estimator.RunConfig(log_step_count_steps=None),
        warm_start_from=from_dir)
    estimator.train(_input_fn, steps=1)
    return estimator

  def test_warm_start_from_a_float32_run_starts_the_scale(self):
    float32_dir = self.create_tempdir().full_path
    float32_w = _train(float32_dir, loss_scaled=False).get_variable_value("w")
    estimator = self._warm_started(float32_dir, loss_scaled=True)
    self.assertEqual(estimator.get_variable_value("global_step"), 1)
    self.assertEqual(estimator.get_variable_value("loss_scale"),
                     INITIAL_SCALE)
    # One Adam step of 0.01 from the warm-started weights, not from 0.5.
    np.testing.assert_allclose(estimator.get_variable_value("w"), float32_w,
                               atol=0.011)
    self.assertFalse(np.allclose(float32_w, 0.5, atol=0.011))

  def test_loss_scaled_model_dir_continues_in_float32(self):
    model_dir = self.create_tempdir().full_path
    _train(model_dir, loss_scaled=True)
    estimator = _train(model_dir, loss_scaled=False)
    self.assertEqual(estimator.get_variable_value("global_step"), 4)
    self.assertAlmostEqual(
        float(estimator.get_variable_value("beta1_power")), 0.9**5, places=6)

  def test_warm_start_from_a_loss_scaled_run_into_float32(self):
    scaled_dir = self.create_tempdir().full_path
    scaled_w = _train(scaled_dir, loss_scaled=True).get_variable_value("w")
    estimator = self._warm_started(scaled_dir, loss_scaled=False)
    self.assertEqual(estimator.get_variable_value("global_step"), 1)
    np.testing.assert_allclose(estimator.get_variable_value("w"), scaled_w,
                               atol=0.011)

  def test_resume_check_is_silent_on_a_continued_model_dir(self):
    model_dir = self.create_tempdir().full_path
    _train(model_dir, loss_scaled=True)
    hook = mp_optimizer.ResumeCheckHook(model_dir)
    tf.estimator.Estimator(
        _model_fn(loss_scaled=True, tolerant_saver=False), model_dir=model_dir,
        config=tf.estimator.RunConfig(log_step_count_steps=None)).train(
            _input_fn, steps=1, hooks=[hook])
    self.assertEqual((hook.line, hook.not_restored), (None, {}))

  def test_resume_check_names_the_scale_state_after_a_float32_model_dir(self):
    model_dir = self.create_tempdir().full_path
    _train(model_dir, loss_scaled=False)
    hook = mp_optimizer.ResumeCheckHook(model_dir)
    tf.estimator.Estimator(
        _model_fn(loss_scaled=True, tolerant_saver=True), model_dir=model_dir,
        config=tf.estimator.RunConfig(log_step_count_steps=None)).train(
            _input_fn, steps=1, hooks=[hook])
    self.assertEqual(hook.not_restored,
                     {"loss-scale state": ["bad_steps", "good_steps",
                                           "loss_scale"]})
