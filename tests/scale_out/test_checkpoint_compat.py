"""Old checkpoints restore into our optimizer and training carries on.

Two kinds of old checkpoint:

* contrib's: `tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager`
  made three plain variables in its constructor, `loss_scale` (float32),
  `good_steps` (int32) and `bad_steps` (int32), next to the model's; a
  TF1 `Saver` wrote them under those names. contrib cannot be installed on
  TF 2.x, so `_write_contrib_checkpoint` makes the same variables the same way
  (v1 `Variable`, ref variables, TF1 graph behaviour) and saves them with a
  plain `Saver`: the checkpoint holds the same keys, dtypes and values.
* TF's: written by TensorFlow's own
  `tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer`, both with a
  `Saver` and with `tf.compat.v1.train.Checkpoint` (object-based).

Warm starts with `tf.compat.v1.train.init_from_checkpoint` are covered too.
"""

import os
import tempfile

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import contrib
from tests.support import harness
from tests.support import models
from tests.scale_out import test_checkpoint as ckpt

v1 = tf.compat.v1
tf_mp = tf.compat.v1.mixed_precision
f32 = np.float32

# Contrib state written to the old checkpoint.
CONTRIB_STATE = {"loss_scale": f32(512), "good_steps": np.int32(3),
                 "bad_steps": np.int32(1)}


def tf_builtin(opt):
  return tf_mp.MixedPrecisionLossScaleOptimizer(
      opt, tf_mp.DynamicLossScale(2**10, 3))


def ours_from_tf_object(opt):
  return mp_optimizer.MixedPrecisionLossScaleOptimizer(
      opt, tf_mp.DynamicLossScale(2**10, 3))


def contrib_face(opt):
  """What a contrib user's code becomes after changing one import."""
  return contrib.LossScaleOptimizer(
      opt, contrib.ExponentialUpdateLossScaleManager(2**15, 4))


def _write_contrib_checkpoint():
  """Writes model, slots, global_step and contrib's three state variables.

  Returns:
    (checkpoint path, every saved value by name).
  """
  prefix = os.path.join(tempfile.mkdtemp(), "contrib")
  with models.legacy_graph_behavior(True), tf.Graph().as_default() as graph:
    loss = models.dense_loss(models.poison_input())
    global_step = v1.train.get_or_create_global_step()
    train_op = models.OPTIMIZERS["momentum"]().minimize(
        loss, global_step=global_step)
    # As contrib's ExponentialUpdateLossScaleManager.__init__ made them.
    for name, value in CONTRIB_STATE.items():
      v1.Variable(name=name, initial_value=value, dtype=value.dtype,
                  trainable=False)
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      sess.run(train_op)
      sess.run(train_op)
      path = v1.train.Saver().save(sess, prefix)
      return path, harness.snapshot(sess, v1.global_variables())


def _restore_contrib(path, first_step, restore):
  """Builds the contrib face, restores `path` with `restore`, runs one step.

  Returns:
    (state right after the restore, state after `first_step`).
  """
  with tf.Graph().as_default() as graph:
    poison, _, _, train_op, watched = ckpt.build(contrib_face, "momentum")
    restore_op = restore(path)
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      restore_op(sess)
      restored = harness.snapshot(sess, watched)
      sess.run(train_op, {poison: first_step})
      return restored, harness.snapshot(sess, watched)


def _with_saver(path):
  saver = v1.train.Saver()
  return lambda sess: saver.restore(sess, path)


def _with_warm_start(path):
  """Maps every checkpoint name to its variable object.

  A scope mapping such as {"/": "/"} only reaches variables made with
  `get_variable`. The loss-scale state (ours, like contrib's and TF's own) and
  Adam's beta powers are made with `tf.Variable`, so they are mapped by object.
  """
  v1.train.init_from_checkpoint(
      path, {v.op.name: v for v in v1.global_variables()})
  return lambda sess: None  # The initializers already read the checkpoint.


RESTORERS = {"saver": _with_saver, "warm_start": _with_warm_start}


class ContribCheckpointTest(parameterized.TestCase):

  @parameterized.named_parameters(harness.named_product(
      restorer=sorted(RESTORERS),
      step=[
          # good_steps 3 + 1 reaches incr_every_n_steps 4: the scale grows.
          dict(first_step=1.0, scale=f32(1024), good=0, bad=0, applied=1),
          # bad_steps 1 + 1 reaches decr_every_n_nan_or_inf 2: it shrinks.
          dict(first_step=np.inf, scale=f32(512) * f32(0.8), good=0, bad=0,
               applied=0),
      ]))
  def test_restores_and_continues_from_the_saved_counters(self, restorer,
                                                          step):
    path, saved = _write_contrib_checkpoint()
    restored, after = _restore_contrib(path, step["first_step"],
                                       RESTORERS[restorer])
    self.assertEqual(sorted(restored), sorted(saved))
    harness.assert_bit_identical(self, saved, restored)
    self.assertEqual(
        (after["loss_scale"], after["good_steps"], after["bad_steps"]),
        (step["scale"], step["good"], step["bad"]))
    self.assertEqual(after["global_step"],
                     saved["global_step"] + step["applied"])

  def test_checkpoint_holds_contribs_keys(self):
    path, _ = _write_contrib_checkpoint()
    dtypes = tf.train.load_checkpoint(path).get_variable_to_dtype_map()
    self.assertEqual({k: dtypes[k] for k in CONTRIB_STATE},
                     {"loss_scale": tf.float32, "good_steps": tf.int32,
                      "bad_steps": tf.int32})


class TensorFlowCheckpointTest(parameterized.TestCase):
  """TF's built-in writes, ours continues (and the other way round)."""

  @parameterized.named_parameters(harness.named_product(
      fmt=sorted(ckpt.FORMATS), optimizer=["momentum", "adam"],
      direction=[("tf_builtin", "ours"), ("tf_builtin", "ours_from_tf_object"),
                 ("ours", "tf_builtin")]))
  def test_training_continues_bit_for_bit(self, fmt, optimizer, direction):
    wraps = {"tf_builtin": tf_builtin, "ours": ckpt.tf2_face,
             "ours_from_tf_object": ours_from_tf_object}
    writer, reader = (wraps[name] for name in direction)
    path, saved, writer_continued = ckpt.train_and_save(writer, optimizer, fmt)
    restored, reader_continued = ckpt.restore_and_train(reader, optimizer, fmt,
                                                        path)
    harness.assert_bit_identical(self, saved, restored)
    # One overflow in the first four steps: 2**10 / 2, with good_steps 2.
    self.assertEqual((restored["current_loss_scale"], restored["good_steps"]),
                     (512.0, 2))
    self.assertLen(reader_continued, len(writer_continued))
    for want, got in zip(writer_continued, reader_continued):
      harness.assert_bit_identical(self, want, got)
    # The first step after the restore grows the scale: the counter came back.
    self.assertEqual(reader_continued[0]["current_loss_scale"], 1024.0)

  def test_warm_start_from_a_tf_builtin_checkpoint(self):
    path, saved, _ = ckpt.train_and_save(tf_builtin, "adam", "saver")
    with tf.Graph().as_default() as graph:
      _, opt, _, _, watched = ckpt.build(ckpt.tf2_face, "adam")
      restore = _with_warm_start(path)
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        restore(sess)
        harness.assert_bit_identical(self, saved,
                                     harness.snapshot(sess, watched))
        self.assertEqual(sess.run(opt.loss_scale), 512.0)

  def test_scope_mapping_warm_starts_what_it_does_for_tf_builtin(self):
    path, saved, _ = ckpt.train_and_save(tf_builtin, "adam", "saver")
    missed = {}
    for name, wrap in (("tf_builtin", tf_builtin), ("ours", ckpt.tf2_face)):
      with tf.Graph().as_default() as graph:
        _, _, _, _, watched = ckpt.build(wrap, "adam")
        v1.train.init_from_checkpoint(path, {"/": "/"})
        with v1.Session(graph=graph) as sess:
          sess.run(v1.global_variables_initializer())
          state = harness.snapshot(sess, watched)
      missed[name] = sorted(k for k in saved
                            if saved[k].tobytes() != state[k].tobytes())
    self.assertEqual(missed["ours"], missed["tf_builtin"])
    self.assertEqual(missed["ours"], ["beta1_power", "beta2_power",
                                      "current_loss_scale", "good_steps"])

  def test_warm_start_of_the_model_only_keeps_the_initial_scale(self):
    path, saved, _ = ckpt.train_and_save(tf_builtin, "adam", "saver")
    with tf.Graph().as_default() as graph:
      _, opt, _, _, watched = ckpt.build(ckpt.tf2_face, "adam")
      v1.train.init_from_checkpoint(path, {"dense/": "dense/"})
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        state = harness.snapshot(sess, watched)
        self.assertEqual(sess.run(opt.loss_scale), 2.0**10)
    harness.assert_bit_identical(
        self, {k: saved[k] for k in ("dense/w", "dense/b")},
        {k: state[k] for k in ("dense/w", "dense/b")})
    self.assertEqual((state["good_steps"], state["global_step"]), (0, 0))


class AdoptedVariablesTest(parameterized.TestCase):

  def test_tf_object_converted_in_the_graph_keeps_tfs_names(self):
    with tf.Graph().as_default():
      ckpt.build(ours_from_tf_object, "sgd")
      names = sorted(v.op.name for v in v1.global_variables())
    self.assertEqual(names, ["current_loss_scale", "dense/b", "dense/w",
                             "global_step", "good_steps"])
