"""MirroredStrategy with clipping, gradient accumulation and injected faults.

Two replicas (tests/support/mirrored.py). References are single-device runs of
TensorFlow's own optimizer on the sum of the replicas' losses (a v1 optimizer
under a strategy sums the replicas' gradients), clipped with TensorFlow's own
`tf.clip_by_global_norm` where the run clips.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import mirrored
from tests.support import harness
from tests.support import models
from tests.workers import replicated

v1 = tf.compat.v1
CLIP = 0.05
NONE = replicated.NO_REPLICA


def _reference(steps, clip):
  """w after 0..steps steps on the summed loss, optionally clipped."""
  with tf.Graph().as_default() as graph:
    w = v1.get_variable("w", initializer=replicated.INITIAL_W)
    xs, ys = replicated.all_replica_data()
    total = tf.add_n([replicated.loss(w, xs[r], ys[r])
                      for r in range(replicated.REPLICAS)])
    grads = tf.gradients(total, [w])
    if clip:
      grads, _ = tf.clip_by_global_norm(grads, CLIP)
    train_op = v1.train.MomentumOptimizer(
        replicated.LEARNING_RATE, replicated.MOMENTUM).apply_gradients(
            [(grads[0], w)])
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      weights = [sess.run(w)]
      for _ in range(steps):
        sess.run(train_op)
        weights.append(sess.run(w))
  return weights


def _optimizer(clip, accumulate):
  # The ceiling keeps clean float16 steps from overflowing on their own.
  return lambda: mp_optimizer.LossScaleOptimizer(
      v1.train.MomentumOptimizer(replicated.LEARNING_RATE, replicated.MOMENTUM),
      managers.ExponentialUpdateLossScaleManager(
          8, 2, decr_every_n_nan_or_inf=1, decr_ratio=0.5, max_loss_scale=2**8),
      global_clipnorm=CLIP if clip else None,
      gradient_accumulation_steps=2 if accumulate else None)


class ReplicatedOptionsTest(parameterized.TestCase):

  def assert_identical(self, run):
    """Mirrored state is bit-identical on every replica.

    Gradient accumulators are ON_READ: each replica holds its own partial
    window by design, and the inner optimizer sums them once per window.
    """
    for variable in run.graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES):
      if variable.synchronization == tf.VariableSynchronization.ON_READ:
        continue
      first, *rest = run.replica_values(variable)
      for value in rest:
        self.assertEqual(np.asarray(first).tobytes(),
                         np.asarray(value).tobytes(), variable.name)

  @parameterized.named_parameters(harness.named_product(option=["clip", "accumulate", "clip_and_accumulate"],
                         legacy=[False, True]))
  def test_replicas_agree_and_match_the_single_device_reference(
      self, option, legacy):
    clip, accumulate = "clip" in option, "accumulate" in option
    with models.legacy_graph_behavior(legacy):
      run = mirrored.MirroredRun(self, _optimizer(clip, accumulate))
    # Each replica feeds the same batch every micro-step, so a window of two
    # finite micro-steps has the mean gradient of one step.
    schedule = (NONE, 0, NONE, NONE, 1, NONE, NONE, NONE)
    finite = [r == NONE for r in schedule]
    applied = np.cumsum(finite) // 2 if accumulate else np.cumsum(finite)
    reference = _reference(int(applied[-1]), clip)
    if clip:  # The clip must be active for this test to mean anything.
      unclipped = _reference(1, False)[1]
      self.assertFalse(np.allclose(unclipped, reference[1], rtol=1e-3))
    for poisoned, steps_applied in zip(schedule, applied):
      run.step(poisoned, np.inf)
      self.assert_identical(run)
      self.assertEqual(run.read("global_step"), steps_applied)
      np.testing.assert_allclose(run.replica_values(run.w)[0],
                                 reference[steps_applied], rtol=2e-5,
                                 atol=1e-6)

  def test_precision_telemetry_gives_each_micro_step_its_reason(self):
    # As tests/step/test_telemetry.py on one device: the window's count is
    # read in cross-replica context, where a mirrored counter has no one
    # handle.
    run = mirrored.MirroredRun(self, lambda: mp_optimizer.LossScaleOptimizer(
        v1.train.GradientDescentOptimizer(0.1),
        managers.FixedLossScaleManager(8), gradient_accumulation_steps=2,
        precision_telemetry=True))
    with run.graph.as_default():
      reason = mp_optimizer.signals.precision()["skip_reason"]
    reasons = []
    for poisoned in (NONE, NONE, NONE, 0, NONE):
      run.step(poisoned, np.nan)
      reasons.append(int(run.session.run(reason)))
    # micro-step, window applied, micro-step, overflow, window applied.
    self.assertEqual(reasons, [3, 0, 3, 1, 0])


class ReplicaFaultInjectionTest(parameterized.TestCase):

  def test_two_thousand_steps_with_one_replica_poisoned_at_random(self):
    steps, rng = 2000, np.random.RandomState(5)
    run = mirrored.MirroredRun(self, _optimizer(False, False))
    with run.graph.as_default():
      skipped_total = mp_optimizer.skipped_steps()
      state = {v.ref() for v in run.optimizer.loss_scale_manager.variables()}
      watched = [v for v in v1.global_variables() if v.ref() not in state]
    copies = [c for v in watched
              for c in run.strategy.experimental_local_results(v)]
    before = run.session.run(copies)
    injected = corrupted = 0
    for _ in range(steps):
      poisoned = rng.rand() < 0.1
      injected += poisoned
      run.step(rng.randint(replicated.REPLICAS) if poisoned else NONE,
               (np.nan, np.inf, -np.inf)[rng.randint(3)])
      after = run.session.run(copies)
      unchanged = all(a.tobytes() == b.tobytes() for a, b in zip(before, after))
      replicas_equal = all(
          after[i].tobytes() == after[i + 1].tobytes()
          for i in range(0, len(after), replicated.REPLICAS))
      corrupted += (unchanged != poisoned) or not replicas_equal
      before = after
    skipped = int(run.session.run(skipped_total))
    print(f"fault injection [one replica of {replicated.REPLICAS}]: {steps} "
          f"steps, injected {injected}, skipped {skipped}, corrupted "
          f"{corrupted}")
    self.assertGreater(injected, steps // 20)
    self.assertEqual(skipped, injected)
    self.assertEqual(corrupted, 0)
