"""Gating a step on one boolean with a single Switch.

`gate` is the step's `tf.cond` without its per-input cost; `on_each_replica`
keeps the gate's control dependency alive inside `tf.distribute` replicas.
"""

import tensorflow as tf

from mp_optimizer import containment


def on_each_replica(strategy, pivot, fn, args=()):
  """`call_for_each_replica`, with every op it builds depending on `pivot`.

  Replica threads start without the caller's control dependencies, so the
  gate's pivot is entered again inside each replica; a `merge_call` from
  there carries it back into cross-replica context.
  """
  def gated(*local):
    with tf.control_dependencies([pivot]):
      return fn(*local)

  return strategy.extended.call_for_each_replica(gated, args=args)


def gate(pred: tf.Tensor, when_true, when_false) -> tf.Operation:
  """Runs the ops `when_true(pivot)` builds if `pred`, else `when_false()`.

  Like `tf.cond` on two op-returning branches, but `tf.cond` adds a Switch (or
  a function argument) for every tensor a branch captures: for Adam about four
  per variable, executed every step (see BENCHMARKS.md, "The gate"). Here one
  Switch splits `pred` into two pivots; every op of a side is built under a
  control dependency on its pivot, so on the untaken side all of them are
  dead and none runs; a Merge joins the sides into one op that completes
  either way. Ops of the true side that escaped that dependency
  (`tf.control_dependencies(None)`, `tf.init_scope`) are given one on the
  pivot afterwards, except the variables it made (slots, with their
  initializers), which stay outside the gate as they do outside `tf.cond`;
  its v1 summaries stay fetchable (see `mp_optimizer.containment`).

  Args:
    pred: Scalar bool tensor.
    when_true: Called with the true side's pivot; returns an op. Under
      `tf.distribute` it must build replica functions through
      `on_each_replica`.
    when_false: Called with no argument; returns an op.

  Returns:
    An op that completes when the taken side has.

  Raises:
    ValueError: `when_true` made a variable whose initial value depends on
      the true side.
  """
  off, on = tf.raw_ops.Switch(data=pred, pred=pred, name="gate")
  # A control edge from the Switch op itself would always fire: deadness
  # lives on its outputs, so each side hangs off an Identity of one of them.
  on, off = tf.identity(on, name="gate_true"), tf.identity(off, name="gate_false")

  def build_taken():
    with tf.control_dependencies([on]):
      return when_true(on)

  taken = containment.build_behind(on, off, build_taken)
  with tf.control_dependencies([off]):
    not_taken = when_false()
  with tf.control_dependencies([taken]):
    done_on = tf.identity(on)
  with tf.control_dependencies([not_taken]):
    done_off = tf.identity(off)
  return tf.raw_ops.Merge(inputs=[done_off, done_on], name="gate_done").output.op
