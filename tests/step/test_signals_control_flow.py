"""Skip signals of a step built inside tf.cond / tf.while_loop, v1 and v2.

Legacy gradient accumulation calls `apply_gradients` inside a `tf.cond`
branch. The signals are then reads made in the outermost graph; they are
fetched here in a run after the train op's, as documented. Expected values
are the contrib state machine worked by hand: initial scale 1024, growth x2
after 3 good steps, shrink x0.8 after 2 overflows.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import control_flow
from tests.support import models

v1 = tf.compat.v1
SHRUNK = float(np.float32(1024) * np.float32(0.8))


def _manager(kind):
  if kind == "dynamic":
    return managers.ExponentialUpdateLossScaleManager(1024, 3)
  return managers.FixedLossScaleManager(8, skip_nonfinite_steps=False)


def _build(construct, manager):
  """Returns (feeds maker, train op): the step runs in a cond or a loop."""
  poison = models.poison_input()
  loss = models.dense_loss(poison)
  opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["adam"](), manager)
  grads_and_vars = opt.compute_gradients(loss)
  global_step = v1.train.get_or_create_global_step()
  # How often the step runs in one sess.run: cond 0 or 1, loop 0..n.
  runs = v1.placeholder(tf.int32, [], name="runs")

  def step():
    with tf.control_dependencies([opt.apply_gradients(grads_and_vars,
                                                      global_step)]):
      return tf.constant(1)

  if construct == "cond":
    train_op = tf.cond(runs > 0, step, lambda: tf.constant(0))
  else:
    train_op = tf.while_loop(lambda i: i < runs, lambda i: i + step(),
                             [tf.constant(0)])
  return lambda times, bad: {runs: times, poison: np.inf if bad else 1.0}, train_op


# (times the step runs in this sess.run, overflow?) -> (step_applied,
# skipped_steps, loss scale, global_step) read after the run.
COND_RUNS = [
    ((1, False), (True, 0, 1024.0, 1)),
    ((1, True), (False, 1, 1024.0, 1)),   # First overflow: tolerated.
    ((0, False), (False, 1, 1024.0, 1)),  # Branch not taken: unchanged.
    ((1, True), (False, 2, SHRUNK, 1)),   # Second overflow: 1024 * 0.8.
    ((1, False), (True, 2, SHRUNK, 2)),
    ((0, True), (True, 2, SHRUNK, 2)),    # Not taken: still the newest step.
]
LOOP_RUNS = [
    ((2, False), (True, 0, 1024.0, 2)),
    ((1, True), (False, 1, 1024.0, 2)),
    ((0, False), (False, 1, 1024.0, 2)),  # No iteration: unchanged.
    ((3, False), (True, 1, 2048.0, 5)),   # Third good step in a row grows S.
    ((2, True), (False, 3, SHRUNK * 2, 5)),  # The second of two shrinks.
]
FIXED_RUNS = [  # A manager that applies every step, even an overflow.
    ((1, True), (True, 0, 8.0, 1)),
    ((0, False), (True, 0, 8.0, 1)),
]


class SignalsInsideControlFlowTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{construct}_v{version}_{kind}", construct, version, kind, initial,
       table)
      for construct, kind, initial, table in [
          ("cond", "dynamic", 1024.0, COND_RUNS),
          ("while_loop", "dynamic", 1024.0, LOOP_RUNS),
          ("cond", "fixed", 8.0, FIXED_RUNS)]
      for version in (1, 2))
  def test_signals_are_fetchable_and_follow_the_newest_step(
      self, construct, version, kind, initial, table):
    with control_flow.control_flow(f"v{version}"), tf.Graph().as_default() as graph:
      feeds, train_op = _build(construct, _manager(kind))
      signals = (mp_optimizer.step_applied(), mp_optimizer.skipped_steps(),
                 mp_optimizer.signals.loss_scale(),
                 v1.train.get_global_step())
      summary = mp_optimizer.add_summaries()
    self.assertTrue(v1.control_flow_v2_enabled())  # The switch is restored.
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      self.assertEqual(sess.run(signals), (False, 0, initial, 0))
      for (times, bad), expected in table:
        sess.run(train_op, feeds(times, bad))
        got = sess.run(signals)
        self.assertEqual(got, expected, f"after {(times, bad)}")
      parsed = v1.Summary.FromString(sess.run(summary))
    self.assertEqual({v.tag: v.simple_value for v in parsed.value},
                     {"mp_optimizer/loss_scale": np.float32(expected[2]),
                      "mp_optimizer/skipped_steps": expected[1]})

  @parameterized.named_parameters(("v1", 1), ("v2", 2))
  def test_a_step_outside_control_flow_stores_no_verdict(self, version):
    # Only a step inside control flow needs the verdict variable.
    with control_flow.control_flow(f"v{version}"), tf.Graph().as_default():
      loss = models.dense_loss(models.poison_input())
      opt = mp_optimizer.LossScaleOptimizer(
          models.OPTIMIZERS["sgd"](), _manager("dynamic"))
      opt.minimize(loss)
      made = {op.name for op in v1.get_default_graph().get_operations()
              if op.type == "VarHandleOp"}
    self.assertIn("skipped_steps", made)
    self.assertNotIn("last_step_applied", made)


if __name__ == "__main__":
  tf.test.main()
