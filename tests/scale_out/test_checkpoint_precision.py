"""Runs continue across a change of precision: float32 <-> loss-scaled.

A float32 run (no loss scaling) or a run with another manager is saved; a
loss-scaled graph restores it with `mp_optimizer.Saver` (a default
`tf.compat.v1.train.Saver` cannot: its one RestoreV2 fails on the first
absent key) and must find every variable of the checkpoint bit for bit, with
the scale state at the manager's initial values and one warning line. The
other way, a loss-scaled checkpoint restores into a float32 graph with a
default Saver. A contrib checkpoint with the state under another variable
scope gets a message naming the keys found.
"""

import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from tests.support import harness
from tests.scale_out import test_checkpoint as ckpt

v1 = tf.compat.v1
f32 = np.float32


def float32_run(opt):
  return opt


def amax_face(opt):
  return mp_optimizer.LossScaleOptimizer(
      opt, managers.AmaxHistoryLossScaleManager(2**12))


WRITERS = {"float32": float32_run, "contrib": ckpt.contrib_face,
           "tf2": ckpt.tf2_face, "amax": amax_face}
# The scale state each writer saves, by name.
WRITTEN_STATE = {"float32": (), "contrib": ("loss_scale", "good_steps",
                                            "bad_steps"),
                 "tf2": ("current_loss_scale", "good_steps"),
                 "amax": ("loss_scale", "amax_history", "amax_steps",
                          "extra_margin", "clean_steps")}
INITIAL = {"contrib": {"loss_scale": f32(2**10), "good_steps": np.int32(0),
                       "bad_steps": np.int32(0)},
           "tf2": {"current_loss_scale": f32(2**10),
                   "good_steps": np.int64(0)}}


def save(wrap, optimizer, folder):
  """Trains three steps and saves with a default Saver.

  A loss-scaled run overflows in its second step; a float32 run, which would
  apply it, does not.

  Returns:
    (checkpoint path, state at save time).
  """
  steps = (1.0, 1.0 if wrap is float32_run else np.inf, 1.0)
  with tf.Graph().as_default() as graph:
    poison, _, _, train_op, watched = ckpt.build(wrap, optimizer)
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      for value in steps:
        sess.run(train_op, {poison: value})
      path = v1.train.Saver().save(sess, os.path.join(folder, "model"))
      return path, harness.snapshot(sess, watched)


def restore(wrap, optimizer, path, make_saver, initialize=False):
  """Restores `path` into a fresh, finalized graph (as MonitoredTrainingSession
  and Estimator leave it), in a session nothing initialized unless asked.

  Returns:
    The state right after the restore.
  """
  with tf.Graph().as_default() as graph:
    _, _, _, _, watched = ckpt.build(wrap, optimizer)
    saver = make_saver()
    init = v1.global_variables_initializer()
    graph.finalize()
    with v1.Session(graph=graph) as sess:
      if initialize:
        sess.run(init)
      saver.restore(sess, path)
      return harness.snapshot(sess, watched)


class FromFloat32Test(parameterized.TestCase):

  @parameterized.named_parameters(
      case for case in harness.named_product(
          writer=["float32", "contrib", "tf2", "amax"],
          reader=["contrib", "tf2"], optimizer=["adam", "momentum"],
          sharded=[False, True])
      if case["writer"] != case["reader"])
  def test_restores_everything_and_starts_the_scale_state(
      self, writer, reader, optimizer, sharded):
    path, saved = save(WRITERS[writer], optimizer, self.create_tempdir())
    with self.assertLogs("tensorflow", "WARNING") as logs:
      state = restore(ckpt.FACES[reader], optimizer, path,
                      lambda: mp_optimizer.Saver(sharded=sharded))
    scale_state = INITIAL[reader]
    harness.assert_bit_identical(
        self, {k: v for k, v in saved.items() if k not in scale_state and
               k not in WRITTEN_STATE[writer]},
        {k: v for k, v in state.items() if k not in scale_state})
    harness.assert_bit_identical(
        self, scale_state, {k: state[k] for k in scale_state})
    lines = [r.getMessage() for r in logs.records
             if "holds no loss-scale state" in r.getMessage()]
    self.assertLen(lines, 1)
    self.assertIn(path, lines[0])
    self.assertIn("the scale state starts from the manager's initial values",
                  lines[0])

  def test_default_saver_fails_on_the_first_absent_key(self):
    path, _ = save(float32_run, "adam", self.create_tempdir())
    with self.assertRaisesRegex(tf.errors.NotFoundError,
                                r"Key (bad_steps|good_steps|loss_scale) not "
                                r"found in checkpoint"):
      restore(ckpt.contrib_face, "adam", path, v1.train.Saver)

  @parameterized.named_parameters(("contrib", "contrib"), ("tf2", "tf2"))
  def test_the_continued_run_saves_and_restores_its_scale_state(self, face):
    folder = self.create_tempdir()
    path, _ = save(float32_run, "adam", folder)
    with tf.Graph().as_default() as graph:
      poison, _, _, train_op, watched = ckpt.build(ckpt.FACES[face], "adam")
      saver = mp_optimizer.Saver()
      with v1.Session(graph=graph) as sess:
        saver.restore(sess, path)
        for value in (np.inf, 1.0):
          sess.run(train_op, {poison: value})
        path = saver.save(sess, os.path.join(folder, "continued"))
        saved = harness.snapshot(sess, watched)
    with self.assertNoLogs("tensorflow", "WARNING"):
      state = restore(ckpt.FACES[face], "adam", path, mp_optimizer.Saver)
    harness.assert_bit_identical(self, saved, state)
    # Counted after the reset: one finite step since the overflow.
    self.assertEqual(state["good_steps"], 1)


class ToFloat32Test(parameterized.TestCase):

  @parameterized.named_parameters(harness.named_product(
      writer=["contrib", "tf2"], optimizer=["adam", "momentum"],
      saver=["tf", "ours"]))
  def test_loss_scaled_checkpoint_restores_into_float32(self, writer,
                                                        optimizer, saver):
    path, saved = save(WRITERS[writer], optimizer, self.create_tempdir())
    make_saver = {"tf": v1.train.Saver, "ours": mp_optimizer.Saver}[saver]
    state = restore(float32_run, optimizer, path, make_saver)
    harness.assert_bit_identical(
        self, {k: v for k, v in saved.items()
               if k not in WRITTEN_STATE[writer]},
        state)


def _scoped_contrib(opt):
  with v1.variable_scope("optimizers"):
    return ckpt.contrib_face(opt)


class OtherScopeTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("scoped_checkpoint", _scoped_contrib, ckpt.contrib_face,
       "`bad_steps` as `optimizers/bad_steps`",
       r'inside `tf.compat.v1.variable_scope\("optimizers"\)`'),
      ("scoped_graph", ckpt.contrib_face, _scoped_contrib,
       "`optimizers/bad_steps` as `bad_steps`", "outside any variable scope"))
  def test_names_the_keys_found_and_the_fix(self, writer, reader, found, fix):
    path, _ = save(writer, "momentum", self.create_tempdir())
    with self.assertRaisesRegex(tf.errors.NotFoundError, found) as raised:
      restore(reader, "momentum", path, mp_optimizer.Saver)
    self.assertRegex(str(raised.exception), fix)
    self.assertIn("var_list", str(raised.exception))

  def test_the_var_list_fix_restores_the_scoped_state(self):
    path, saved = save(_scoped_contrib, "momentum", self.create_tempdir())

    def mapped_saver():
      return mp_optimizer.Saver(var_list={
          ("optimizers/" + v.op.name if v.op.name in INITIAL["contrib"]
           else v.op.name): v for v in v1.global_variables()})

    state = restore(ckpt.contrib_face, "momentum", path, mapped_saver)
    harness.assert_bit_identical(
        self, saved, {("optimizers/" + k if k in INITIAL["contrib"] else k): v
                      for k, v in state.items()})
    self.assertEqual(state["bad_steps"], 1)


class VarListTest(parameterized.TestCase):

  def test_a_list_without_the_scale_state_restores_as_tfs_saver(self):
    path, saved = save(float32_run, "adam", self.create_tempdir())
    with self.assertNoLogs("tensorflow", "WARNING"):
      state = restore(
          ckpt.contrib_face, "adam", path, lambda: mp_optimizer.Saver(
              [v for v in v1.global_variables()
               if v.op.name not in INITIAL["contrib"]]), initialize=True)
    harness.assert_bit_identical(
        self, saved, {k: v for k, v in state.items()
                      if k not in INITIAL["contrib"]})

  def test_a_list_with_the_scale_state_tolerates_its_absence(self):
    path, saved = save(float32_run, "adam", self.create_tempdir())
    with self.assertLogs("tensorflow", "WARNING"):
      state = restore(ckpt.contrib_face, "adam", path,
                      lambda: mp_optimizer.Saver(v1.global_variables()))
    harness.assert_bit_identical(
        self, INITIAL["contrib"], {k: state[k] for k in INITIAL["contrib"]})


def _object_checkpoint(opt, global_step):
  model = {v.op.name.replace("/", "_"): v for v in v1.trainable_variables()}
  return v1.train.Checkpoint(optimizer=opt, global_step=global_step, **model)


def _bare_optimizer_path(opt, global_step):
  """A float32 graph reading a loss-scaled checkpoint: the optimizer sits
  where the wrapped one was saved, under `base_optimizer`."""
  model = {v.op.name.replace("/", "_"): v for v in v1.trainable_variables()}
  return v1.train.Checkpoint(
      optimizer=v1.train.Checkpoint(base_optimizer=opt),
      global_step=global_step, **model)


def object_save(wrap, optimizer, folder):
  """As `save`, with `tf.compat.v1.train.Checkpoint`."""
  steps = (1.0, 1.0 if wrap is float32_run else np.inf, 1.0)
  with tf.Graph().as_default() as graph:
    poison, opt, global_step, train_op, watched = ckpt.build(wrap, optimizer)
    checkpoint = _object_checkpoint(opt, global_step)
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      for value in steps:
        sess.run(train_op, {poison: value})
      path = checkpoint.save(os.path.join(folder, "model"), session=sess)
      return path, harness.snapshot(sess, watched)


class ObjectCheckpointTest(parameterized.TestCase):

  @parameterized.named_parameters(harness.named_product(
      reader=["contrib", "tf2"], optimizer=["adam", "momentum"],
      when=["after_build", "before_build"]))
  def test_float32_checkpoint_restores_slots_into_the_wrapped_optimizer(
      self, reader, optimizer, when):
    path, saved = object_save(float32_run, optimizer, self.create_tempdir())
    with tf.Graph().as_default() as graph, \
        self.assertLogs("tensorflow", "WARNING") as logs:
      if when == "before_build":  # Restore on create: slots come later.
        opt = ckpt.FACES[reader](ckpt.models.OPTIMIZERS[optimizer]())
        global_step = v1.train.get_or_create_global_step()
        with v1.variable_scope("dense"):
          w = v1.get_variable("w", initializer=np.zeros((4, 2), f32))
          b = v1.get_variable("b", initializer=np.zeros(2, f32))
        status = v1.train.Checkpoint(
            optimizer=opt, global_step=global_step, dense_w=w,
            dense_b=b).restore(path)
        loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([3, 4]), w) + b))
        opt.minimize(loss, global_step=global_step)
      else:
        _, opt, global_step, _, _ = ckpt.build(ckpt.FACES[reader], optimizer)
        status = _object_checkpoint(opt, global_step).restore(path)
      watched = [v for v in v1.global_variables()
                 if v.op.name != "save_counter"]
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        status.run_restore_ops(sess)
        state = harness.snapshot(sess, watched)
    scale_state = INITIAL[reader]
    harness.assert_bit_identical(
        self, saved, {k: v for k, v in state.items() if k not in scale_state})
    harness.assert_bit_identical(
        self, scale_state, {k: state[k] for k in scale_state})
    self.assertTrue(any("holds no loss-scale state" in r.getMessage()
                        for r in logs.records))

  @parameterized.named_parameters(harness.named_product(
      writer=["contrib", "tf2"], optimizer=["adam", "momentum"]))
  def test_loss_scaled_checkpoint_restores_into_float32(self, writer,
                                                        optimizer):
    path, saved = object_save(WRITERS[writer], optimizer,
                              self.create_tempdir())
    with tf.Graph().as_default() as graph:
      _, opt, global_step, _, watched = ckpt.build(float32_run, optimizer)
      status = _bare_optimizer_path(opt, global_step).restore(path)
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        status.expect_partial().run_restore_ops(sess)
        state = harness.snapshot(sess, watched)
    harness.assert_bit_identical(
        self, {k: v for k, v in saved.items()
               if k not in WRITTEN_STATE[writer]}, state)


def _monitored_run(directory, wrap, steps, scaffold=None):
  """Trains `steps` steps with a MonitoredTrainingSession on `directory`.

  Returns:
    (global_step after the restore, state at the end).
  """
  with tf.Graph().as_default():
    _, _, global_step, train_op, watched = ckpt.build(wrap, "adam")
    with v1.train.MonitoredTrainingSession(
        checkpoint_dir=directory, save_summaries_steps=None,
        save_summaries_secs=None, log_step_count_steps=None,
        scaffold=scaffold() if scaffold else None) as sess:
      start = sess.run(global_step)
      for _ in range(steps):
        sess.run(train_op)
      return start, harness.snapshot(sess, watched)


class MonitoredSessionTest(parameterized.TestCase):

  def test_float32_checkpoint_dir_continues_loss_scaled(self):
    directory = self.create_tempdir().full_path
    _, float32_end = _monitored_run(directory, float32_run, 3)
    with self.assertLogs("tensorflow", "WARNING") as logs:
      start, end = _monitored_run(
          directory, ckpt.contrib_face, 2,
          lambda: v1.train.Scaffold(saver=mp_optimizer.Saver(sharded=True)))
    self.assertEqual((start, end["global_step"]), (3, 5))
    self.assertAlmostEqual(float(end["beta1_power"]),
                           float(float32_end["beta1_power"]) * 0.9**2,
                           places=6)
    self.assertTrue(any("holds no loss-scale state" in r.getMessage()
                        for r in logs.records))

  def test_loss_scaled_checkpoint_dir_continues_in_float32(self):
    directory = self.create_tempdir().full_path
    _, scaled_end = _monitored_run(directory, ckpt.contrib_face, 3)
    start, end = _monitored_run(directory, float32_run, 2)
    self.assertEqual((start, end["global_step"]), (3, 5))
    self.assertAlmostEqual(float(end["beta1_power"]),
                           float(scaled_end["beta1_power"]) * 0.9**2,
                           places=6)


class TensorFlowBuiltinDifferenceTest(parameterized.TestCase):
  """TF's built-in wrapper drops a float32 object checkpoint's slots."""

  def test_slots_of_a_float32_object_checkpoint(self):
    path, saved = object_save(float32_run, "adam", self.create_tempdir())
    restored_m = {}
    for name, wrap in (("tf_builtin", ckpt_compat_tf_builtin),
                       ("ours", ckpt.tf2_face)):
      with tf.Graph().as_default() as graph:
        _, opt, global_step, _, _ = ckpt.build(wrap, "adam")
        status = _object_checkpoint(opt, global_step).restore(path)
        # TF's wrapper answers get_slot with None: found by name instead.
        slot, = [v for v in v1.global_variables()
                 if v.op.name == "dense/w/Adam"]
        with v1.Session(graph=graph) as sess:
          sess.run(v1.global_variables_initializer())
          status.run_restore_ops(sess)
          restored_m[name] = sess.run(slot)
    np.testing.assert_array_equal(restored_m["ours"], saved["dense/w/Adam"])
    np.testing.assert_array_equal(restored_m["tf_builtin"], 0.0)
    self.assertTrue(np.any(saved["dense/w/Adam"] != 0.0))


def ckpt_compat_tf_builtin(opt):
  return tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
      opt, tf.compat.v1.mixed_precision.DynamicLossScale(2**10, 3))
