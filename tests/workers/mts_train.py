"""Trains under MonitoredTrainingSession with checkpoint and summary hooks.

    mts_train.py DIR MANAGER train    # trains until killed (or MAX_RUNS)
    mts_train.py DIR MANAGER resume   # restores from DIR, trains RESUME_STEPS

`train` checkpoints every CHECKPOINT_STEPS steps into DIR. Just before each
save, a `CheckpointSaverListener` writes every global variable, as the session
holds it, to DIR/records/<global_step>.npz (atomically): the test compares a
restored checkpoint with that record bit for bit.

`resume` writes DIR/out/restored.npz (state right after the session restored
it, before any step) and DIR/out/final.npz (after RESUME_STEPS applied steps).

Every run whose index i has i % 6 in (2, 3) is poisoned with Inf, so the
scale and its counters move in both directions.
"""

import os
import sys

import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import models

v1 = tf.compat.v1
CHECKPOINT_STEPS = 3
RESUME_STEPS = 6
MAX_RUNS = 20000  # A bound in case nobody kills this process.
MANAGERS = {
    "contrib": lambda: managers.ExponentialUpdateLossScaleManager(
        2**10, 3, decr_every_n_nan_or_inf=2, decr_ratio=0.5),
    "tf2": lambda: managers.DynamicLossScale(2**10, 3),
}


class StateWriter:
  """Writes every global variable, as a session holds it, to an npz file.

  The file is written under another name and renamed into place, so a reader
  (or a process killed midway) never leaves half a file behind.
  """

  def __init__(self, directory: str):
    self._directory = directory

  def begin(self):
    self._variables = v1.global_variables()

  def write(self, session, file_name: str) -> None:
    values = dict(zip([v.op.name.replace("/", "__") for v in self._variables],
                      session.run(self._variables)))
    os.makedirs(self._directory, exist_ok=True)
    path = os.path.join(self._directory, file_name)
    np.savez(path + ".partial.npz", **values)
    os.replace(path + ".partial.npz", path)


class RecordBeforeSave(StateWriter, v1.train.CheckpointSaverListener):
  """Writes the state about to be checkpointed to <step>.npz."""

  def before_save(self, session, global_step_value):
    self.write(session, f"{global_step_value}.npz")


class RecordResume(StateWriter, v1.train.SessionRunHook):
  """Writes the state the session starts from (restored) and ends with."""

  def after_create_session(self, session, coord):
    self.write(session, "restored.npz")

  def end(self, session):
    self.write(session, "final.npz")


def main(directory: str, manager_name: str, mode: str) -> None:
  with tf.Graph().as_default():
    poison = models.poison_input()
    loss = models.dense_loss(poison)
    opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["adam"](),
                                          MANAGERS[manager_name]())
    global_step = v1.train.get_or_create_global_step()
    train_op = opt.minimize(loss, global_step=global_step)
    v1.summary.scalar("scale", opt.get_loss_scale())
    hooks = [v1.train.CheckpointSaverHook(
        directory, save_steps=CHECKPOINT_STEPS,
        listeners=[RecordBeforeSave(os.path.join(directory, "records"))])]
    stop = (v1.train.StopAtStepHook(num_steps=RESUME_STEPS) if mode == "resume"
            else v1.train.StopAtStepHook(last_step=MAX_RUNS))
    if mode == "resume":
      hooks.append(RecordResume(os.path.join(directory, "out")))
    with v1.train.MonitoredTrainingSession(
        checkpoint_dir=directory, chief_only_hooks=hooks, hooks=[stop],
        save_checkpoint_secs=None, save_checkpoint_steps=None,
        save_summaries_steps=CHECKPOINT_STEPS, log_step_count_steps=None,
        config=v1.ConfigProto(inter_op_parallelism_threads=1,
                              intra_op_parallelism_threads=1)) as sess:
      run = 0
      while not sess.should_stop() and run < MAX_RUNS:
        sess.run(train_op, {poison: np.inf if run % 6 in (2, 3) else 1.0})
        run += 1


if __name__ == "__main__":
  main(*sys.argv[1:])
