"""Run a test body under TF's default (v2) or v1 control flow, then restore.

`tf.compat.v1.disable_control_flow_v2()` is a process-wide switch; this puts
back whatever was in force before, even when the body fails, so no other test
sees it.
"""

import contextlib
from typing import Iterator

import tensorflow as tf

MODES = ("v2", "v1")


@contextlib.contextmanager
def control_flow(mode: str) -> Iterator[None]:
  """Builds with `mode` ("v2": TF's default, "v1": the legacy Switch/Merge)."""
  was_v2 = tf.compat.v1.control_flow_v2_enabled()
  if mode == "v1":
    tf.compat.v1.disable_control_flow_v2()
  else:
    tf.compat.v1.enable_control_flow_v2()
  try:
    yield
  finally:
    if was_v2:
      tf.compat.v1.enable_control_flow_v2()
    else:
      tf.compat.v1.disable_control_flow_v2()
