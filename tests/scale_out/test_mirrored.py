"""MirroredStrategy on one machine: one verdict, one scale, identical replicas.

Two replicas on two CPU devices of one session (`device_count`), built with
`strategy.run` in a v1 graph. Each replica sees different data; a fed replica
id makes that replica's loss (and so its gradients) NaN or Inf. The contract:
when any replica overflows, every replica skips, the scale backs off once,
and the replicas stay bit-identical; clean steps apply the mean gradient.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import mirrored
from tests.support import models
from tests.workers import launch
from tests.workers import replicated

v1 = tf.compat.v1
DEVICES = mirrored.DEVICES
NO_REPLICA = replicated.NO_REPLICA
_Run = mirrored.MirroredRun


class MirroredStrategyTest(parameterized.TestCase):

  def assert_replicas_identical(self, run: _Run) -> None:
    for variable in run.graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES):
      values = run.replica_values(variable)
      self.assertLen(values, len(DEVICES), variable.op.name)
      for value in values[1:]:
        self.assertEqual(np.asarray(values[0]).tobytes(),
                         np.asarray(value).tobytes(), variable.op.name)

  @parameterized.named_parameters(
      (f"{manager}_{poison}_{graph}{'_built_per_replica' * per_replica}",
       manager, poison, graph == "legacy", per_replica)
      for manager in sorted(replicated.MANAGERS) for poison in (np.inf, np.nan)
      for graph in ("tf2", "legacy") for per_replica in (False, True)
      if not per_replica or (poison == np.inf and graph == "tf2"))
  def test_one_replica_overflowing_skips_every_replica(self, manager, poison,
                                                       legacy, per_replica):
    # Built per replica (an Estimator model_fn's way), each replica has its
    # own optimizer and manager; the managers must share one state.
    with models.legacy_graph_behavior(legacy):
      run = _Run(self, lambda: replicated.make_optimizer(manager),
                 per_replica=per_replica)
    reference = replicated.reference_weights()
    with run.graph.as_default():
      scale = tf.identity(run.optimizer.get_loss_scale())
    scales, steps = [], []
    for poisoned_replica, applied_so_far in zip(
        replicated.SCHEDULE, np.cumsum(replicated.APPLIED)):
      w_before = run.replica_values(run.w)[0]
      run.step(poisoned_replica, poison)
      self.assert_replicas_identical(run)
      w_after = run.replica_values(run.w)[0]
      self.assertEqual(poisoned_replica == NO_REPLICA,
                       not np.array_equal(w_before, w_after))
      np.testing.assert_allclose(w_after, reference[applied_so_far],
                                 rtol=1e-5, atol=1e-6)
      scales.append(float(run.session.run(scale)))
      steps.append(int(run.read("global_step")))
    self.assertEqual(scales, replicated.EXPECTED_SCALES[manager])
    self.assertEqual(steps, list(np.cumsum(replicated.APPLIED)))

  def test_same_numbers_as_tensorflow_builtin_under_the_strategy(self):
    ours = _Run(self, lambda: mp_optimizer.LossScaleOptimizer(
        v1.train.AdamOptimizer(0.01), managers.DynamicLossScale(8, 2)))
    tf_mp = v1.mixed_precision
    theirs = _Run(self, lambda: tf_mp.MixedPrecisionLossScaleOptimizer(
        v1.train.AdamOptimizer(0.01), tf_mp.DynamicLossScale(8, 2)))
    for poisoned_replica in replicated.SCHEDULE:
      for run in (ours, theirs):
        run.step(poisoned_replica, np.inf)
      for name in ("w", "w/Adam", "w/Adam_1", "global_step",
                   "current_loss_scale", "good_steps"):
        self.assertEqual(np.asarray(ours.read(name)).tobytes(),
                         np.asarray(theirs.read(name)).tobytes(), name)
    self.assertEqual(ours.read("current_loss_scale"), 4.0)

  def test_scale_state_is_one_mirrored_variable_per_field(self):
    manager = managers.ExponentialUpdateLossScaleManager(8, 2)
    run = _Run(self, lambda: mp_optimizer.LossScaleOptimizer(
        v1.train.GradientDescentOptimizer(0.1), manager))
    with run.graph.as_default():
      state = manager.variables()
    self.assertEqual(sorted(v.op.name for v in state),
                     ["bad_steps", "good_steps", "loss_scale"])
    for variable in state:
      self.assertLen(run.strategy.experimental_local_results(variable),
                     len(DEVICES))
      self.assertEqual(variable.aggregation,
                       tf.VariableAggregation.ONLY_FIRST_REPLICA)
      self.assertFalse(variable.trainable)


class _RecordingManager(managers.FixedLossScaleManager):
  """A fixed scale that notes the context of every `update_loss_scale` call."""

  def __init__(self, loss_scale):
    super().__init__(loss_scale)
    self.update_contexts = []

  def update_loss_scale(self, finite_grads):
    self.update_contexts.append(tf.distribute.in_cross_replica_context())
    return super().update_loss_scale(finite_grads)


class CrossReplicaContextTest(parameterized.TestCase):

  def test_verdict_and_update_are_made_once_in_cross_replica_context(self):
    manager = _RecordingManager(4)
    run = _Run(self, lambda: mp_optimizer.LossScaleOptimizer(
        v1.train.GradientDescentOptimizer(0.1), manager))
    self.assertEqual(manager.update_contexts, [True])
    verdicts = [op for op in run.graph.get_operations()
                if op.name.endswith("all_replicas_finite")]
    self.assertLen(verdicts, 1)

  def test_apply_gradients_under_scope_but_outside_run_is_refused(self):
    with tf.Graph().as_default():
      strategy = tf.distribute.MirroredStrategy(DEVICES)
      with strategy.scope():
        w = v1.get_variable("w", initializer=1.0)
        opt = mp_optimizer.LossScaleOptimizer(
            v1.train.GradientDescentOptimizer(0.1),
            managers.FixedLossScaleManager(4))
        with self.assertRaisesRegex(RuntimeError, "strategy.run"):
          opt.apply_gradients([(tf.constant(1.0), w)])


class ExampleTest(parameterized.TestCase):

  def test_example_keeps_replicas_identical_through_overflows(self):
    result = launch.run_example("mirrored_example.py")
    self.assertEqual(result.returncode, 0, result.stderr[-4000:])
    lines = result.stdout.splitlines()
    self.assertLen([line for line in lines if "overflows)" in line], 3)
    self.assertTrue(all(line.endswith("replicas identical: True")
                        for line in lines if line.startswith("run")))
    self.assertEqual(lines[-1], "60 runs: 57 applied, 3 skipped")


if __name__ == "__main__":
  tf.test.main()
