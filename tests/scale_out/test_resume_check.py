"""`ResumeCheckHook`: silent on real resumes, names what a restore left out.

A `MonitoredTrainingSession` run (Adam, dynamic loss scale, overflows on a
fixed schedule, a checkpoint every 2 steps) is stopped without its final
save (an exception leaves the session: no `end` hooks run, as after a kill)
and started again from its directory, 20 times at 20 different steps. Every
restart must restore everything, and the hook must say nothing. Then a
checkpoint is rewritten without the scale state, Adam's slots or
`global_step`, and the hook must name exactly those.
"""

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from tests.support import models

v1 = tf.compat.v1
SAVE_EVERY = 2
# Steps run before each stop: 20 stops, each at a different global step.
SEGMENTS = [3, 4, 5, 3, 6, 4, 3, 5, 7, 3, 4, 6, 3, 5, 4, 3, 6, 3, 4, 5]
ADAM_SLOTS = ["dense/b/Adam", "dense/b/Adam_1", "dense/w/Adam",
              "dense/w/Adam_1"]
SCALE_STATE = ["bad_steps", "good_steps", "loss_scale"]


class _Stop(Exception):
  """Leaves a session as a kill would: no `end` hooks, no final save."""


def _poison(run: int) -> float:
  """Every fifth run of the whole test overflows (and is skipped)."""
  return np.inf if run % 5 == 3 else 1.0


def _build():
  poison = models.poison_input()
  opt = mp_optimizer.LossScaleOptimizer(
      models.OPTIMIZERS["adam"](),
      managers.ExponentialUpdateLossScaleManager(2**10, 6, decr_ratio=0.5))
  global_step = v1.train.get_or_create_global_step()
  return poison, global_step, opt.minimize(models.dense_loss(poison),
                                           global_step=global_step)


def run_until_stopped(directory: str, steps: int, scaffold_fn=None,
                      runs=None):
  """Trains `steps` steps in a new graph, then stops without a final save.

  Args:
    directory: The checkpoint directory.
    steps: How many train ops to run.
    scaffold_fn: Makes the session's Scaffold in the graph, or None.
    runs: A one-element list counting the train ops run so far (it picks
      the overflowing ones); a fresh count when None.

  Returns:
    (the hook, global_step right after the session was created, global_step
    at the stop).
  """
  runs = [0] if runs is None else runs
  with tf.Graph().as_default():
    poison, global_step, train_op = _build()
    hook = mp_optimizer.ResumeCheckHook(directory)
    scaffold = scaffold_fn() if scaffold_fn else None
    try:
      with v1.train.MonitoredTrainingSession(
          checkpoint_dir=directory, save_checkpoint_steps=SAVE_EVERY,
          save_summaries_steps=None, save_summaries_secs=None,
          log_step_count_steps=None, scaffold=scaffold,
          hooks=[hook]) as sess:
        start = sess.run(global_step)
        for _ in range(steps):
          sess.run(train_op, {poison: _poison(runs[0])})
          runs[0] += 1
        stop = sess.run(global_step)
        raise _Stop()
    except _Stop:
      pass
    return hook, start, stop


def rewrite_without(path: str, dropped) -> None:
  """Saves `path` again, at the same prefix, without the `dropped` keys."""
  reader = tf.train.load_checkpoint(path)
  with tf.Graph().as_default():
    kept = [v1.Variable(reader.get_tensor(key), name=key)
            for key in sorted(reader.get_variable_to_shape_map())
            if key not in dropped]
    with v1.Session() as sess:
      sess.run(v1.global_variables_initializer())
      v1.train.Saver(kept).save(sess, path)


def _saver_without(dropped):
  """A Scaffold whose Saver leaves `dropped` out and initializes it after."""
  left_out = [v for v in v1.global_variables() if v.op.name in dropped]
  return v1.train.Scaffold(
      saver=v1.train.Saver(
          [v for v in v1.global_variables() if v.op.name not in dropped],
          sharded=True),
      # The left-out variables are initialized after the restore instead.
      ready_for_local_init_op=tf.constant([], tf.string),
      local_init_op=tf.group(v1.local_variables_initializer(),
                             *[v.initializer for v in left_out]))


@pytest.mark.long_run
class ResumeCheckTest(parameterized.TestCase):

  def test_twenty_stops_and_restarts_give_no_line(self):
    directory = self.create_tempdir().full_path
    lines, starts, stops, saved_steps, runs = [], [], [], [], [0]
    for steps in SEGMENTS:
      latest = tf.train.latest_checkpoint(directory)
      saved_steps.append(0 if latest is None else int(
          tf.train.load_checkpoint(latest).get_tensor("global_step")))
      hook, start, stop = run_until_stopped(directory, steps, runs=runs)
      starts.append(start)
      stops.append(stop)
      lines += [hook.line] if hook.line else []
      self.assertEqual(hook.not_restored, {})
    self.assertEqual(lines, [])
    # Each restart continued from the newest checkpoint; 20 different stops.
    self.assertEqual(starts, saved_steps)
    self.assertLen(set(stops), len(SEGMENTS))
    # Some stops fell between two checkpoints: the restart went back.
    self.assertTrue(any(start < stop for start, stop in zip(starts[1:],
                                                            stops)))

  @parameterized.named_parameters(
      ("scale_state", SCALE_STATE, "loss-scale state"),
      ("adam_slots", ADAM_SLOTS, "optimizer slots and state"),
      ("global_step", ["global_step"], "global_step"))
  def test_names_what_the_checkpoint_lost(self, dropped, kind):
    directory = self.create_tempdir().full_path
    run_until_stopped(directory, 7)
    path = tf.train.latest_checkpoint(directory)
    rewrite_without(path, set(dropped))
    if kind == "loss-scale state":  # The tolerant Saver resets the state.
      scaffold_fn = lambda: v1.train.Scaffold(
          saver=mp_optimizer.Saver(sharded=True))
    else:
      scaffold_fn = lambda: _saver_without(set(dropped))
    with self.assertLogs("tensorflow", "WARNING") as logs:
      hook, _, _ = run_until_stopped(directory, 1, scaffold_fn)
    self.assertEqual(hook.not_restored, {kind: sorted(dropped)})
    self.assertIn(hook.line, [record.getMessage() for record in logs.records])
    self.assertIn(f"{kind} ", hook.line)
    self.assertIn(path, hook.line)
    self.assertEqual(kind == "loss-scale state",
                     "reset to the manager's initial values" in hook.line)

  def test_names_both_global_steps(self):
    directory = self.create_tempdir().full_path
    run_until_stopped(directory, 7)
    saved = tf.train.load_checkpoint(
        tf.train.latest_checkpoint(directory)).get_tensor("global_step")
    hook, start, _ = run_until_stopped(
        directory, 1, lambda: _saver_without({"global_step"}))
    self.assertEqual((start, saved), (0, 6))
    self.assertEqual(hook.not_restored,
                     {"global_step": ["global_step"]})
    self.assertIn("global_step (checkpoint 6, session 0).", hook.line)

  def test_fresh_directory_says_nothing(self):
    hook, start, _ = run_until_stopped(self.create_tempdir().full_path, 2)
    self.assertEqual((hook.line, hook.not_restored, start), (None, {}, 0))

  def test_checkpoint_dir_must_be_a_str(self):
    with self.assertRaisesRegex(TypeError, r"`checkpoint_dir` must be a str"):
      mp_optimizer.ResumeCheckHook(3)


class ObjectCheckpointResumeTest(parameterized.TestCase):
  """The hook reads object-based checkpoints through their object graph."""

  def _restore_with_hook(self, folder, writer_scaled, recreate=False):
    """Saves with tf.train.Checkpoint, restores into a loss-scaled graph."""
    for scaled, restoring in ((writer_scaled, False), (True, True)):
      with tf.Graph().as_default() as graph:
        poison = models.poison_input()
        opt = models.OPTIMIZERS["adam"]()
        if scaled:
          opt = mp_optimizer.LossScaleOptimizer(
              opt, managers.ExponentialUpdateLossScaleManager(2**10, 6))
        global_step = v1.train.get_or_create_global_step()
        train_op = opt.minimize(models.dense_loss(poison),
                                global_step=global_step)
        model = {v.op.name.replace("/", "_"): v
                 for v in v1.trainable_variables()}
        checkpoint = v1.train.Checkpoint(optimizer=opt,
                                         global_step=global_step, **model)
        hook = mp_optimizer.ResumeCheckHook(folder)
        hook.begin()
        with v1.Session(graph=graph) as sess:
          sess.run(v1.global_variables_initializer())
          if restoring:
            status = checkpoint.restore(tf.train.latest_checkpoint(folder))
            status.run_restore_ops(sess)
            hook.after_create_session(sess, None)
            if recreate:  # A second session, restored from nothing.
              with v1.Session(graph=graph) as second:
                second.run(v1.global_variables_initializer())
                hook.after_create_session(second, None)
            return hook
          for _ in range(3):
            sess.run(train_op)
          checkpoint.save(f"{folder}/model", session=sess)

  def test_a_full_restore_gives_no_line(self):
    hook = self._restore_with_hook(self.create_tempdir().full_path, True)
    self.assertEqual((hook.line, hook.not_restored), (None, {}))

  def test_only_the_first_session_is_checked(self):
    hook = self._restore_with_hook(self.create_tempdir().full_path, True,
                                   recreate=True)
    self.assertEqual((hook.line, hook.not_restored), (None, {}))

  def test_a_float32_checkpoint_names_the_scale_state(self):
    hook = self._restore_with_hook(self.create_tempdir().full_path, False)
    # The checkpoint's own save counter is not in this graph's variables.
    self.assertEqual(hook.not_restored, {"loss-scale state": SCALE_STATE})
