"""Lock-free counting for the dynamic scale; the mutex for everything else.

Most steps are finite with no growth due: their whole change is
`good_steps += 1`. `write_step` lets such a step do just that, with one
atomic fetch-and-increment and no mutex; every other step (an overflow, a
growth, or a count that raced past the growth boundary) takes the state's
mutex and moves the state machine of `managers.transition` there.

The atomic operation is `ResourceCountUpTo` with the counter dtype's
largest value as its limit: it holds the variable's own lock, reads the
count, adds 1 into a new buffer and returns the count it read, so two
increments never return the same value and a read made before it keeps the
old value. (`AssignAddVariableOp` is atomic too but returns nothing, and a
read after it may see later increments.) Its only failure, the limit,
cannot happen here: `enabled` requires `incr_every - 1 <= dtype.max // 2`,
and the count exceeds `incr_every - 1` only by at most two increments per
step in flight (below), so it would take more than `dtype.max // 4` steps
in flight at once, more than any process holds.

Write L for `incr_every - 1` and `good` for the variable. The operations on
`good` are reads; `count()`, the fetch-and-increment, which "succeeds"
when the value it returns is below L; and, only while the mutex is held,
the write `good = 0`.

```
finite step:  g = read(good)
              if g < L and count() < L:  done            # no mutex
              lock; if not (read(good) < L and count() < L):
                        grow the scale (if finite), bad = 0, good = 0
              unlock
overflow:     lock; shrink or count the overflow as contrib does; good = 0
              unlock
```

Why every run ends in a state that some serial order of its steps gives:

1. Between two writes of `good = 0` only increments change `good`, so it
   only grows; increments return consecutive values.
2. An increment that returns v < L: by 1, every increment since the last
   write returned less than v, so each succeeded, and v is exactly the
   count of finite steps placed since that write. Growth is not due, and
   the step's whole change is `good += 1`, with the scale and `bad_steps`
   untouched (contrib's and the "sticky" hysteresis leave `bad_steps`
   alone on a finite step). The step is placed at its increment.
3. A locked step is placed at its write (`good = 0`), or, if it ends on a
   successful increment under the lock, at that increment. Locked steps
   run one at a time, and the scale and `bad_steps` change only under the
   mutex, so each locked step reads the scale and `bad_steps` that the
   serial order gives it.
4. A finite step that decides to grow saw `good >= L` or an increment
   returning >= L, under the mutex. Only the mutex's holder writes, so by
   1, from then until its own write `good` stays >= L and no increment
   can succeed, so in the serial order
   the count at its place is >= L: growth is due, as contrib says. Its
   write removes the increments that returned >= L: those are "in
   excess": each belongs to a step not yet placed (its own, or one that
   now waits for the mutex and will decide afresh there).
5. An overflow's effect does not depend on `good_steps` (it resets it), so
   increments that land between its reads and its write are placed before
   it and reset with it; those after its write are counted from 0.
6. A step's place (an increment or a write) lies within its own run, so
   the serial order keeps the order of steps that did not overlap.

So two finite steps at the growth boundary count once and grow once, in
that order, and an overflow that races with a lock-free increment either
resets it or is followed by it (`tests/managers/test_fast_path.py` runs
each race hundreds of times; `test_linearizable.py` the older ones).

A value of `good_steps` above L can only come from a restored or edited
checkpoint; such a count is read under the mutex (`g < L` fails), so its
step grows the scale and zeroes the count, as contrib does. A checkpoint is
restored between steps, not while they run.

Steps that need more than `good += 1` under other settings keep the mutex on
every step (`enabled` is False): the "consecutive" hysteresis (a finite
step also zeroes `bad_steps`), `fail_at_floor_after` (a finite step zeroes
its streak), a counter on a device without a `ResourceCountUpTo` kernel
(a GPU), mirrored variables (one increment per replica copy would be needed)
and a period too long for the counter's dtype (above).
"""

from typing import Callable, List

import tensorflow as tf

from mp_optimizer._internal import tensors
from mp_optimizer.managers import transition


def enabled(policy: transition.Policy, good_steps: tf.Variable,
            guards_floor: bool) -> bool:
  """True when the common step of this scale can run without the mutex.

  Args:
    policy: The scale's settings.
    good_steps: The good-step counter variable.
    guards_floor: True when `fail_at_floor_after` is set.
  """
  dtype = good_steps.dtype.base_dtype
  device = tf.DeviceSpec.from_string(good_steps.device or "")
  return (policy.hysteresis != "consecutive" and not guards_floor and
          policy.incr_every - 1 <= dtype.max // 2 and
          device.device_type in (None, "CPU") and
          not isinstance(good_steps, tf.distribute.DistributedValues))


def _counted(pred: tf.Tensor, good_steps: tf.Variable, limit: int,
             name: str) -> tf.Tensor:
  """`pred and count() < limit`: the increment runs only when `pred`."""
  on, off = tensors.pivots(pred, name)
  dtype = good_steps.dtype.base_dtype
  with tf.control_dependencies([on]):
    before = tf.raw_ops.ResourceCountUpTo(
        resource=good_steps.handle, limit=int(dtype.max), T=dtype)
    counted = before < tf.constant(limit, dtype)
  with tf.control_dependencies([off]):
    skipped = tf.constant(False)
  return tf.raw_ops.Merge(inputs=[counted, skipped], name=f"{name}_done"
                          ).output


def write_step(policy: transition.Policy, variables: transition.Variables,
               finite: tf.Tensor,
               locked: Callable[[Callable[[], List[tf.Operation]]],
                                tf.Operation]) -> tf.Operation:
  """Builds one step's update (see the module docstring); returns its op.

  Args:
    policy: The scale's settings.
    variables: The state's variables.
    finite: Scalar bool tensor: were the step's gradients all finite?
    locked: Builds a function's ops to run holding the state's mutex
      (`per_graph.Mutex.run`, with the step's finite flag done first).
  """
  limit = policy.incr_every - 1
  good = variables.good_steps

  def counted(name: str) -> tf.Tensor:
    return _counted(tf.logical_and(finite, good.read_value() < limit), good,
                    limit, name)

  def under_mutex() -> List[tf.Operation]:
    return [tensors.branch(counted("count_locked"), lambda: [],
                           lambda: _change(policy, variables, finite, limit),
                           name="change_locked")]

  return tensors.branch(counted("count"), lambda: [],
                        lambda: locked(under_mutex), name="counted")


def _change(policy: transition.Policy, variables: transition.Variables,
            finite: tf.Tensor, limit: int) -> List[tf.Operation]:
  """The writes of a step that grows or overflows, from the locked reads.

  `good_steps` enters as L: a finite step that reaches here grows, and an
  overflow's result does not depend on it.
  """
  return transition.write_next(
      policy, variables, finite,
      tf.constant(limit, variables.good_steps.dtype.base_dtype))
