"""Estimator: our optimizer in a `model_fn`, across train/evaluate/train.

`tf.estimator` exists up to TensorFlow 2.15 (with tensorflow-estimator); on
newer TensorFlow every test here is reported as skipped.

The input pipeline marks whole batches as poisoned: their loss becomes Inf on
the replica the data names, so which runs skip is known in advance and the
expected scales below are worked by hand.
"""

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

import mp_optimizer
from tests.workers import estimator_model
from tests.workers import launch

v1 = tf.compat.v1
pytestmark = pytest.mark.skipif(
    not hasattr(tf, "estimator"),
    reason=(f"TensorFlow {tf.__version__} has no tf.estimator (removed in "
            "2.16; tensorflow-estimator ends at 2.15): Estimator tests run "
            "on TensorFlow 2.15"))

NO_REPLICA = estimator_model.NO_REPLICA
MANAGERS = estimator_model.MANAGERS
SCALE_NAMES = estimator_model.SCALE_NAMES


def _estimator(model_fn, model_dir, **config):
  return tf.estimator.Estimator(
      model_fn, model_dir=model_dir,
      config=tf.estimator.RunConfig(save_checkpoints_steps=1000,
                                    log_step_count_steps=None, **config))


def _optimizer(manager, inner=None):
  return mp_optimizer.LossScaleOptimizer(
      inner or v1.train.GradientDescentOptimizer(0.05), manager)


# Built at import, before any graph exists (TF #37666 was this case).
OUTSIDE_MANAGER = {name: make() for name, make in MANAGERS.items()}
OUTSIDE_OPTIMIZER = {name: _optimizer(make()) for name, make in
                     MANAGERS.items()}


def _scales_and_steps(rows, name, *counters):
  return [tuple(row[key] for key in (SCALE_NAMES[name], *counters,
                                     "global_step")) for row in rows]


class EstimatorTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{name}_{where}", name, make_optimizer)
      for name in sorted(MANAGERS)
      for where, make_optimizer in (
          ("all_in_model_fn", lambda name=name: _optimizer(MANAGERS[name]())),
          ("manager_outside",
           lambda name=name: _optimizer(OUTSIDE_MANAGER[name])),
          ("optimizer_outside", lambda name=name: OUTSIDE_OPTIMIZER[name])))
  def test_train_evaluate_train_resumes_the_scale(self, name, make_optimizer):
    built = {}

    def get_optimizer():
      built["optimizer"] = make_optimizer()
      return built["optimizer"]

    est = _estimator(estimator_model.make_model_fn(get_optimizer),
                     launch.scratch_dir(self.addCleanup))
    input_fn = estimator_model.make_input_fn(
        [NO_REPLICA, 0, NO_REPLICA, NO_REPLICA])
    first, second = (
        estimator_model.StateRecorder(
            lambda: built["optimizer"].loss_scale_manager) for _ in range(2))
    est.train(input_fn, steps=2, hooks=[first])
    evaluation = est.evaluate(input_fn, steps=1)
    est.train(input_fn, steps=2, hooks=[second])

    # Worked by hand, as (scale, good_steps, global_step) after each run: +1
    # good step; an overflow halves the scale and clears good_steps; the
    # second good step in a row doubles it. The second `train` starts from
    # the checkpoint (512, one good step), so its first step doubles at once;
    # starting afresh it would read (1024, 1, 3).
    self.assertEqual(_scales_and_steps(first.rows, name, "good_steps"),
                     [(1024, 1, 1), (512, 0, 1), (512, 1, 2)])
    self.assertEqual(_scales_and_steps(second.rows, name, "good_steps"),
                     [(1024, 0, 3), (512, 0, 3), (512, 1, 4)])
    self.assertEqual(evaluation["loss_scale"], 512.0)
    self.assertEqual(est.get_variable_value(SCALE_NAMES[name]), 512.0)
    self.assertEqual(est.get_variable_value("global_step"), 4)

  @parameterized.named_parameters(("steps", {"steps": 4}),
                                  ("max_steps", {"max_steps": 4}))
  def test_global_step_counts_only_applied_steps(self, stop):
    manager = MANAGERS["contrib"]()
    est = _estimator(estimator_model.make_model_fn(lambda: _optimizer(manager)),
                     launch.scratch_dir(self.addCleanup))
    recorder = estimator_model.StateRecorder(lambda: manager)
    est.train(estimator_model.make_input_fn(
        [0, NO_REPLICA, 0, NO_REPLICA, NO_REPLICA, NO_REPLICA]),
              hooks=[recorder], **stop)
    # Two of the six runs overflowed: six runs were needed for four steps.
    self.assertEqual(_scales_and_steps(recorder.rows, "contrib"),
                     [(512, 0), (512, 1), (256, 1), (256, 2), (512, 3),
                      (512, 4)])
    self.assertEqual(est.get_variable_value("global_step"), 4)
    self.assertTrue(np.all(np.isfinite(est.get_variable_value("w"))))


class MirroredEstimatorTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{name}_{where}", name, where) for name in ("contrib", "tf2")
      for where in ("manager_outside", "all_in_model_fn"))
  def test_train_distribute_skips_on_every_replica(self, name, where):
    # With the manager built in the model_fn, each replica builds its own;
    # they must share one state (the first replica's manager is recorded).
    outside = MANAGERS[name]() if where == "manager_outside" else None
    managers_built = []

    def get_optimizer():
      managers_built.append(outside or MANAGERS[name]())
      return _optimizer(managers_built[-1],
                        v1.train.MomentumOptimizer(0.05, 0.9))

    # Built the way a TF1 program (eager execution disabled) builds it: in
    # graph mode, where the strategy needs no eager devices.
    with tf.Graph().as_default():
      strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    est = _estimator(
        estimator_model.make_model_fn(get_optimizer),
        launch.scratch_dir(self.addCleanup), train_distribute=strategy,
        # Estimator sessions see only the devices their config names.
        session_config=v1.ConfigProto(device_count={"CPU": 2},
                                      allow_soft_placement=True))
    # Each run consumes one batch per replica (both batches of a run carry
    # the same mark); runs 2 and 4 overflow on replica 0 and 1 respectively.
    per_run = [NO_REPLICA, 0, NO_REPLICA, 1, NO_REPLICA]
    recorder = estimator_model.StateRecorder(lambda: managers_built[0])
    est.train(estimator_model.make_input_fn(np.repeat(per_run, 2)), steps=3,
              hooks=[recorder])
    self.assertLen(managers_built, 2)  # One model_fn call per replica.
    if where == "all_in_model_fn":
      self.assertEqual([v.name for v in managers_built[0].variables()],
                       [v.name for v in managers_built[1].variables()])
    self.assertEqual(_scales_and_steps(recorder.rows, name),
                     [(1024, 1), (512, 1), (512, 2), (256, 2), (256, 3)])
    self.assertContainsSubset(["w", "global_step", SCALE_NAMES[name]],
                              recorder.replica_values)
    for variable_name, values in recorder.replica_values.items():
      self.assertLen(values, 2, variable_name)
      self.assertEqual(np.asarray(values[0]).tobytes(),
                       np.asarray(values[1]).tobytes(), variable_name)
    self.assertFalse(np.array_equal(est.get_variable_value("w"),
                                    np.zeros((4, 1), np.float32)))


class EstimatorExampleTest(parameterized.TestCase):

  def test_example_runs_and_reports_resumed_state(self):
    result = launch.run_example("estimator_example.py")
    self.assertEqual(result.returncode, 0, result.stderr[-4000:])
    self.assertIn("resumed loss scale", result.stdout)
    self.assertIn("skipped", result.stdout)


if __name__ == "__main__":
  tf.test.main()


class SkipSignalsInEstimatorTest(parameterized.TestCase):
  """step_applied, skipped_steps, the hook and summaries reach Estimator."""

  def test_hook_and_summaries_see_the_skipped_runs(self):
    model_dir = launch.scratch_dir(self.addCleanup)

    def model_fn(features, labels, mode):
      spec = estimator_model.make_model_fn(
          lambda: _optimizer(MANAGERS["contrib"]()))(features, labels, mode)
      mp_optimizer.add_summaries()
      return spec

    est = _estimator(model_fn, model_dir, save_summary_steps=1)
    hook = mp_optimizer.LossScaleHook(every_n_steps=4)
    # Runs 1 and 2 of each 4 poison replica 0: half of the runs are skipped.
    input_fn = estimator_model.make_input_fn([NO_REPLICA, 0, 0, NO_REPLICA])
    with self.assertLogs("tensorflow", "INFO") as logs:
      est.train(input_fn, max_steps=4, hooks=[hook])
    lines = [r.getMessage() for r in logs.records
             if r.getMessage().startswith("loss scale")]
    self.assertIn("2 of the last 4 steps skipped (50.0%)", lines[0])
    self.assertEqual(est.get_variable_value("global_step"), 4)
    tags = set()
    for path in tf.io.gfile.glob(f"{model_dir}/events.out.tfevents.*"):
      for event in v1.train.summary_iterator(path):
        tags.update(value.tag for value in event.summary.value)
    self.assertContainsSubset(
        {"mp_optimizer/loss_scale", "mp_optimizer/skipped_steps"}, tags)
