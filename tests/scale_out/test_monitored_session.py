"""MonitoredTrainingSession: SIGKILL mid-training, restart, resume exactly.

A worker process (tests/workers/mts_train.py) trains with checkpoint and
summary hooks, overflowing on a fixed schedule, and records every state it is
about to checkpoint. The test kills it with SIGKILL once several checkpoints
exist, wherever it is (often in the middle of a save), then starts it again
on the same directory. The restarted session must start from exactly the
state of the latest complete checkpoint: variables, Adam slots, global_step,
the loss scale and its counters, bit for bit.
"""

import glob
import os
import signal

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

from tests.workers import launch
from tests.workers import mts_train

CHECKPOINTS_BEFORE_KILL = 4
TIMEOUT_SECONDS = 180  # Per worker; they need a few seconds each.
SCALE_NAMES = {"contrib": "loss_scale", "tf2": "current_loss_scale"}
COUNTER_NAMES = {"contrib": ("good_steps", "bad_steps"), "tf2": ("good_steps",)}


def _load(path: str) -> dict:
  with np.load(path) as data:
    return {name: data[name] for name in data.files}


def _records(directory: str) -> list:
  return glob.glob(os.path.join(directory, "records", "*[0-9].npz"))


def _events(directory: str) -> set:
  return set(glob.glob(os.path.join(directory, "events.out.tfevents.*")))


def _scalars(events_path: str, tag: str) -> list:
  return [(event.step, value.simple_value)
          for event in tf.compat.v1.train.summary_iterator(events_path)
          for value in event.summary.value if value.tag == tag]


@pytest.mark.long_run
class CrashAndResumeTest(parameterized.TestCase):

  def assert_same_bits(self, expected: dict, got: dict) -> None:
    self.assertEqual(sorted(expected), sorted(got))
    for name in expected:
      self.assertEqual(expected[name].dtype, got[name].dtype, name)
      self.assertEqual(expected[name].tobytes(), got[name].tobytes(), name)

  def kill_while_training(self, directory: str, manager: str, logs: str):
    trainer = launch.Worker("mts_train.py", [directory, manager, "train"],
                            logs)
    try:
      reached = launch.wait_for(
          lambda: len(_records(directory)) > CHECKPOINTS_BEFORE_KILL,
          [trainer], TIMEOUT_SECONDS)
    finally:
      trainer.kill()
    self.assertTrue(reached, trainer.log()[-4000:])
    self.assertEqual(trainer.process.returncode, -signal.SIGKILL)

  def resume(self, directory: str, manager: str, logs: str) -> dict:
    finished = launch.wait_all(
        [launch.Worker("mts_train.py", [directory, manager, "resume"], logs)],
        TIMEOUT_SECONDS)
    self.assertEqual(finished[0].returncode, 0, launch.describe(finished))
    return {when: _load(os.path.join(directory, "out", f"{when}.npz"))
            for when in ("restored", "final")}

  @parameterized.named_parameters(("contrib", "contrib"), ("tf2", "tf2"))
  def test_sigkill_then_restart_resumes_the_last_checkpoint(self, manager):
    directory = launch.scratch_dir(self.addCleanup)
    logs = launch.scratch_dir(self.addCleanup)
    self.kill_while_training(directory, manager, logs)
    latest = tf.train.latest_checkpoint(directory)
    self.assertIsNotNone(latest)
    reader = tf.train.load_checkpoint(latest)
    step = int(reader.get_tensor("global_step"))
    record = _load(os.path.join(directory, "records", f"{step}.npz"))
    recorded_steps = sorted(int(os.path.basename(path)[:-len(".npz")])
                            for path in _records(directory))
    scales_recorded = [
        float(_load(os.path.join(directory, "records", f"{recorded}.npz"))[
            SCALE_NAMES[manager]]) for recorded in recorded_steps]
    events_before = _events(directory)

    states = self.resume(directory, manager, logs)

    # The restarted session holds what the last complete checkpoint saved.
    self.assert_same_bits(record, states["restored"])
    # The checkpoint file reads back the same bits, every variable of it.
    self.assert_same_bits(
        record, {name: reader.get_tensor(name.replace("__", "/"))
                 for name in record})
    # A record is written just before its save; the kill may interrupt the
    # last save, never an earlier one.
    self.assertIn(step, recorded_steps[-2:])
    self.assertGreaterEqual(
        step, (CHECKPOINTS_BEFORE_KILL - 1) * mts_train.CHECKPOINT_STEPS)
    scale_state = [SCALE_NAMES[manager], *COUNTER_NAMES[manager]]
    self.assertContainsSubset(scale_state, record)
    # The overflow schedule moved the scale between checkpoints.
    self.assertGreater(len(set(scales_recorded)), 1, scales_recorded)
    # Training goes on from there: RESUME_STEPS applied steps, all finite.
    final = states["final"]
    self.assertEqual(int(final["global_step"]),
                     step + mts_train.RESUME_STEPS)
    for name, value in final.items():
      self.assertTrue(np.all(np.isfinite(value)), name)
    # The restarted summary hook writes the scale at the restored steps.
    new_events, = _events(directory) - events_before
    scales = _scalars(new_events, "scale")
    self.assertNotEmpty(scales)
    for summary_step, value in scales:
      self.assertBetween(summary_step, step, step + mts_train.RESUME_STEPS)
      self.assertEqual(np.log2(value), np.round(np.log2(value)))


class ExampleTest(parameterized.TestCase):

  def test_example_restarts_from_the_checkpoint(self):
    result = launch.run_example("monitored_session_example.py")
    self.assertEqual(result.returncode, 0, result.stderr[-4000:])
    session_1, session_2 = result.stdout.split("session 2")
    self.assertIn("starts at global_step 0,", session_1)
    self.assertIn("last checkpoint: global_step 150,", session_1)
    self.assertIn("starts at global_step 150,", session_2)
    self.assertIn("last checkpoint: global_step 300,", session_2)


if __name__ == "__main__":
  tf.test.main()
