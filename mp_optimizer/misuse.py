"""Catches call-order mistakes when the graph is built, not after hours of training.

* Malformed `grads_and_vars` for `apply_gradients`, with TensorFlow's own
  messages (and exception class) for an empty list and all-None gradients.
* Gradients that do not match the loss scale, found by one walk back from
  the gradients over data edges. The optimizer records, per graph, the scaled
  losses (and their multipliers) it made and the unscaled gradients it
  returned; the walk stops at those and at the seed every `tf.gradients` call
  starts from (its `grad_ys_N` op). A gradient is refused when
  - it reaches a scaled loss without passing an unscaled gradient: it was
    taken of `loss * S` and never divided by S, so it would be applied S
    times too large; or
  - it comes from a gradient computation (it reaches a seed) and reaches
    neither a scaled loss nor an unscaled gradient: it was taken of a loss
    that was never multiplied by S (`tf.gradients(loss, ...)`, or the inner
    optimizer's `compute_gradients`), so loss scaling does nothing for it.
    `allow_unscaled_gradients()` lets deliberate cases through.
  Anything else passes: a gradient read from a variable (a hand-written
  accumulator) reaches no seed, and nothing proves it unscaled. The walk
  follows v1 control flow (Switch, Enter, Merge, loops included) but not into
  v2 branch functions: a gradient captured by a `tf.cond` v2 branch is a
  leaf there, so `apply_gradients` inside such a branch checks only what was
  computed inside it.
* A bfloat16-only model: bfloat16 has float32's exponent range, so its
  gradients do not underflow and loss scaling only costs time (a warning).

All of it runs once, while the graph is built; nothing is added to a step.
"""

import collections
import contextlib
import re
import warnings
import weakref
from typing import Iterable, Iterator

import tensorflow as tf

from mp_optimizer.managers import _graph

_RECORDS = weakref.WeakKeyDictionary()  # graph -> {"scaled": set, "unscaled": set}
_ALLOWED = weakref.WeakKeyDictionary()  # graph -> open allow_unscaled_gradients
_SEED = re.compile(r"(^|/)grad_ys_\d+$")  # tf.gradients' initial gradient.
# What a tensor's ancestry reaches (bits).
_SCALED, _SAW_SCALE, _SEEDED = 1, 2, 4


def _record(kind: str, tensors: Iterable) -> None:
  for tensor in tensors:
    if tensor is None:
      continue
    if isinstance(tensor, tf.IndexedSlices):
      tensor = tensor.values
    _RECORDS.setdefault(tensor.graph, {"scaled": set(), "unscaled": set()})[
        kind].add(tensor.ref())


def record_scaled_loss(scaled_loss: tf.Tensor) -> None:
  """Remembers a scaled loss `loss * S` and its multiplier S.

  The multiplier matters more: for a loss of static shape `tf.gradients`
  builds its seed from a constant shape and never reads the product, but the
  gradient of `loss * S` always reads S.
  """
  _record("scaled", [scaled_loss, scaled_loss.op.inputs[1]])


def record_unscaled(grads: Iterable) -> None:
  """Remembers gradients that were divided by the loss scale."""
  _record("unscaled", grads)


@contextlib.contextmanager
def allow_unscaled_gradients() -> Iterator[None]:
  """Lets `apply_gradients` built inside it take gradients that never saw S.

  `apply_gradients` refuses gradients computed from a loss that was not
  multiplied by the loss scale (see the module docstring). Where that is
  deliberate (a float32 loss term whose gradients cannot underflow, a
  reference run), build the apply inside this block. It covers every
  `apply_gradients` built in the current graph while it is open, replica
  functions of a `tf.distribute` strategy included. Gradients of a scaled
  loss that were never unscaled are refused even here: they would be
  applied S times too large.

  Example:

  ```python
  with mp_optimizer.allow_unscaled_gradients():
    train_op = opt.apply_gradients(zip(tf.gradients(loss, variables),
                                       variables))
  ```

  Raises:
    RuntimeError: Under eager execution.
  """
  graph = _graph.require_graph("mp_optimizer.allow_unscaled_gradients")
  _ALLOWED[graph] = _ALLOWED.get(graph, 0) + 1
  try:
    yield
  finally:
    _ALLOWED[graph] -= 1


def check_grads_and_vars(grads_and_vars) -> tuple:
  """Returns `grads_and_vars` as a tuple after checking its shape and types.

  Raises:
    TypeError: If an entry is not a (gradient, variable) pair, or a gradient
      is not a Tensor, IndexedSlices or None.
    ValueError: If there are no pairs, or every gradient is None (with
      TensorFlow's messages for both).
  """
  pairs = tuple(grads_and_vars)
  if not pairs:
    raise ValueError("No variables provided. (`grads_and_vars` is empty: "
                     "pass the pairs `compute_gradients` returned.)")
  for pair in pairs:
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
      raise TypeError("`grads_and_vars` must hold (gradient, variable) pairs, "
                      f"got the entry {pair!r}.")
    grad, var = pair
    if grad is not None and not isinstance(grad, (tf.Tensor, tf.IndexedSlices)):
      raise TypeError(
          f"The gradient for {getattr(var, 'name', var)} must be a tf.Tensor, "
          f"tf.IndexedSlices or None, got {grad!r} "
          f"(type {type(grad).__name__}).")
  if all(grad is None for grad, _ in pairs):
    raise ValueError(
        "No gradients provided for any variable: "
        f"{[str(var) for _, var in pairs]}. (Every gradient in "
        "`grads_and_vars` is None: the loss does not depend on these "
        "variables, or an op between them has no gradient.)")
  return pairs


def _start(grad):
  return grad.values if isinstance(grad, tf.IndexedSlices) else grad


class _Leaves:
  """Says where the walk stops; the records as object ids, one set per graph.

  Graph tensors live as long as their graph, so their ids are stable during
  the walk, and comparing ids avoids hashing `tensor.ref()` per edge.
  """

  def __init__(self):
    self._by_graph = {}

  def _records(self, graph):
    if graph not in self._by_graph:
      records = _RECORDS.get(graph, {"scaled": (), "unscaled": ()})
      self._by_graph[graph] = tuple(
          {id(ref.deref()) for ref in records[kind]}
          for kind in ("unscaled", "scaled"))
    return self._by_graph[graph]

  def bits(self, tensor):
    """Returns the bits a tensor contributes if the walk stops at it, else None."""
    unscaled, scaled = self._records(tensor.graph)
    if id(tensor) in unscaled:
      return _SAW_SCALE
    if id(tensor) in scaled:
      return _SCALED | _SAW_SCALE
    if _SEED.search(tensor.op.name):
      return _SEEDED
    return None


def _reach(starts) -> dict:
  """Returns id(tensor) -> the bits its ancestry reaches, for the walk's tensors.

  One walk collects every ancestor (stopping at leaves) and who depends on
  it; the leaves' bits then flow to their dependents until nothing changes.
  That is exact on v1 while loops, whose graphs have cycles.
  """
  leaves = _Leaves()
  bits, dependents = {}, collections.defaultdict(list)
  seen, stack = set(), list(starts)
  while stack:
    tensor = stack.pop()
    key = id(tensor)
    if key in seen:
      continue
    seen.add(key)
    leaf = leaves.bits(tensor)
    if leaf is not None:
      bits[key] = leaf
      continue
    for source in tensor.op.inputs:
      dependents[id(source)].append(key)
      stack.append(source)
  pending = list(bits)
  while pending:
    key = pending.pop()
    for dependent in dependents[key]:
      merged = bits.get(dependent, 0) | bits[key]
      if merged != bits.get(dependent, 0):
        bits[dependent] = merged
        pending.append(dependent)
  return bits


def check_unscaled(grads_and_vars) -> None:
  """Raises if a gradient is still scaled, or never saw the loss scale.

  See the module docstring for the rules; `grads_and_vars` must have passed
  `check_grads_and_vars`.

  Raises:
    ValueError: Naming the variable whose gradient is wrong and the fix.
  """
  pairs = [(_start(g), v) for g, v in grads_and_vars if g is not None]
  bits = _reach(g for g, _ in pairs)
  allowed = _ALLOWED.get(_graph.require_graph(
      "LossScaleOptimizer.apply_gradients"), 0) > 0
  for grad, var in pairs:
    reached = bits.get(id(grad), 0)
    if reached & _SCALED:
      raise ValueError(
          f"The gradient for {var.name} was computed from a scaled loss but "
          "never divided by the loss scale, so it would be applied S times "
          "too large. Take gradients with `opt.compute_gradients(loss)`, or "
          "pass them through `opt.get_unscaled_gradients(grads)` before "
          "`apply_gradients`.")
    if reached == _SEEDED and not allowed:
      raise ValueError(
          f"The gradient for {var.name} ({grad.name}) was computed from a "
          "loss that was never multiplied by the loss scale (plain "
          "`tf.gradients(loss, ...)` or the inner optimizer's "
          "`compute_gradients`), so loss scaling does nothing for it and "
          "float16 gradients can still underflow. Take gradients with "
          "`opt.compute_gradients(loss)`, or with "
          "`tf.gradients(opt.get_scaled_loss(loss), ...)` followed by "
          "`opt.get_unscaled_gradients(grads)`. If unscaled gradients are "
          "intended, build this `apply_gradients` inside "
          "`with mp_optimizer.allow_unscaled_gradients():`.")


def warn_if_bfloat16_only(loss: tf.Tensor) -> None:
  """Warns when the ops behind `loss` use bfloat16 and never float16."""
  seen, stack, dtypes = set(), [loss.op], set()
  while stack:
    op = stack.pop()
    if op in seen:
      continue
    seen.add(op)
    dtypes.update(t.dtype.base_dtype for t in op.outputs)
    stack.extend(t.op for t in op.inputs)
  if tf.bfloat16 in dtypes and tf.float16 not in dtypes:
    warnings.warn(
        f"The loss {loss.name} is computed in bfloat16 without any float16 "
        "op. bfloat16 has float32's exponent range, so its gradients do not "
        "underflow and loss scaling only adds work: use the inner optimizer "
        "directly.", UserWarning, stacklevel=3)
