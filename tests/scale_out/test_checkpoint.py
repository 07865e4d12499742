"""Checkpoint round trips of our optimizer, mid-training, in both formats.

A run is saved after a few steps (with overflow injected so the counters are
not at their initial values), then continued. A fresh graph restores the
checkpoint and runs the same continuation: every variable, slot, counter and
the loss scale must match the uninterrupted run bit for bit. Formats: a plain
`tf.compat.v1.train.Saver` (name-based) and `tf.compat.v1.train.Checkpoint`
(object-based, graph mode).

The helpers here also serve `test_checkpoint_compat.py`, which restores
checkpoints written by TensorFlow's built-in optimizer.
"""

import os
import tempfile

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import harness
from tests.support import models

v1 = tf.compat.v1
tf_mp = tf.compat.v1.mixed_precision

# Saved after 4 steps, one of them an overflow: good_steps is 2 then (and
# contrib's bad_steps 1), so the first step after the restore grows the scale
# only if the counters came back.
SCHEDULE = [1.0, np.inf, 1.0, 1.0, 1.0, 1.0, np.inf, np.inf, 1.0, 1.0, 1.0,
            1.0, 1.0]
SAVE_AFTER = 4


class SaverFormat:
  """Name-based: a default `tf.compat.v1.train.Saver` over global variables."""

  def __init__(self, opt, global_step):
    del opt, global_step  # The Saver finds every global variable by name.
    self._saver = v1.train.Saver()

  def save(self, sess, prefix):
    return self._saver.save(sess, prefix)

  def restore(self, sess, path):
    self._saver.restore(sess, path)


class ObjectFormat:
  """Object-based: `tf.compat.v1.train.Checkpoint` in graph mode.

  The optimizer is tracked as `optimizer` and each model variable under its
  name, so slots are keyed by the optimizer's path to the slot's owner.
  """

  def __init__(self, opt, global_step):
    model = {v.op.name.replace("/", "_"): v for v in v1.trainable_variables()}
    self._checkpoint = v1.train.Checkpoint(optimizer=opt,
                                           global_step=global_step, **model)

  def save(self, sess, prefix):
    return self._checkpoint.save(prefix, session=sess)

  def restore(self, sess, path):
    status = self._checkpoint.restore(path)
    status.assert_consumed()  # Every saved value has a home, and vice versa.
    status.run_restore_ops(sess)


FORMATS = {"saver": SaverFormat, "object": ObjectFormat}


def build(wrap, optimizer):
  """Builds the fp16 model and its train op in the current graph.

  Returns:
    (poison placeholder, wrapped optimizer, global step, train op, the global
    variables that exist now).
  """
  poison = models.poison_input()
  loss = models.dense_loss(poison)
  opt = wrap(models.OPTIMIZERS[optimizer]())
  global_step = v1.train.get_or_create_global_step()
  train_op = opt.minimize(loss, global_step=global_step)
  return poison, opt, global_step, train_op, v1.global_variables()


def train_and_save(wrap, optimizer, fmt, schedule=SCHEDULE,
                   save_after=SAVE_AFTER):
  """Trains `schedule`, saving after `save_after` steps.

  Returns:
    (checkpoint path, state at save time, states after each later step).
  """
  prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
  with tf.Graph().as_default() as graph:
    poison, opt, global_step, train_op, watched = build(wrap, optimizer)
    checkpoint = FORMATS[fmt](opt, global_step)
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      for value in schedule[:save_after]:
        sess.run(train_op, {poison: value})
      path = checkpoint.save(sess, prefix)
      saved = harness.snapshot(sess, watched)
      later = []
      for value in schedule[save_after:]:
        sess.run(train_op, {poison: value})
        later.append(harness.snapshot(sess, watched))
      return path, saved, later


def restore_and_train(wrap, optimizer, fmt, path, schedule=SCHEDULE,
                      save_after=SAVE_AFTER):
  """Restores `path` into a fresh graph and runs the rest of `schedule`.

  Returns:
    (state right after the restore, states after each step).
  """
  with tf.Graph().as_default() as graph:
    poison, opt, global_step, train_op, watched = build(wrap, optimizer)
    checkpoint = FORMATS[fmt](opt, global_step)
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      checkpoint.restore(sess, path)
      restored = harness.snapshot(sess, watched)
      later = []
      for value in schedule[save_after:]:
        sess.run(train_op, {poison: value})
        later.append(harness.snapshot(sess, watched))
      return restored, later


def contrib_face(opt):
  return mp_optimizer.LossScaleOptimizer(
      opt, managers.ExponentialUpdateLossScaleManager(
          2**10, 3, decr_every_n_nan_or_inf=2, decr_ratio=0.5))


def tf2_face(opt):
  return mp_optimizer.MixedPrecisionLossScaleOptimizer(
      opt, managers.DynamicLossScale(2**10, 3))


FACES = {"contrib": contrib_face, "tf2": tf2_face}
FACE_STATE = {
    "contrib": {"loss_scale": tf.float32, "good_steps": tf.int32,
                "bad_steps": tf.int32},
    "tf2": {"current_loss_scale": tf.float32, "good_steps": tf.int64},
}


class RoundTripTest(parameterized.TestCase):

  @parameterized.named_parameters(harness.named_product(face=sorted(FACES), fmt=sorted(FORMATS),
                         optimizer=["momentum", "adam"]))
  def test_restored_run_continues_bit_for_bit(self, face, fmt, optimizer):
    path, saved, uninterrupted = train_and_save(FACES[face], optimizer, fmt)
    restored, resumed = restore_and_train(FACES[face], optimizer, fmt, path)
    harness.assert_bit_identical(self, saved, restored)
    self.assertLen(resumed, len(SCHEDULE) - SAVE_AFTER)
    for want, got in zip(uninterrupted, resumed):
      harness.assert_bit_identical(self, want, got)
    # The saved counters were mid-run, so restoring them mattered.
    self.assertEqual(saved["good_steps"], 2)
    self.assertLess(saved["global_step"], SAVE_AFTER)

  def test_contrib_bad_steps_survive_the_round_trip(self):
    path, saved, _ = train_and_save(contrib_face, "sgd", "saver",
                                    schedule=[np.inf, 1.0], save_after=2)
    restored, _ = restore_and_train(contrib_face, "sgd", "saver", path,
                                    schedule=[], save_after=0)
    self.assertEqual((restored["bad_steps"], restored["good_steps"]), (1, 1))
    harness.assert_bit_identical(self, saved, restored)


class SaverKeysTest(parameterized.TestCase):

  @parameterized.named_parameters((face, face) for face in sorted(FACES))
  def test_scale_state_names_and_dtypes(self, face):
    path, _, _ = train_and_save(FACES[face], "sgd", "saver", schedule=[1.0],
                                save_after=1)
    dtypes = tf.train.load_checkpoint(path).get_variable_to_dtype_map()
    self.assertEqual({k: v for k, v in dtypes.items()
                      if k in FACE_STATE[face]}, FACE_STATE[face])
    self.assertEqual(set(dtypes) - set(FACE_STATE[face]),
                     {"dense/w", "dense/b", "global_step"})


class ObjectKeysTest(parameterized.TestCase):

  @parameterized.named_parameters((face, face) for face in sorted(FACES))
  def test_tf_builtin_object_paths(self, face):
    path, _, _ = train_and_save(FACES[face], "adam", "object", schedule=[1.0],
                                save_after=1)
    keys = {name for name, _ in tf.train.list_variables(path)}
    suffix = "/.ATTRIBUTES/VARIABLE_VALUE"
    self.assertContainsSubset(
        {f"optimizer/loss_scale/{name}{suffix}" for name in FACE_STATE[face]} |
        {f"optimizer/base_optimizer/beta1_power{suffix}",
         f"dense_w/.OPTIMIZER_SLOT/optimizer/base_optimizer/m{suffix}",
         f"dense_b/.OPTIMIZER_SLOT/optimizer/base_optimizer/v{suffix}"},
        keys)

  def test_restore_requested_before_the_graph_is_built(self):
    path, saved, _ = train_and_save(tf2_face, "adam", "object")
    with tf.Graph().as_default() as graph:
      opt = tf2_face(models.OPTIMIZERS["adam"]())
      global_step = v1.train.get_or_create_global_step()
      # The slots do not exist yet; restoring them is deferred until the
      # train op creates them. The scale state was made with the optimizer
      # (graph mode), as TF's own makes it, and is restored at once.
      with v1.variable_scope("dense"):
        w = v1.get_variable("w", initializer=np.zeros((4, 2), np.float32))
        b = v1.get_variable("b", initializer=np.zeros(2, np.float32))
      checkpoint = v1.train.Checkpoint(optimizer=opt, global_step=global_step,
                                       dense_w=w, dense_b=b)
      status = checkpoint.restore(path)
      self.assertCountEqual([v.op.name for v in opt.variables()],
                            ["current_loss_scale", "good_steps"])
      loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([3, 4]), w) + b))
      opt.minimize(loss, global_step=global_step)
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        status.assert_consumed().run_restore_ops(sess)
        restored = harness.snapshot(sess, [
            v for v in v1.global_variables() if v.op.name != "save_counter"])
    harness.assert_bit_identical(self, saved, restored)
