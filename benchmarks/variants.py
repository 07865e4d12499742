"""Retired finite checks and gates, re-measured by `overhead.py --retired`.

Each is rebuilt here from public parts, as it was, so the library keeps no
switch for it and nothing is patched at run time. A variant's step is assembled from public parts: `LossScaleOptimizer`'s
`compute_gradients` (scaled loss, unscaled gradients, as in every one of our
rows), then a finite check, a gate around the inner Adam's apply, and
optionally a dynamic scale's update. Swapping one part while keeping the
others shows what that part costs.
"""

import contextlib
import dataclasses
from typing import Callable, ContextManager, Iterator, List, Optional, Tuple

import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from mp_optimizer._internal import tensors
from mp_optimizer._step import gate as gating
from benchmarks import implementations

v1 = tf.compat.v1
Check = Callable[[List], tf.Tensor]
Gate = Callable[[tf.Tensor, Callable[[], tf.Operation]], tf.Operation]


def _values(grads) -> List[tf.Tensor]:
  return [tensors.values(g) for g in grads if g is not None]


def per_gradient_is_finite(grads) -> tf.Tensor:
  """TF's built-in check: `reduce_all(is_finite(g))` per gradient, then all."""
  return tf.reduce_all(tf.stack(
      [tf.reduce_all(tf.math.is_finite(v)) for v in _values(grads)]))


def per_gradient_sum(grads, shared_axes: bool = False) -> tf.Tensor:
  """This project's earlier check: one `reduce_sum` per gradient, `add_n`.

  Args:
    grads: float32 gradients (None allowed).
    shared_axes: Pass one reduction-axes constant per rank instead of letting
      each `reduce_sum` make its own.
  """
  axes = {}
  sums = []
  for values in _values(grads):
    rank = values.shape.rank
    if shared_axes and rank is not None and rank not in axes:
      axes[rank] = tf.constant(list(range(rank)), tf.int32)
    sums.append(tf.reduce_sum(values, axis=axes.get(rank)))
  return tf.math.is_finite(tf.add_n(sums))


def always_true(grads) -> tf.Tensor:
  """No check: a True that Grappler cannot fold, to isolate a gate's cost."""
  del grads
  return v1.placeholder_with_default(True, [], name="always_true")


def after_every_gradient(grads) -> tf.Tensor:
  """No check, but a True that waits for every gradient, as a check does."""
  values = _values(grads)
  with tf.control_dependencies([v.op for v in values]):
    return tf.identity(always_true(values))


def cond_gate(flag: tf.Tensor, apply: Callable[[], tf.Operation]):
  """The optimizer's earlier gate: `tf.cond(flag, apply, no_op)`."""
  return tf.cond(flag, apply, tf.no_op)


def switch_gate(flag: tf.Tensor, apply: Callable[[], tf.Operation]):
  """The optimizer's gate (`mp_optimizer._step.gate.gate`): one Switch.

  Every op the apply builds gets a control input from the Switch's true
  side, so all of them are dead (not run) when `flag` is False; no other
  input is switched. A Merge of the two sides is live either way.
  """
  return gating.gate(flag, lambda pivot: apply(), tf.no_op)


def assembled(check: Check, gate: Gate,
              dynamic: bool = False) -> implementations.MakeTrainOp:
  """A train op from our compute_gradients, `check`, `gate` and a scale.

  Args:
    check: Gradients -> scalar bool.
    gate: (flag, apply) -> op that applies only when flag is True.
    dynamic: Update a `managers.DynamicLossScale` after the gate, as the
      optimizer does; otherwise the scale is fixed.
  """
  def make(loss, global_step):
    manager = (managers.DynamicLossScale(implementations.INITIAL_SCALE,
                                         implementations.GROWTH_STEPS)
               if dynamic else
               managers.FixedLossScaleManager(implementations.INITIAL_SCALE))
    inner = implementations.inner_optimizer()
    grads_and_vars = mp_optimizer.LossScaleOptimizer(
        inner, manager).compute_gradients(loss)
    flag = check([g for g, _ in grads_and_vars])
    applied = gate(flag, lambda: inner.apply_gradients(grads_and_vars,
                                                       global_step))
    with tf.control_dependencies([applied]):
      update = manager.update_loss_scale(flag)
    return tf.group(applied, update)
  return make


@contextlib.contextmanager
def tf1_control_flow() -> Iterator[None]:
  """Builds `tf.cond` as TF1 did (Switch/Merge ops), then restores the
  setting it found."""
  was_v2 = v1.control_flow_v2_enabled()
  v1.disable_control_flow_v2()
  try:
    yield
  finally:
    if was_v2:
      v1.enable_control_flow_v2()



def grouped_without_limit(grads) -> tf.Tensor:
  """The grouped check before its size limit: one `add_n` per shape, any size.

  Gradients of one static shape and dtype are added, each sum reduced, and
  the sums added; a gradient of unknown shape is reduced on its own.
  """
  groups = {}
  for values in _values(grads):
    key = ((tuple(values.shape.as_list()), values.dtype)
           if values.shape.is_fully_defined() else id(values))
    groups.setdefault(key, []).append(values)
  sums = [tf.reduce_sum(group[0] if len(group) == 1 else tf.add_n(group))
          for group in groups.values()]
  return tf.math.is_finite(tf.add_n(sums) if len(sums) > 1 else sums[0])


@dataclasses.dataclass(frozen=True)
class Idea:
  """A variant step measured beside the implementations.

  Attributes:
    name: Short key.
    label: Row label in the report.
    shapes: Model shapes it runs on.
    make_train_op: (loss, global_step) -> train op; None to reuse the graph
      of the implementation `same_graph_as` in a Session of its own.
    same_graph_as: See `make_train_op`.
    scope: Context the graph is built in.
    grappler: False runs its Session with Grappler switched off.
    reference: Row its ratio is taken against.
  """
  name: str
  label: str
  shapes: Tuple[str, ...]
  make_train_op: Optional[implementations.MakeTrainOp] = None
  same_graph_as: Optional[str] = None
  scope: Callable[[], ContextManager] = contextlib.nullcontext
  grappler: bool = True
  reference: str = "bare"


_TWO = ("many_small", "wide")
IDEAS = [
    Idea("gate_cond", "gate alone: tf.cond (control flow v2), no check", _TWO,
         assembled(always_true, cond_gate)),
    Idea("gate_cond_tf1", "gate alone: tf.cond built as TF1 (Switch/Merge)",
         ("many_small",), assembled(always_true, cond_gate),
         scope=tf1_control_flow),
    Idea("gate_switch", "gate alone: one Switch (the optimizer's), no check",
         _TWO, assembled(always_true, switch_gate)),
    Idea("gate_switch_waiting", "one Switch, flag waits for every gradient, "
         "no check (the floor of skipping)", _TWO,
         assembled(after_every_gradient, switch_gate)),
    Idea("check_tf", "gate + TF's check (is_finite, reduce_all each)",
         _TWO, assembled(per_gradient_is_finite, switch_gate)),
    Idea("check_sum_each", "gate + one reduce_sum per gradient (before)",
         _TWO, assembled(per_gradient_sum, switch_gate)),
    Idea("check_grouped_all", "gate + grouped sums, no size limit",
         ("wide",), assembled(grouped_without_limit, switch_gate)),
    Idea("previous", "tf.cond gate + grouped check + TF2 dynamic update "
         "(the optimizer's earlier gate)", ("many_small", "wide", "embedding"),
         assembled(managers.all_finite, cond_gate, dynamic=True)),
    Idea("bare_no_grappler", "bare Adam, Grappler off", ("many_small",),
         same_graph_as="bare", grappler=False),
    Idea("ours_tf2_no_grappler", "ours, TF2 dynamic, Grappler off",
         ("many_small",), same_graph_as="ours_tf2", grappler=False,
         reference="bare_no_grappler"),
]
