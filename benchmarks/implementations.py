"""The optimizers compared: bare Adam, TF's built-in wrapper, and ours.

Every dynamic scale starts at 2**12 and grows every 2000 steps, so no
benchmarked step overflows and every implementation applies every step.
"""

import dataclasses
from typing import Callable, Optional

import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from mp_optimizer._step import gate

v1 = tf.compat.v1
Optimizer = v1.train.Optimizer
# (loss, global_step) -> train op, built in the step's graph.
MakeTrainOp = Callable[[tf.Tensor, tf.Variable], tf.Operation]
INITIAL_SCALE = 2**12
GROWTH_STEPS = 2000


@dataclasses.dataclass(frozen=True)
class Implementation:
  """One way of training.

  Attributes:
    name: Short key.
    label: Row label in the report.
    wrap: Turns the inner Adam into the optimizer to benchmark.
    counterpart: Name of TF's built-in doing the same kind of scaling (for
      the "vs TF" column), None for TF's own rows and bare Adam.
  """
  name: str
  label: str
  wrap: Callable[[Optimizer], Optimizer]
  counterpart: Optional[str] = None


def inner_optimizer() -> Optimizer:
  return v1.train.AdamOptimizer(1e-4)


def train_op_of(impl: Implementation) -> MakeTrainOp:
  """(loss, global_step) -> `impl.wrap(Adam).minimize(...)`."""
  return lambda loss, global_step: impl.wrap(inner_optimizer()).minimize(
      loss, global_step=global_step)


def _tf_wrapper(opt, loss_scale):
  return v1.mixed_precision.MixedPrecisionLossScaleOptimizer(opt, loss_scale)


def _tf_dynamic(opt):
  return _tf_wrapper(opt, v1.mixed_precision.DynamicLossScale(
      initial_loss_scale=INITIAL_SCALE, increment_period=GROWTH_STEPS))


IMPLEMENTATIONS = [
    Implementation("bare", "bare Adam (no loss scaling)", lambda opt: opt),
    Implementation("tf_dynamic", "TF built-in, dynamic", _tf_dynamic),
    Implementation("tf_fixed", "TF built-in, fixed",
                   lambda opt: _tf_wrapper(opt, INITIAL_SCALE)),
    Implementation("ours_fixed", "ours, fixed (skips NaN/Inf steps)",
                   lambda opt: mp_optimizer.LossScaleOptimizer(
                       opt, managers.FixedLossScaleManager(INITIAL_SCALE)),
                   counterpart="tf_fixed"),
    Implementation("ours_fixed_apply_all", "ours, fixed, applies every step",
                   lambda opt: mp_optimizer.LossScaleOptimizer(
                       opt, managers.FixedLossScaleManager(
                           INITIAL_SCALE, skip_nonfinite_steps=False)),
                   counterpart="tf_fixed"),
    Implementation("ours_contrib", "ours, contrib dynamic",
                   lambda opt: mp_optimizer.LossScaleOptimizer(
                       opt, managers.ExponentialUpdateLossScaleManager(
                           INITIAL_SCALE, GROWTH_STEPS)),
                   counterpart="tf_dynamic"),
    Implementation("ours_tf2", "ours, TF2 dynamic",
                   lambda opt: mp_optimizer.MixedPrecisionLossScaleOptimizer(
                       opt, managers.DynamicLossScale(INITIAL_SCALE,
                                                      GROWTH_STEPS)),
                   counterpart="tf_dynamic"),
]
BY_NAME = {impl.name: impl for impl in IMPLEMENTATIONS}
OURS_DYNAMIC = ("ours_contrib", "ours_tf2")
# The two floors: what a step costs with only one part of loss scaling.
FLOORS = {"floor_unscale": "floor: unscale only",
          "floor_barrier": "floor: barrier only"}


def floor_train_op(loss: tf.Tensor, global_step: tf.Variable,
                   inner: Optimizer, name: str) -> tf.Operation:
  """A floor's train op: our `compute_gradients`, then the inner apply.

  "floor_unscale" applies every step (each gradient unscaled on its own,
  no check, no gate). "floor_barrier" applies behind our one-Switch gate on
  a flag that only waits for every gradient and checks nothing: the
  barrier any whole-step skip needs, and nothing else.
  """
  barrier = {"floor_unscale": False, "floor_barrier": True}[name]
  manager = managers.FixedLossScaleManager(INITIAL_SCALE,
                                           skip_nonfinite_steps=barrier)
  pairs = mp_optimizer.LossScaleOptimizer(inner, manager).compute_gradients(
      loss)
  if not barrier:
    return inner.apply_gradients(pairs, global_step)
  grads = [tf.convert_to_tensor(g) for g, _ in pairs if g is not None]
  with tf.control_dependencies([g.op for g in grads]):
    every_gradient = tf.identity(
        v1.placeholder_with_default(True, [], name="always_true"))
  return gate.gate(every_gradient,
                   lambda pivot: inner.apply_gradients(pairs, global_step),
                   tf.no_op)


def floor_of(name: str) -> MakeTrainOp:
  """(loss, global_step) -> the floor `name` around the benchmarks' Adam."""
  return lambda loss, global_step: floor_train_op(
      loss, global_step, inner_optimizer(), name)
