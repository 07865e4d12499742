"""Estimator: our optimizer in a `model_fn`, across train/evaluate/train.

`tf.estimator` exists up to TensorFlow 2.15 (with tensorflow-estimator); on
newer TensorFlow every test here is reported as skipped.

The input pipeline marks whole batches as poisoned: their loss becomes Inf on
the replica the data names, so which runs skip is known in advance and the
expected scales below are worked by hand.
"""

import subprocess
import sys

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

import managers
import mp_optimizer
from tests.workers import launch

v1 = tf.compat.v1
pytestmark = pytest.mark.skipif(
    not hasattr(tf, "estimator"),
    reason=(f"TensorFlow {tf.__version__} has no tf.estimator (removed in "
            "2.16; tensorflow-estimator ends at 2.15): Estimator tests run "
            "on TensorFlow 2.15"))

NO_REPLICA = -1
BATCH = 4
# Module-level manager: built before any graph exists (TF #37666).
OUTSIDE_MANAGER = {}
MANAGERS = {
    "contrib": lambda: managers.ExponentialUpdateLossScaleManager(
        1024, 2, decr_every_n_nan_or_inf=1, decr_ratio=0.5),
    "tf2": lambda: managers.DynamicLossScale(1024, 2),
}
OUTSIDE_MANAGER.update((name, make()) for name, make in MANAGERS.items())
SCALE_NAMES = {"contrib": "loss_scale", "tf2": "current_loss_scale"}


def make_input_fn(poisoned_replica_per_batch):
  """Batches of a linear problem; batch b names the replica it poisons."""
  def input_fn():
    rng = np.random.RandomState(0)
    count = BATCH * len(poisoned_replica_per_batch)
    x = rng.randn(count, 4).astype(np.float32)
    y = x @ np.array([[1.], [-2.], [0.5], [3.]], np.float32)
    poisoned = np.repeat(np.asarray(poisoned_replica_per_batch, np.int32),
                         BATCH)
    return tf.data.Dataset.from_tensor_slices(
        ({"x": x, "poisoned_replica": poisoned}, y)).batch(BATCH).repeat()
  return input_fn


def make_model_fn(get_optimizer):
  """A float16 linear model trained by `get_optimizer()` (called inside)."""
  def model_fn(features, labels, mode):
    w = v1.get_variable("w", [4, 1], initializer=v1.zeros_initializer())
    pred = tf.matmul(tf.cast(features["x"], tf.float16), tf.cast(w, tf.float16))
    loss = tf.reduce_mean(tf.square(tf.cast(pred, tf.float32) - labels))
    opt = get_optimizer()
    if mode == tf.estimator.ModeKeys.EVAL:
      return tf.estimator.EstimatorSpec(
          mode, loss=loss,
          eval_metric_ops={"loss_scale": v1.metrics.mean(opt.get_loss_scale())})
    replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
    poison = tf.where(
        tf.equal(features["poisoned_replica"][0], replica_id), np.inf, 1.0)
    train_op = opt.minimize(loss * poison,
                            global_step=v1.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
  return model_fn


class StateRecorder(v1.train.SessionRunHook):
  """After every run: global_step and the manager's state, by variable name."""

  def __init__(self, manager_of_graph):
    self._manager_of_graph = manager_of_graph
    self.rows = []
    self.replica_values = {}

  def begin(self):
    state = {v.op.name: v for v in self._manager_of_graph().variables()}
    state["global_step"] = v1.train.get_global_step()
    self._fetches = state
    self._variables = v1.global_variables()

  def after_run(self, run_context, run_values):
    self.rows.append({k: v.item() for k, v in
                      run_context.session.run(self._fetches).items()})

  def end(self, session):
    strategy = tf.distribute.get_strategy()
    self.replica_values = {
        v.op.name: session.run(list(strategy.experimental_local_results(v)))
        for v in self._variables}


def _estimator(model_fn, model_dir, **config):
  return tf.estimator.Estimator(
      model_fn, model_dir=model_dir,
      config=tf.estimator.RunConfig(save_checkpoints_steps=1000,
                                    log_step_count_steps=None, **config))


class EstimatorTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{name}_built_{where}", name, where)
      for name in sorted(MANAGERS) for where in ("outside", "in_model_fn"))
  def test_train_evaluate_train_resumes_the_scale(self, name, where):
    built = {}

    def get_optimizer():
      manager = (OUTSIDE_MANAGER[name] if where == "outside"
                 else MANAGERS[name]())
      built["manager"] = manager
      return mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.05), manager)

    est = _estimator(make_model_fn(get_optimizer), launch.scratch_dir(self))
    input_fn = make_input_fn([NO_REPLICA, 0, NO_REPLICA, NO_REPLICA])
    first, second = (StateRecorder(lambda: built["manager"]) for _ in range(2))
    est.train(input_fn, steps=2, hooks=[first])
    evaluation = est.evaluate(input_fn, steps=1)
    est.train(input_fn, steps=2, hooks=[second])

    # Worked by hand: +1 good step, overflow halves (and clears good_steps),
    # the second good step in a row doubles. The second `train` starts from
    # the checkpoint (512, one good step), so its first step doubles at once;
    # starting afresh it would read (1024, 1).
    expected_first = [(1024, 1, 1), (512, 0, 1), (512, 1, 2)]
    expected_second = [(1024, 0, 3), (512, 0, 3), (512, 1, 4)]
    scale_name = SCALE_NAMES[name]
    self.assertEqual(
        [(r[scale_name], r["good_steps"], r["global_step"]) for r in first.rows],
        expected_first)
    self.assertEqual(
        [(r[scale_name], r["good_steps"], r["global_step"])
         for r in second.rows], expected_second)
    self.assertEqual(evaluation["loss_scale"], 512.0)
    self.assertEqual(est.get_variable_value(scale_name), 512.0)
    self.assertEqual(est.get_variable_value("global_step"), 4)

  @parameterized.named_parameters(("steps", {"steps": 4}),
                                  ("max_steps", {"max_steps": 4}))
  def test_global_step_counts_only_applied_steps(self, stop):
    built = {"manager": MANAGERS["contrib"]()}
    est = _estimator(
        make_model_fn(lambda: mp_optimizer.LossScaleOptimizer(
            v1.train.GradientDescentOptimizer(0.05), built["manager"])),
        launch.scratch_dir(self))
    recorder = StateRecorder(lambda: built["manager"])
    est.train(make_input_fn([0, NO_REPLICA, 0, NO_REPLICA, NO_REPLICA,
                             NO_REPLICA]), hooks=[recorder], **stop)
    # Two of the six runs overflowed: six runs were needed for four steps.
    self.assertEqual([r["global_step"] for r in recorder.rows],
                     [0, 1, 1, 2, 3, 4])
    self.assertEqual(est.get_variable_value("global_step"), 4)
    self.assertEqual(est.get_variable_value("loss_scale"), 512.0)
    self.assertTrue(np.all(np.isfinite(est.get_variable_value("w"))))


class MirroredEstimatorTest(parameterized.TestCase):

  @parameterized.named_parameters(("contrib", "contrib"), ("tf2", "tf2"))
  def test_train_distribute_skips_on_every_replica(self, name):
    manager = MANAGERS[name]()
    # Built as a TF1 program (eager execution disabled) builds it: in graph
    # mode, where it needs no eager devices and reduces on one device.
    with tf.Graph().as_default():
      strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    est = _estimator(
        make_model_fn(lambda: mp_optimizer.LossScaleOptimizer(
            v1.train.MomentumOptimizer(0.05, 0.9), manager)),
        launch.scratch_dir(self),
        train_distribute=strategy,
        # Estimator's session config replaces the process's device setup;
        # soft placement on one CPU device would put both replicas together.
        session_config=v1.ConfigProto(device_count={"CPU": 2},
                                      allow_soft_placement=True))
    # Each run consumes one batch per replica; runs 2 and 4 overflow on
    # replica 0 and replica 1 respectively.
    per_run = [NO_REPLICA, 0, NO_REPLICA, 1, NO_REPLICA]
    recorder = StateRecorder(lambda: manager)
    est.train(make_input_fn(np.repeat(per_run, 2)), steps=3, hooks=[recorder])
    scale_name = SCALE_NAMES[name]
    self.assertEqual(
        [(r[scale_name], r["global_step"]) for r in recorder.rows],
        [(1024, 1), (512, 1), (512, 2), (256, 2), (256, 3)])
    self.assertNotEmpty(recorder.replica_values)
    for variable_name, values in recorder.replica_values.items():
      self.assertLen(values, 2, variable_name)
      self.assertEqual(np.asarray(values[0]).tobytes(),
                       np.asarray(values[1]).tobytes(), variable_name)
    self.assertFalse(np.array_equal(est.get_variable_value("w"),
                                    np.zeros((4, 1), np.float32)))


class EstimatorExampleTest(parameterized.TestCase):

  def test_example_runs_and_reports_resumed_state(self):
    result = subprocess.run(
        [sys.executable, str(launch.REPO_ROOT / "examples" /
                             "estimator_example.py")],
        env=launch.worker_env(), capture_output=True, text=True, timeout=300,
        check=False)
    self.assertEqual(result.returncode, 0, result.stderr[-4000:])
    self.assertIn("resumed loss scale", result.stdout)
    self.assertIn("skipped", result.stdout)


if __name__ == "__main__":
  tf.test.main()
