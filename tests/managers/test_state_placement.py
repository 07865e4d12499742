"""Where and when manager state is made, and which graph a checkpoint saves.

Built while a graph is the default, a manager makes its state in its
constructor under the current name scope, as contrib and TF did; built with no
graph, it makes it lazily per graph at the root. Every row runs under TF's
default control flow and under v1 control flow.
"""

import os
import tempfile

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import control_flow

from tests.support import harness

v1 = tf.compat.v1
tf_mp = v1.mixed_precision
Exp = managers.ExponentialUpdateLossScaleManager
STEPS = (True, True, False, False, True)
# Exp(8, 2): +1 good; grow to 16; +1 bad; 2nd bad shrinks 16 * 0.8; +1 good.
CONTRIB_SCALES = [8.0, 16.0, 16.0, np.float32(16 * 0.8), np.float32(16 * 0.8)]
# DynamicLossScale(1, 2, 3): +1 good; grow to 3; shrink 3 / 3; +1; grow to 3.
TF2_STEPS = (True, True, False, True, True)
TF2_SCALES = [1.0, 3.0, 1.0, 1.0, 3.0]

FACES = (
    ("contrib", lambda: Exp(8, 2), STEPS, CONTRIB_SCALES,
     ["loss_scale", "good_steps", "bad_steps"], None),
    ("tf2", lambda: managers.DynamicLossScale(1.0, 2, 3.0), TF2_STEPS,
     TF2_SCALES, ["current_loss_scale", "good_steps"],
     lambda: tf_mp.DynamicLossScale(1.0, 2, 3.0)),
)


def _rows():
  for mode in control_flow.MODES:
    for name, make, steps, scales, names, make_tf in FACES:
      yield (f"{name}_{mode}", mode, make, steps, scales, names, make_tf)


def _run_initializing_first(make, steps, scope="optimizers"):
  """Builds in graph mode, runs the initializer BEFORE the update exists."""
  with tf.Graph().as_default() as graph:
    with v1.variable_scope(scope):
      manager = make()
    names = sorted(v.op.name for v in v1.global_variables())
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      flag = v1.placeholder(tf.bool, [])
      if isinstance(manager, tf_mp.LossScale):  # TF's own, run side by side.
        update = manager.update([tf.where(flag, 1.0, np.inf)])[0]
        scale = manager()
      else:
        update = manager.update_loss_scale(flag)
        scale = manager.get_loss_scale()
      scales = []
      for finite in steps:
        sess.run(update, {flag: finite})
        scales.append(sess.run(scale))
      prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
      v1.train.Saver().save(sess, prefix)
  return names, scales, prefix


class StateAtConstructionTest(parameterized.TestCase):

  @parameterized.named_parameters(*_rows())
  def test_initializer_before_update_works_and_names_carry_the_scope(
      self, mode, make, steps, scales, names, make_tf):
    with control_flow.control_flow(mode):
      got_names, got_scales, prefix = _run_initializing_first(make, steps)
      self.assertEqual(got_names, sorted(f"optimizers/{n}" for n in names))
      self.assertEqual(got_scales, scales)
      if make_tf is not None:  # TF's built-in: same names, same numbers.
        tf_names, tf_scales, _ = _run_initializing_first(make_tf, steps)
        self.assertEqual(got_names, tf_names)
        self.assertEqual(got_scales, tf_scales)
      saved = sorted(n for n, _ in tf.train.list_variables(prefix))
      self.assertEqual(saved, got_names)
      # A manager built in the same scope of a new graph restores them.
      with tf.Graph().as_default() as graph:
        with v1.variable_scope("optimizers"):
          manager = make()
        with v1.Session(graph=graph) as sess:
          v1.train.Saver().restore(sess, prefix)
          self.assertEqual(sess.run(manager.get_loss_scale()), scales[-1])

  @parameterized.named_parameters(*_rows())
  def test_built_without_a_graph_state_is_lazy_at_the_root(
      self, mode, make, steps, scales, names, make_tf):
    del make_tf  # TF's built-in cannot be used in a graph it was not built in.
    manager = make()  # Eager: no graph to make state in.
    with control_flow.control_flow(mode):
      for _ in range(2):  # Each graph gets its own state.
        with tf.Graph().as_default() as graph:
          self.assertEmpty(v1.global_variables())
          with v1.variable_scope("optimizers"):
            flag = v1.placeholder(tf.bool, [])
            update = manager.update_loss_scale(flag)
            scale = manager.get_loss_scale()
          self.assertCountEqual([v.op.name for v in v1.global_variables()],
                                names)
          with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            got = []
            for finite in steps:
              sess.run(update, {flag: finite})
              got.append(sess.run(scale))
          self.assertEqual(got, scales)


def _contrib(opt):
  return mp_optimizer.LossScaleOptimizer(opt, Exp(4, 1))


def _tf2(opt):
  return mp_optimizer.MixedPrecisionLossScaleOptimizer(
      opt, managers.DynamicLossScale(4, 1))


def _accumulating(opt):
  return mp_optimizer.LossScaleOptimizer(opt, Exp(4, 1),
                                         gradient_accumulation_steps=2)


def _train_graph(opt):
  """w * x summed; feeding inf to `x` makes the step overflow."""
  x = v1.placeholder(tf.float32, [2], name="x")
  w = v1.get_variable("w", initializer=np.ones(2, np.float32))
  step = v1.train.get_or_create_global_step()
  train = opt.minimize(tf.reduce_sum(w * x), global_step=step)
  return x, w, step, train


class OneOptimizerTwoGraphsTest(parameterized.TestCase):

  @parameterized.named_parameters(harness.named_product(mode=control_flow.MODES,
                         wrap=(_contrib, _tf2, _accumulating),
                         built_in_graph_a=(True, False)))
  def test_object_checkpoint_saves_the_graph_it_is_saved_in(
      self, mode, wrap, built_in_graph_a):
    with control_flow.control_flow(mode):
      graph_a = tf.Graph()
      if built_in_graph_a:
        with graph_a.as_default():
          opt = wrap(v1.train.GradientDescentOptimizer(0.5))
      else:
        opt = wrap(v1.train.GradientDescentOptimizer(0.5))
      with graph_a.as_default():
        a_x, a_w, a_step, a_train = _train_graph(opt)
      with tf.Graph().as_default() as graph_b:  # Used in B, state differs.
        b_x, _, _, b_train = _train_graph(opt)
        with v1.Session(graph=graph_b) as sess:
          sess.run(v1.global_variables_initializer())
          sess.run(b_train, {b_x: [np.inf, 1.0]})
      with graph_a.as_default():
        checkpoint = tf.train.Checkpoint(optimizer=opt, w=a_w, step=a_step)
        with v1.Session(graph=graph_a) as sess:
          sess.run(v1.global_variables_initializer())
          for _ in range(3):
            sess.run(a_train, {a_x: [1.0, 2.0]})
          opt_state = {v.op.name: v for v in opt.variables()}
          saved = sess.run(opt_state)
          # TF2's Checkpoint, saving with the default session (sess).
          path = checkpoint.save(os.path.join(tempfile.mkdtemp(), "ckpt"))
      with tf.Graph().as_default() as graph_c:
        fresh = wrap(v1.train.GradientDescentOptimizer(0.5))
        _, c_w, c_step, _ = _train_graph(fresh)
        status = tf.train.Checkpoint(optimizer=fresh, w=c_w,
                                     step=c_step).restore(path)
        with v1.Session(graph=graph_c) as sess:
          sess.run(v1.global_variables_initializer())
          status.run_restore_ops(sess)
          restored = sess.run({v.op.name: v for v in fresh.variables()})
    self.assertEqual(sorted(restored), sorted(saved))
    for name, value in saved.items():
      np.testing.assert_array_equal(restored[name], value, err_msg=name)
    # Graph A's scale: 4 grown on each of its three finite steps (B shrank).
    scale_name = [n for n in saved if n.endswith("loss_scale")][0]
    self.assertEqual(saved[scale_name], 32.0)
