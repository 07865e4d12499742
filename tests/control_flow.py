"""Builds graphs with v1 or v2 control flow without leaking the switch."""

import contextlib

import tensorflow as tf

v1 = tf.compat.v1


@contextlib.contextmanager
def version(number: int):
  """Builds with control flow `number` (1 or 2); restores the switch after.

  `tf.compat.v1.disable_control_flow_v2()` is process-wide: whatever it was
  before the block, it is again after it, even when the block raises.
  """
  was_v2 = v1.control_flow_v2_enabled()
  (v1.enable_control_flow_v2 if number == 2 else v1.disable_control_flow_v2)()
  try:
    yield
  finally:
    (v1.enable_control_flow_v2 if was_v2 else v1.disable_control_flow_v2)()
