"""`fail_at_floor_after`: fail the step when the scale's floor cannot help.

A dynamic scale that sits at its minimum while gradients stay NaN/Inf is not
the cause of the overflow: the model is. After N such steps in a row the step
fails with a message saying where to look, instead of skipping forever.
"""

import tensorflow as tf

from mp_optimizer._internal import tensors

# The int64 counter of non-finite steps in a row at the minimum scale: in no
# collection, so not checkpointed and never reset by an initializer.
STREAK = "nonfinite_steps_at_min_scale"


def guard(streak_var: tf.Variable, scale: tf.Tensor, finite: tf.Tensor,
          min_scale: float, fail_after: int) -> tf.Operation:
  """Returns the op that counts the streak and fails the step at `fail_after`.

  A finite step, or one above the floor, just zeroes the streak. Only a
  non-finite step at the floor reads it, and the check rides on
  `tf.debugging.check_numerics` of a value that is NaN only at the limit,
  so no normal step waits on the host. Build it in the manager's locked
  update, with the scale read there before the step's own change.

  Args:
    streak_var: The `STREAK` variable.
    scale: The scale the step used (read before this step changes it).
    finite: The step's finite flag.
    min_scale: The manager's `min_loss_scale`.
    fail_after: The manager's `fail_at_floor_after`.
  """
  def count():
    streak = tensors.read_or_zero(streak_var) + 1
    verdict = tf.debugging.check_numerics(
        tf.where(streak >= fail_after, float("nan"), 0.0),
        f"The loss scale has been at its minimum ({min_scale:g}) for "
        f"{fail_after} steps in a row and the gradients are still "
        "NaN or Inf, so loss scaling cannot be the cause and every step is "
        "being skipped. Look for the non-finite value in the model itself: "
        "the inputs (NaN in the data), a too-high learning rate, "
        "log/sqrt/division of zero, or float16 overflow in the forward "
        "pass (values above 65504). (Raised because fail_at_floor_after="
        f"{fail_after}.)")
    with tf.control_dependencies([verdict]):
      return streak_var.assign(streak, read_value=False)

  stuck = tf.logical_and(tf.logical_not(finite), scale <= min_scale)
  return tf.cond(stuck, count, lambda: streak_var.assign(0, read_value=False))
