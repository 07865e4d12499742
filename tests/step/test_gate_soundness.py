"""The gate holds back every op the inner apply builds, wherever it built it.

Each inner optimizer below is written to slip part of its work out of the
caller's control scope: an update or a counter built under
`tf.control_dependencies(None)`, `tf.init_scope` or `colocate_with`, a
`tf.cond` whose branch escapes its context (v1 control flow), a summary or a
variable made inside `apply_gradients`. On a NaN step nothing may change;
the next clean step must be exactly what the same inner optimizer, unwrapped,
does on its second clean step; `merge_all()` must be fetchable on every step
and `global_variables_initializer()` must run without the training feeds.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import harness
from tests.support import mirrored
from tests.support import models

v1 = tf.compat.v1
LEARNING_RATE = 0.1
APPLY_TAG = "gradient_norm"


class EscapedUpdate(v1.train.GradientDescentOptimizer):
  """Builds each update under `tf.control_dependencies(None)`."""

  def _apply_dense(self, grad, var):
    with tf.control_dependencies(None):
      return var.assign_sub(self._learning_rate * grad)

  _resource_apply_dense = _apply_dense


class CountingFinish(v1.train.AdamOptimizer):
  """Counts its updates in `_finish`, under `tf.control_dependencies(None)`."""

  def _create_slots(self, var_list):
    super()._create_slots(var_list)
    self._count = v1.Variable(0, dtype=tf.int64, name="updates",
                              trainable=False)

  def _finish(self, update_ops, name_scope):
    with tf.control_dependencies(None):
      counted = self._count.assign_add(1)
    return tf.group(super()._finish(update_ops, name_scope), counted)


class SummaryInApply(v1.train.GradientDescentOptimizer):
  """Writes a v1 summary of the gradients it applies."""

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    grads_and_vars = list(grads_and_vars)
    v1.summary.scalar(APPLY_TAG,
                      tf.linalg.global_norm([g for g, _ in grads_and_vars]))
    return super().apply_gradients(grads_and_vars, global_step, name)


class VariableInApply(v1.train.GradientDescentOptimizer):
  """Sums the first gradient into a variable it makes in apply_gradients."""

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    grads_and_vars = list(grads_and_vars)
    grad, var = grads_and_vars[0]
    total = v1.Variable(lambda: tf.zeros(var.shape, grad.dtype),
                        name="gradient_sum", trainable=False)
    with tf.control_dependencies([total.assign_add(grad)]):
      return super().apply_gradients(grads_and_vars, global_step, name)


class ColocatedInitScope(v1.train.GradientDescentOptimizer):
  """Updates and counts under `colocate_with` and `tf.init_scope`."""

  def _create_slots(self, var_list):
    self._count = v1.Variable(0, dtype=tf.int64, name="updates",
                              trainable=False)

  def _apply_dense(self, grad, var):
    with v1.colocate_with(var), tf.init_scope():
      return var.assign_sub(self._learning_rate * grad)

  _resource_apply_dense = _apply_dense

  def _finish(self, update_ops, name_scope):
    with v1.colocate_with(self._count), tf.init_scope():
      counted = self._count.assign_add(1)
    return tf.group(*update_ops, counted, name=name_scope)


class CondInFinish(v1.train.GradientDescentOptimizer):
  """Counts in a `tf.cond` branch, under `tf.control_dependencies(None)`.

  With v1 control flow that also leaves the cond's context.
  """

  def _create_slots(self, var_list):
    self._count = v1.Variable(0, dtype=tf.int64, name="updates",
                              trainable=False)

  def _finish(self, update_ops, name_scope):

    def count():
      with tf.control_dependencies(None):
        counted = self._count.assign_add(1)
      with tf.control_dependencies([counted]):
        return tf.constant(True)

    counted = tf.cond(self._count.read_value() >= 0, count,
                      lambda: tf.constant(False))
    return tf.group(*update_ops, counted, name=name_scope)


class ZerosLikeVariableInApply(v1.train.GradientDescentOptimizer):
  """Makes `tf.Variable(tf.zeros_like(var))` inside apply_gradients."""

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    grads_and_vars = list(grads_and_vars)
    grad, var = grads_and_vars[0]
    total = tf.Variable(tf.zeros_like(var), name="gradient_sum",
                        trainable=False)
    with tf.control_dependencies([total.assign_add(grad)]):
      return super().apply_gradients(grads_and_vars, global_step, name)


# Each inner optimizer, and the summary tags it writes on an applied step.
INNER = {
    "escaped_update": (EscapedUpdate, set()),
    "counting_finish": (CountingFinish, set()),
    "summary_in_apply": (SummaryInApply, {APPLY_TAG}),
    "variable_in_apply": (VariableInApply, set()),
    "colocated_init_scope": (ColocatedInitScope, set()),
    "cond_in_finish": (CondInFinish, set()),
}


def _build(inner_class, wrapped: bool, accumulation_steps=None):
  """One graph: a fed poison, the step, merge_all and the initializers."""
  poison = v1.placeholder(tf.float32, [], name="poison")  # Must be fed.
  loss = models.dense_loss(poison, compute_dtype=tf.float32)
  v1.summary.scalar("loss", loss)
  opt = inner_class(LEARNING_RATE)
  if wrapped:
    opt = mp_optimizer.LossScaleOptimizer(
        opt, managers.FixedLossScaleManager(2**4),
        gradient_accumulation_steps=accumulation_steps)
  train_op = opt.minimize(loss,
                          global_step=v1.train.get_or_create_global_step())
  return dict(poison=poison, train_op=train_op,
              summary=v1.summary.merge_all(),
              init=[v1.global_variables_initializer(),
                    v1.local_variables_initializer()],
              watched=v1.global_variables())


def _tags(serialized: bytes):
  summary = v1.Summary()
  summary.ParseFromString(serialized)
  return {value.tag for value in summary.value}


def _bare_after_clean_steps(inner_class, legacy, steps):
  """The unwrapped inner optimizer's state after `steps` clean steps."""
  with models.legacy_graph_behavior(legacy), tf.Graph().as_default():
    built = _build(inner_class, wrapped=False)
    with v1.Session() as sess:
      sess.run(built["init"])
      for _ in range(steps):
        sess.run(built["train_op"], {built["poison"]: 1.0})
      return harness.snapshot(sess, built["watched"])


class GateSoundnessTest(parameterized.TestCase):

  @parameterized.named_parameters(harness.named_product(inner=sorted(INNER), poison=[np.nan, np.inf],
                         legacy=[False, True]))
  def test_skipped_step_runs_nothing_the_inner_apply_built(
      self, inner, poison, legacy):
    inner_class, in_apply = INNER[inner]
    expected = _bare_after_clean_steps(inner_class, legacy, 2)
    with models.legacy_graph_behavior(legacy), tf.Graph().as_default():
      built = _build(inner_class, wrapped=True)
      applied = mp_optimizer.step_applied()
      skipped = mp_optimizer.skipped_steps()
      with v1.Session() as sess:
        sess.run(built["init"])  # No feed: initializers stay outside the gate.
        steps = []
        for value in (1.0, poison, 1.0):
          _, was_applied, summary = sess.run(
              [built["train_op"], applied, built["summary"]],
              {built["poison"]: value})
          steps.append((was_applied, _tags(summary),
                        harness.snapshot(sess, built["watched"])))
        skip_count = sess.run(skipped)
    (first, first_tags, after_first), (second, second_tags, after_skip), (
        third, third_tags, after_third) = steps
    self.assertEqual((first, second, third), (True, False, True))
    self.assertEqual(skip_count, 1)
    harness.assert_bit_identical(self, after_first, after_skip)
    harness.assert_bit_identical(self, expected, after_third)
    self.assertEqual(first_tags, {"loss"} | in_apply)
    self.assertEqual(second_tags, {"loss"})
    self.assertEqual(third_tags, {"loss"} | in_apply)

  @parameterized.named_parameters(harness.named_product(inner=sorted(INNER), legacy=[False, True]))
  def test_skipped_micro_step_runs_nothing_the_window_apply_built(
      self, inner, legacy):
    # Two finite micro-steps around a NaN one close one window; the mean of
    # two equal gradients is that gradient, so the window's apply is the
    # bare optimizer's first step.
    inner_class, in_apply = INNER[inner]
    expected = _bare_after_clean_steps(inner_class, legacy, 1)
    with models.legacy_graph_behavior(legacy), tf.Graph().as_default():
      built = _build(inner_class, wrapped=True, accumulation_steps=2)
      with v1.Session() as sess:
        sess.run(built["init"])
        steps = []
        for value in (1.0, np.nan, 1.0):
          _, summary = sess.run([built["train_op"], built["summary"]],
                                {built["poison"]: value})
          steps.append((_tags(summary),
                        harness.snapshot(sess, built["watched"])))
    (first_tags, after_first), (second_tags, after_skip), (
        third_tags, after_window) = steps
    harness.assert_bit_identical(self, after_first, after_skip)
    harness.assert_bit_identical(
        self, expected, {name: after_window[name] for name in expected})
    self.assertEqual((first_tags, second_tags, third_tags),
                     ({"loss"}, {"loss"}, {"loss"} | in_apply))

  @parameterized.named_parameters(("default", False), ("legacy", True))
  def test_variable_initialized_from_the_gated_side_is_refused(self, legacy):
    with models.legacy_graph_behavior(legacy), tf.Graph().as_default():
      with self.assertRaisesRegex(ValueError,
                                  r"`gradient_sum.*created inside the inner "
                                  r"optimizer's apply_gradients"):
        _build(ZerosLikeVariableInApply, wrapped=True)


class MirroredGateSoundnessTest(parameterized.TestCase):

  @parameterized.named_parameters(harness.named_product(
      inner=["escaped_update", "counting_finish", "colocated_init_scope"],
      replica=[0, 1]))
  def test_one_replica_overflowing_runs_nothing_on_any_replica(
      self, inner, replica):
    run = mirrored.MirroredRun(self, lambda: mp_optimizer.LossScaleOptimizer(
        INNER[inner][0](LEARNING_RATE), managers.FixedLossScaleManager(8)))
    variables = run.graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES)

    def state():
      return {f"{v.name}/{i}": value.tobytes()
              for v in variables
              for i, value in enumerate(run.replica_values(v))}

    run.step(mirrored.NO_REPLICA, 1.0)
    before = state()
    run.step(replica, np.nan)
    self.assertEqual(before, state())
    run.step(mirrored.NO_REPLICA, 1.0)
    self.assertNotEqual(before, state())


class TF2SummaryInApply(v1.train.GradientDescentOptimizer):
  """Writes a TF2 summary (`tf.summary.scalar`) of the gradients it applies."""

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    grads_and_vars = list(grads_and_vars)
    tf.summary.scalar(APPLY_TAG,
                      tf.linalg.global_norm([g for g, _ in grads_and_vars]),
                      step=v1.train.get_or_create_global_step())
    return super().apply_gradients(grads_and_vars, global_step, name)


class TF2SummaryTest(parameterized.TestCase):

  @parameterized.named_parameters(("default", False), ("legacy", True))
  def test_v2_summary_ops_stay_fetchable_on_skipped_steps(self, legacy):
    with models.legacy_graph_behavior(legacy), tf.Graph().as_default():
      writer = tf.summary.create_file_writer(self.create_tempdir().full_path)
      poison = v1.placeholder(tf.float32, [])
      with writer.as_default():
        train_op = mp_optimizer.LossScaleOptimizer(
            TF2SummaryInApply(LEARNING_RATE),
            managers.FixedLossScaleManager(8)).minimize(
                models.dense_loss(poison, compute_dtype=tf.float32),
                global_step=v1.train.get_or_create_global_step())
      summaries = v1.summary.all_v2_summary_ops()
      self.assertLen(summaries, 1)
      with v1.Session() as sess:
        sess.run([v1.global_variables_initializer(), writer.init()])
        written = [sess.run([train_op, summaries], {poison: value})[1]
                   for value in (1.0, np.inf, 1.0)]
        sess.run(writer.flush())
    # Written on the applied steps; "not written" on the skipped one.
    self.assertEqual(written, [[True], [False], [True]])
