"""LossScaleOptimizer: what it scales, what it skips, what it delegates."""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import harness
from tests.support import models

v1 = tf.compat.v1
MANAGERS = {
    "fixed": lambda: managers.FixedLossScaleManager(1024),
    "contrib": lambda: managers.ExponentialUpdateLossScaleManager(
        2**10, 2, decr_every_n_nan_or_inf=1, decr_ratio=0.5),
    "tf2": lambda: managers.DynamicLossScale(2**10, 2),
}


def _ancestors(op):
  """Every op that `op` depends on, through data or control edges."""
  seen, stack = set(), [op]
  while stack:
    current = stack.pop()
    for parent in [t.op for t in current.inputs] + list(current.control_inputs):
      if parent not in seen:
        seen.add(parent)
        stack.append(parent)
  return seen


class SkipNonFiniteStepTest(parameterized.TestCase):

  @parameterized.named_parameters(harness.named_product(optimizer=sorted(models.OPTIMIZERS),
                         poison=[np.nan, np.inf],
                         manager=sorted(MANAGERS),
                         legacy=[False, True]))
  def test_poisoned_step_changes_nothing_but_the_scale(
      self, optimizer, poison, manager, legacy):
    with models.legacy_graph_behavior(legacy), tf.Graph().as_default() as g:
      poison_in = models.poison_input()
      loss = models.dense_loss(poison_in)
      manager = MANAGERS[manager]()
      opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS[optimizer](),
                                            manager)
      global_step = v1.train.get_or_create_global_step()
      train_op = opt.minimize(loss, global_step=global_step)
      scale_state = {v.op.name for v in manager.variables()}
      watched = [v for v in v1.global_variables()
                 if v.op.name not in scale_state]
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(train_op)
        sess.run(train_op)  # Slots now hold non-trivial values.
        scale_before = sess.run(opt.get_loss_scale())
        before = harness.snapshot(sess, watched)
        sess.run(train_op, {poison_in: poison})
        harness.assert_bit_identical(self, before, harness.snapshot(sess,
                                                                    watched))
        scale_after = sess.run(opt.get_loss_scale())
        if manager.dynamic:
          self.assertEqual(scale_after, scale_before / 2)
        else:
          self.assertEqual(scale_after, scale_before)
        sess.run(train_op)
        self.assertEqual(sess.run(global_step), 3)
        after_clean = harness.snapshot(sess, watched)
        self.assertFalse(np.array_equal(after_clean["dense/w"],
                                        before["dense/w"]))

  def test_one_non_finite_gradient_skips_every_variable(self):
    with tf.Graph().as_default() as g:
      poison_in = models.poison_input()
      loss = (models.dense_loss(models.poison_input("clean"), "healthy") +
              models.dense_loss(poison_in, "sick"))
      opt = mp_optimizer.LossScaleOptimizer(
          models.OPTIMIZERS["sgd"](), MANAGERS["contrib"]())
      train_op = opt.minimize(loss)
      grads = opt.compute_gradients(loss)
      model_vars = v1.trainable_variables()
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        healthy = [g for g, v in grads if v.op.name.startswith("healthy")]
        self.assertTrue(np.all(np.isfinite(sess.run(healthy,
                                                    {poison_in: np.inf})[0])))
        before = harness.snapshot(sess, model_vars)
        sess.run(train_op, {poison_in: np.inf})
        harness.assert_bit_identical(self, before,
                                     harness.snapshot(sess, model_vars))


class UnscaledGradientsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("fixed", lambda: managers.FixedLossScaleManager(2**12)),
      ("dynamic", lambda: managers.ExponentialUpdateLossScaleManager(2**15, 9)))
  def test_gradients_equal_those_of_the_unscaled_loss(self, make_manager):
    # fp32 compute and a power-of-two scale: scaling is exact, so bit-equal.
    with tf.Graph().as_default() as g:
      loss = models.dense_loss(models.poison_input(), compute_dtype=tf.float32)
      opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["sgd"](),
                                            make_manager())
      ours = opt.compute_gradients(loss)
      reference = tf.gradients(loss, [v for _, v in ours])
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        got, want = sess.run(([gr for gr, _ in ours], reference))
      for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)

  def test_callable_loss(self):
    with tf.Graph().as_default() as g:
      poison_in = models.poison_input()
      opt = mp_optimizer.LossScaleOptimizer(
          models.OPTIMIZERS["sgd"](), managers.FixedLossScaleManager(8))
      grads = opt.compute_gradients(lambda: models.dense_loss(poison_in))
      self.assertLen(grads, 2)
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        self.assertTrue(all(np.all(np.isfinite(x))
                            for x in sess.run([gr for gr, _ in grads])))

  def test_float16_loss_is_scaled_in_float16(self):
    with tf.Graph().as_default() as g:
      opt = mp_optimizer.LossScaleOptimizer(
          models.OPTIMIZERS["sgd"](), managers.FixedLossScaleManager(1024))
      loss16 = tf.constant(0.5, tf.float16)
      scaled = opt.get_scaled_loss(loss16)
      self.assertEqual(scaled.dtype, tf.float16)
      with v1.Session(graph=g) as sess:
        self.assertEqual(sess.run(scaled), np.float16(512))

  @parameterized.named_parameters(
      ("int_tensor", lambda: tf.constant(3), "int32"),
      ("python_float", lambda: 3.0, "float"),
      ("callable_returning_int", lambda: lambda: tf.constant(3), "int32"))
  def test_non_float_loss_is_rejected_before_any_op(self, make_loss, shown):
    with tf.Graph().as_default() as g:
      opt = mp_optimizer.LossScaleOptimizer(
          models.OPTIMIZERS["sgd"](),
          managers.ExponentialUpdateLossScaleManager(8, 2))
      # Built in graph mode, the manager made its state; nothing else exists.
      made_by_manager = v1.global_variables()
      self.assertCountEqual([v.op.name for v in made_by_manager],
                            ["loss_scale", "good_steps", "bad_steps"])
      loss = make_loss()
      ops_before = len(g.get_operations()) + (1 if callable(loss) else 0)
      with self.assertRaisesRegex(TypeError, f"`loss`.*{shown}"):
        opt.compute_gradients(loss)
      self.assertLen(g.get_operations(), ops_before)
      self.assertEqual(v1.global_variables(), made_by_manager)


class NoneAndSparseGradientsTest(parameterized.TestCase):

  def test_none_gradient_passes_through(self):  # TF #31956
    with tf.Graph().as_default() as g:
      loss = models.dense_loss(models.poison_input())
      unused = v1.get_variable("unused", initializer=np.ones(3, np.float32))
      w = [v for v in v1.trainable_variables() if v.op.name == "dense/w"][0]
      opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["adam"](),
                                            MANAGERS["contrib"]())
      grads = dict((v.op.name, gr) for gr, v in opt.compute_gradients(loss))
      self.assertIsNone(grads["unused"])
      train_op = opt.minimize(loss)
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        w_before = harness.snapshot(sess, [w])["dense/w"]
        sess.run(train_op)
        np.testing.assert_array_equal(sess.run(unused), np.ones(3))
        self.assertFalse(np.array_equal(sess.run(w), w_before))

  def test_all_none_gradients_is_an_error(self):
    with tf.Graph().as_default():
      v1.get_variable("lonely", initializer=1.0)
      opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["sgd"](),
                                            MANAGERS["contrib"]())
      with self.assertRaisesRegex(ValueError, "No gradients"):
        opt.minimize(tf.constant(1.0))

  def test_sparse_gradient_stays_sparse_and_unscaled(self):
    with tf.Graph().as_default() as g:
      loss = models.embedding_loss(models.poison_input())
      opt = mp_optimizer.LossScaleOptimizer(
          models.OPTIMIZERS["sgd"](), managers.FixedLossScaleManager(2**10))
      (grad, table), = opt.compute_gradients(loss)
      self.assertIsInstance(grad, tf.IndexedSlices)
      reference, = tf.gradients(loss, [table])
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        got, want = sess.run((grad, reference))
      np.testing.assert_array_equal(got.indices, want.indices)
      np.testing.assert_allclose(got.values, want.values, rtol=1e-3)

  @parameterized.named_parameters(("nan", np.nan), ("inf", np.inf))
  def test_non_finite_sparse_values_skip_the_step(self, poison):
    with tf.Graph().as_default() as g:
      poison_in = models.poison_input()
      loss = models.embedding_loss(poison_in)
      opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["adam"](),
                                            MANAGERS["tf2"]())
      train_op = opt.minimize(loss)
      with v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(train_op)
        before = harness.snapshot(sess, v1.global_variables())
        sess.run(train_op, {poison_in: poison})
        after = harness.snapshot(sess, v1.global_variables())
        self.assertEqual(after.pop("current_loss_scale"),
                         before.pop("current_loss_scale") / 2)
        after.pop("good_steps"), before.pop("good_steps")
        harness.assert_bit_identical(self, before, after)


class DelegationTest(parameterized.TestCase):

  def test_is_a_true_v1_optimizer_with_slots_and_variables(self):  # TF #29130
    with tf.Graph().as_default():
      loss = models.dense_loss(models.poison_input())
      inner = models.OPTIMIZERS["adam"]()
      manager = MANAGERS["contrib"]()
      opt = mp_optimizer.LossScaleOptimizer(inner, manager)
      self.assertIsInstance(opt, v1.train.Optimizer)
      self.assertIs(opt.inner_optimizer, inner)
      self.assertIs(opt.loss_scale_manager, manager)
      self.assertEqual(opt.get_name(), inner.get_name())
      opt.minimize(loss)
      w = [v for v in v1.trainable_variables() if v.op.name == "dense/w"][0]
      self.assertEqual(sorted(opt.get_slot_names()), ["m", "v"])
      self.assertIs(opt.get_slot(w, "m"), inner.get_slot(w, "m"))
      names = {v.op.name for v in opt.variables()}
      self.assertContainsSubset(
          {"dense/w/Adam", "dense/w/Adam_1", "beta1_power", "beta2_power",
           "loss_scale", "good_steps", "bad_steps"}, names)

  def test_train_op_collection_holds_only_the_gated_op(self):
    with tf.Graph().as_default():
      opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["sgd"](),
                                            MANAGERS["contrib"]())
      train_op = opt.minimize(models.dense_loss(models.poison_input()))
      self.assertEqual(v1.get_collection(v1.GraphKeys.TRAIN_OP), [train_op])

  def test_scale_update_runs_beside_the_apply_after_the_check(self):
    with tf.Graph().as_default():
      manager = MANAGERS["contrib"]()
      opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["sgd"](), manager)
      train_op = opt.minimize(models.dense_loss(models.poison_input()))
      state_handles = {v.handle.name for v in manager.variables()}
      # Every write of the state: one per variable when the state machine
      # changes it, each made holding the state's mutex (`MutexLock`), and
      # the count of a step that only counts: a fetch-and-increment
      # (`ResourceCountUpTo`) without the mutex, tried again under it.
      assigns = [op for op in train_op.graph.get_operations()
                 if op.type in ("AssignVariableOp", "AssignAddVariableOp",
                                "ResourceCountUpTo")
                 and op.inputs[0].name in state_handles
                 and not op.name.endswith("/Assign")]  # Initializers.
      self.assertCountEqual(
          [(op.type, op.inputs[0].name) for op in assigns],
          [("AssignVariableOp", "loss_scale:0"),
           ("AssignVariableOp", "good_steps:0"),
           ("AssignVariableOp", "bad_steps:0"),
           ("ResourceCountUpTo", "good_steps:0"),
           ("ResourceCountUpTo", "good_steps:0")])
      applied = [op for op in train_op.control_inputs
                 if op.name.startswith("gate_done")]
      self.assertLen(applied, 1)
      used_scale = v1.get_collection("mp_optimizer_loss_scale")
      self.assertLen(used_scale, 1)
      locked = 0
      for assign in assigns:
        ancestors = _ancestors(assign)
        types = {op.type for op in ancestors}
        locked += "MutexLock" in types
        self.assertIn("IsFinite", types)  # The step's finite check.
        self.assertIn(used_scale[0].op, ancestors)  # The S the step used.
        self.assertNotIn(applied[0], ancestors)  # Beside the apply.
      self.assertEqual(locked, len(assigns) - 1)  # All but the first count.
      # Nothing behind the gate uses the scale variable, so no order between
      # the apply and the update is needed.
      gate_switch = [op for op in _ancestors(applied[0])
                     if op.type == "Switch" and op.name == "gate"]
      self.assertLen(gate_switch, 1)
      scale_handle = manager.get_loss_scale().handle
      users = [op for op in train_op.graph.get_operations()
               if scale_handle in list(op.inputs)]
      self.assertNotEmpty(users)
      for user in users:
        self.assertNotIn(gate_switch[0], _ancestors(user), user.name)

  def test_eager_use_says_how_to_build_a_graph(self):
    opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["sgd"](),
                                          MANAGERS["fixed"]())
    with self.assertRaisesRegex(RuntimeError, "disable_eager_execution"):
      opt.compute_gradients(lambda: tf.constant(1.0))


class DevicePlacementTest(parameterized.TestCase):

  @parameterized.named_parameters(("tf2", False), ("legacy", True))
  def test_gpu_graph_trains_with_soft_placement(self, legacy):
    with models.legacy_graph_behavior(legacy), tf.Graph().as_default() as g:
      with tf.device("/gpu:0"):
        poison_in = models.poison_input()
        loss = models.dense_loss(poison_in)
        global_step = v1.train.get_or_create_global_step()
        opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["momentum"](),
                                              MANAGERS["contrib"]())
        train_op = opt.minimize(loss, global_step=global_step)
        w = [v for v in v1.trainable_variables() if v.op.name == "dense/w"][0]
      # The gated increment is an op of this graph, colocated with the step.
      increments = [op for op in g.get_operations()
                    if op.type in ("AssignAdd", "AssignAddVariableOp")
                    and b"loc:@global_step" in op.colocation_groups()]
      self.assertLen(increments, 1)
      config = v1.ConfigProto(allow_soft_placement=True)
      with v1.Session(graph=g, config=config) as sess:
        sess.run(v1.global_variables_initializer())
        w_before = harness.snapshot(sess, [w])["dense/w"]
        sess.run(train_op)
        sess.run(train_op, {poison_in: np.inf})
        sess.run(train_op)
        self.assertEqual(sess.run(global_step), 2)
        self.assertFalse(np.array_equal(sess.run(w), w_before))
