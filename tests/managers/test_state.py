"""Manager state: made at construction in graph mode, else lazily; once per
graph, contrib's names, usable across graphs."""

from absl.testing import parameterized
import tensorflow as tf

from mp_optimizer import managers

# Built at import time, before any graph exists (TF #37666 was this case).
MODULE_LEVEL_MANAGER = managers.ExponentialUpdateLossScaleManager(8, 2)


def _state(manager):
  return {v.op.name: v for v in manager.variables()}


class ManagerStateTest(parameterized.TestCase):

  def test_constructor_in_graph_mode_creates_the_state_only(self):
    with tf.Graph().as_default() as graph:
      managers.FixedLossScaleManager(8)
      self.assertEmpty(graph.get_operations())  # Stateless: nothing at all.
      managers.ExponentialUpdateLossScaleManager(8, 2)
      managers.DynamicLossScale()
      self.assertCountEqual(
          [v.op.name for v in tf.compat.v1.global_variables()],
          ["loss_scale", "good_steps", "bad_steps", "current_loss_scale",
           "good_steps_1"])
      # Variables only: no read, update or other op is built yet.
      self.assertEmpty([op for op in graph.get_operations()
                        if op.type not in ("VarHandleOp", "Const",
                                           "AssignVariableOp",
                                           "VarIsInitializedOp",
                                           "ReadVariableOp")])

  def test_constructor_without_a_graph_creates_nothing(self):
    manager = managers.ExponentialUpdateLossScaleManager(8, 2)  # Eager.
    with tf.Graph().as_default() as graph:
      self.assertEmpty(graph.get_operations())
      self.assertEmpty(manager.variables())

  def test_contrib_names_dtypes_and_collections(self):
    with tf.Graph().as_default():
      with tf.compat.v1.variable_scope("model"), tf.name_scope("tower"):
        manager = managers.ExponentialUpdateLossScaleManager(8, 2)
        manager.get_loss_scale()
      state = _state(manager)
      # Made by the constructor, under the scope it was built in, as contrib.
      self.assertEqual(
          {name: v.dtype.base_dtype for name, v in state.items()},
          {"model/tower/loss_scale": tf.float32,
           "model/tower/good_steps": tf.int32,
           "model/tower/bad_steps": tf.int32})
      global_names = {v.op.name for v in tf.compat.v1.global_variables()}
      self.assertContainsSubset(set(state), global_names)
      self.assertEmpty(tf.compat.v1.trainable_variables())

  def test_tf2_face_names_and_dtypes(self):
    with tf.Graph().as_default():
      manager = managers.DynamicLossScale()
      manager()
      self.assertEqual(
          {name: v.dtype.base_dtype for name, v in _state(manager).items()},
          {"current_loss_scale": tf.float32, "good_steps": tf.int64})

  def test_created_once_per_graph(self):
    with tf.Graph().as_default():
      manager = managers.ExponentialUpdateLossScaleManager(8, 2)
      manager.get_loss_scale()
      manager.update_loss_scale(tf.constant(True))
      manager.get_loss_scale()
      self.assertLen(tf.compat.v1.global_variables(), 3)

  def test_made_outside_control_flow(self):
    with tf.Graph().as_default() as graph:
      manager = managers.ExponentialUpdateLossScaleManager(8, 2)
      flag = tf.compat.v1.placeholder(tf.bool, [])
      scale = tf.cond(flag, manager.get_loss_scale, lambda: tf.constant(0.))
      with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        self.assertEqual(sess.run(scale, {flag: True}), 8.0)

  def test_module_level_manager_in_two_graphs(self):
    scales = []
    for _ in range(2):
      with tf.Graph().as_default() as graph:
        update = MODULE_LEVEL_MANAGER.update_loss_scale(tf.constant(True))
        scale = MODULE_LEVEL_MANAGER.get_loss_scale()
        self.assertEqual(sorted(_state(MODULE_LEVEL_MANAGER)),
                         ["bad_steps", "good_steps", "loss_scale"])
        for v in MODULE_LEVEL_MANAGER.variables():
          self.assertIs(v.graph, graph)
        with tf.compat.v1.Session(graph=graph) as sess:
          sess.run(tf.compat.v1.global_variables_initializer())
          sess.run([update])
          sess.run([update])
          scales.append(sess.run(scale))
    # Each graph starts from the initial scale: no state leaks between them.
    self.assertEqual(scales, [16.0, 16.0])

  def test_fixed_manager_scale_is_a_constant_of_the_calling_graph(self):
    manager = managers.FixedLossScaleManager(128)
    for _ in range(2):
      with tf.Graph().as_default() as graph:
        scale = manager.get_loss_scale()
        self.assertIs(scale.graph, graph)
        self.assertEqual(scale.dtype, tf.float32)
        with tf.compat.v1.Session(graph=graph) as sess:
          self.assertEqual(sess.run(scale), 128.0)
    self.assertEqual(manager.variables(), [])

  @parameterized.named_parameters(
      ("exponential", lambda: managers.ExponentialUpdateLossScaleManager(8, 2)),
      ("fixed", lambda: managers.FixedLossScaleManager(8)),
      ("dynamic", managers.DynamicLossScale),
  )
  def test_eager_use_says_how_to_build_a_graph(self, make):
    manager = make()
    with self.assertRaisesRegex(RuntimeError, "disable_eager_execution"):
      manager.get_loss_scale()

  def test_update_flag_must_be_a_bool_tensor(self):
    with tf.Graph().as_default():
      manager = managers.ExponentialUpdateLossScaleManager(8, 2)
      with self.assertRaisesRegex(TypeError, "`finite_grads`.*True"):
        manager.update_loss_scale(True)
      with self.assertRaisesRegex(TypeError, "`finite_grads`.*float32"):
        manager.update_loss_scale(tf.constant(1.0))
      with self.assertRaisesRegex(ValueError, r"`finite_grads`.*\(2,\)"):
        manager.update_loss_scale(tf.constant([True, False]))
