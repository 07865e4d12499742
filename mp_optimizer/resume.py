"""`ResumeCheckHook`: one line naming what a restored session did not restore.

A run that restarts from its checkpoint directory should continue exactly:
model, optimizer slots, `global_step` and the loss-scale state as saved. A
run can instead restart the scale (a float32 checkpoint restored with
`mp_optimizer.Saver`), lose Adam's slots (a partial `var_list`, a warm
start, an object checkpoint of another structure) or restart `global_step`,
and train on without a word. The hook compares, once, each global variable
right after the session is created with the value the checkpoint holds for
it:

```
begin():                 path = newest checkpoint in checkpoint_dir
                         expected[v] = digest of path's value for v, or absent
after_create_session():  not_restored = [v for v if digest(session value of v)
                                          != expected[v]]
                         if not_restored: one warning line, grouped by kind
```

It reads the checkpoint in `begin`, before `MonitoredTrainingSession`'s
own checkpoint hook saves again at session creation.
"""

import hashlib
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf

from mp_optimizer._internal import tracking
from mp_optimizer._internal import validation

# Kinds of state, in the order the line names them.
SCALE, OPTIMIZER, GLOBAL_STEP, MODEL = (
    "loss-scale state", "optimizer slots and state", "global_step",
    "other variables")


def _digest(value: np.ndarray) -> str:
  value = np.asarray(value)
  return hashlib.sha256(
      f"{value.dtype.str}{value.shape}".encode() + value.tobytes()).hexdigest()


class ResumeCheckHook(tf.compat.v1.train.SessionRunHook):
  """Says in one line what a session did not restore from its checkpoint.

  Opt in with `hooks=[mp_optimizer.ResumeCheckHook(checkpoint_dir)]` on the
  `MonitoredTrainingSession` (or `Estimator.train`, with `model_dir`) that
  restores from `checkpoint_dir`. Right after the session is created, each
  global variable is compared with the newest checkpoint there (name-based
  or object-based). Nothing is logged when all of them came back, nor when
  the directory has no checkpoint yet (a fresh run). Otherwise one warning
  line names them, by kind: the loss-scale state (reset to the manager's
  initial values), the optimizer's slots and other state, `global_step`
  (with both values), other variables; for each, whether the checkpoint lacks
  it or holds another value (and, for the scale state, whether it is at the
  manager's initial values). Only the first session is checked (one
  `MonitoredTrainingSession` recreates after an error restores a newer
  checkpoint). `begin` reads the checkpoint's value of every global variable
  once, so it holds one copy of them in memory until the session exists.

  A line reads: `Resume check: the session did not restore from
  /runs/a/model.ckpt-120: loss-scale state [bad_steps, good_steps,
  loss_scale] (not in the checkpoint; reset to the manager's initial
  values); global_step (checkpoint 120, session 0).`

  Example:

  ```python
  with tf.compat.v1.train.MonitoredTrainingSession(
      checkpoint_dir=folder,
      hooks=[mp_optimizer.ResumeCheckHook(folder)]) as sess:
    ...
  ```

  Args:
    checkpoint_dir: The directory the session restores from.

  Attributes:
    not_restored: After session creation, `{kind: [variable names]}` of what
      was not restored (empty when everything was).
    line: The line logged, or None.

  Raises:
    TypeError: If `checkpoint_dir` is not a str.
  """

  def __init__(self, checkpoint_dir: str):
    if not isinstance(checkpoint_dir, str):
      raise TypeError("`checkpoint_dir` must be a str (a directory), got "
                      f"{validation.describe(checkpoint_dir)}.")
    self._directory = checkpoint_dir
    self._path: Optional[str] = None
    self._expected: Dict[str, Optional[str]] = {}
    self._variables: Dict[str, tf.Variable] = {}
    self._kinds: Dict[str, str] = {}
    self._saved_step: Optional[int] = None
    self.not_restored: Dict[str, List[str]] = {}
    self.line: Optional[str] = None

  def begin(self) -> None:
    self.not_restored, self.line = {}, None
    self._variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
    self._kinds = _kinds(self._variables)
    self._path = tf.train.latest_checkpoint(self._directory)
    if self._path is None:
      return
    reader = tf.train.load_checkpoint(self._path)
    keys = tracking.checkpoint_keys(reader)
    self._expected = {name: (_digest(reader.get_tensor(keys[name]))
                             if name in keys else None)
                      for name in self._variables}
    step = tf.compat.v1.train.get_global_step()
    self._saved_step = (int(reader.get_tensor(keys[step.op.name]))
                        if step is not None and step.op.name in keys else None)

  def after_create_session(self, session, coord) -> None:
    del coord  # Unused.
    if self._path is None:
      return
    # Only the first session: one recreated after an error restores a newer
    # checkpoint than the one read in `begin`.
    self._path, path = None, self._path
    missing: Dict[str, List[str]] = {}
    reasons: Dict[str, set] = {}
    for name, variable in sorted(self._variables.items()):
      expected = self._expected[name]
      if expected is not None and expected == _digest(session.run(variable)):
        continue
      kind = self._kinds[name]
      missing.setdefault(kind, []).append(name)
      reasons.setdefault(kind, set()).add(
          "not in the checkpoint" if expected is None
          else "another value than the checkpoint's")
    self.not_restored = missing
    if not missing:
      return
    if SCALE in missing and all(
        _digest(session.run(self._variables[name].initial_value)) ==
        _digest(session.run(self._variables[name]))
        for name in missing[SCALE]):
      reasons[SCALE].add("reset to the manager's initial values")
    parts = []
    for kind in (SCALE, OPTIMIZER, GLOBAL_STEP, MODEL):
      if kind not in missing:
        continue
      if kind == GLOBAL_STEP:
        step = tf.compat.v1.train.get_global_step()
        saved = ("not in the checkpoint" if self._saved_step is None
                 else f"checkpoint {self._saved_step}")
        parts.append(f"global_step ({saved}, session "
                     f"{int(session.run(step))})")
      else:
        parts.append(f"{kind} [{', '.join(missing[kind])}] "
                     f"({'; '.join(sorted(reasons[kind]))})")
    self.line = (f"Resume check: the session did not restore from "
                 f"{path}: {'; '.join(parts)}.")
    tf.compat.v1.logging.warning("%s", self.line)


def _kinds(variables: Dict[str, tf.Variable]) -> Dict[str, str]:
  """The kind of each variable, by name."""
  scale = {id(v) for v in tracking.recorded_state(tracking.SCALE_STATE)}
  optimizer = {id(v) for v in
               tracking.recorded_state(tracking.OPTIMIZER_STATE)}
  step = tf.compat.v1.train.get_global_step()
  kinds = {}
  for name, variable in variables.items():
    if id(variable) in scale:
      kinds[name] = SCALE
    elif id(variable) in optimizer:
      kinds[name] = OPTIMIZER
    elif step is not None and variable is step:
      kinds[name] = GLOBAL_STEP
    else:
      kinds[name] = MODEL
  return kinds
