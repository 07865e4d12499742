"""Checks of the gradients `apply_gradients` is given, made as the graph is built.

Gradients that do not match the loss scale are refused. One walk goes back
from the gradients over data edges and stops at what `scaling` recorded in
the graph's `_internal.provenance` record (scaled losses and their
multiplier S, unscaled gradients, the optimizer's scale) and at the seed every `tf.gradients` call starts from (`grad_ys_N`).
A gradient is refused when
- it reaches a scaled loss (or S) without passing an unscaled gradient or a
  division by S: it would be applied S times too large;
- it reaches a seed but neither a scaled loss nor an unscaled gradient: it
  was taken of a loss never multiplied by S (`tf.gradients(loss, ...)`, the
  inner optimizer's `compute_gradients`), so loss scaling does nothing for
  it (`allow_unscaled_gradients()` lets deliberate cases through); or
- it was divided by S but its loss was never multiplied by it: it would be
  applied S times too small.
The optimizer's scale counts wherever it is read, so `loss *
opt.get_loss_scale()` and a division by `opt.get_loss_scale()` (or a
multiply by its reciprocal) are scaling by hand, correctly. Anything else
passes: a gradient read from a variable (a hand-written accumulator) reaches
no seed, and nothing proves it unscaled. The walk follows v1 control flow
(loops included) but not into v2 branch functions: there a captured
gradient is a leaf, so an `apply_gradients` inside a `tf.cond` v2 branch
checks only what was computed inside it.

Trainable 16-bit variables updated without float32 master weights get a
warning that points at `float32_master_weights`. All of it runs once, while
the graph is built; nothing is added to a step.
"""

import re
import warnings
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

import tensorflow as tf

from mp_optimizer._internal import graph_walk
from mp_optimizer._internal import provenance
from mp_optimizer._internal import tensors
from mp_optimizer._internal.keyed import PerObject

_SEED = re.compile(r"(^|/)grad_ys_\d+$")  # tf.gradients' initial gradient.
# What a tensor's ancestry reaches (bits): S not divided out yet; the scale
# (a scaled loss or an unscaled gradient); a gradient computation's seed; a
# division by S of something never multiplied by it.
_SCALED, _SAW_SCALE, _SEEDED, _DIVIDED = 1, 2, 4, 8
_MAX_PASSES = 64
_PASS_THROUGH = frozenset(("Identity", "Cast", "Snapshot"))
_DIVISIONS = frozenset(("RealDiv", "Div", "DivNoNan"))
_RECIPROCALS = frozenset(("Reciprocal", "Inv"))


class _Leaves:
  """Says where the walk stops; the records as object ids, one set per graph.

  Graph tensors live as long as their graph, so their ids are stable during
  the walk, and comparing ids avoids hashing `tensor.ref()` per edge.
  """

  def __init__(self):
    self._by_graph = {}

  def _records(self, graph: tf.Graph) -> Tuple[Set[int], Set[int], Set[int]]:
    if graph not in self._by_graph:
      made = provenance.recorded(graph)
      self._by_graph[graph] = (
          {id(ref.deref()) for ref in made.unscaled},
          {id(tensor) for tensor in made.scaled_losses},
          set(made.scale_sources))
    return self._by_graph[graph]

  def is_scale(self, tensor: tf.Tensor) -> bool:
    """True for the optimizer's scale S, read, cast or passed through."""
    while tensor.op.type in _PASS_THROUGH and tensor.op.inputs:
      tensor = tensor.op.inputs[0]
    _, scaled, sources = self._records(tensor.graph)
    if id(tensor) in sources or id(tensor) in scaled:
      return True
    return (tensor.op.type == "ReadVariableOp" and
            id(tensor.op.inputs[0]) in sources)

  def _is_inverse(self, tensor: tf.Tensor) -> bool:
    """True for 1/S: `Reciprocal(S)` or `c / S` with a constant c."""
    op = tensor.op
    if op.type in _RECIPROCALS:
      return self.is_scale(op.inputs[0])
    return (op.type in _DIVISIONS and op.inputs[0].op.type == "Const" and
            self.is_scale(op.inputs[1]))

  def numerator(self, tensor: tf.Tensor) -> Optional[tf.Tensor]:
    """If `tensor` is `x / S` or `x * (1/S)`, returns x; else None."""
    op = tensor.op
    if op.type in _DIVISIONS and self.is_scale(op.inputs[1]):
      return op.inputs[0]
    if op.type == "Mul":
      for x, y in (op.inputs, reversed(list(op.inputs))):
        if self._is_inverse(y):
          return x
    return None

  def bits(self, tensor: tf.Tensor) -> Optional[int]:
    """Returns the bits a tensor contributes if the walk stops at it, else None."""
    unscaled, _, _ = self._records(tensor.graph)
    if id(tensor) in unscaled:
      return _SAW_SCALE
    if self.is_scale(tensor):
      return _SCALED | _SAW_SCALE
    if _SEED.search(tensor.op.name):
      return _SEEDED
    return None


def _divided(bits: int) -> int:
  """The bits of `x / S` from those of x."""
  if bits & _SCALED:  # Multiplied by S, then divided: unscaled.
    return (bits & ~_SCALED) | _SAW_SCALE
  return bits | _DIVIDED if bits & _SEEDED else bits


def _walk(starts: Iterable[tf.Tensor]) -> Dict[int, int]:
  """Returns id(tensor) -> the bits its ancestry reaches, for the walk's tensors.

  Ancestors are collected in post-order (inputs before the tensors that use
  them), stopping at leaves; a division by S leads to its numerator only.
  Each pass then recomputes every tensor from its inputs: an OR of their
  bits, or `_divided` of a numerator's. On a graph without cycles one pass
  is exact; a v1 while loop (a cycle through NextIteration) takes a few
  passes until nothing changes.
  """
  leaves = _Leaves()
  bits: Dict[int, int] = {}  # The leaves' now, every tensor's in the end.
  inputs: Dict[int, Tuple[List[tf.Tensor], bool]] = {}  # (sources, divided)

  def is_leaf(tensor: tf.Tensor) -> bool:
    leaf = leaves.bits(tensor)
    if leaf is not None:
      bits[id(tensor)] = leaf
    return leaf is not None

  def sources(tensor: tf.Tensor) -> List[tf.Tensor]:
    numerator = leaves.numerator(tensor)
    inputs[id(tensor)] = ([numerator], True) if numerator is not None else (
        list(tensor.op.inputs), False)
    return inputs[id(tensor)][0]

  # The last start first: the order these passes have always used.
  order = [tensor for tensor in graph_walk.walk_back(
      reversed(list(starts)), sources, stop=is_leaf, post_order=True)
           if id(tensor) in inputs]
  for _ in range(_MAX_PASSES):
    changed = False
    for tensor in order:
      sources, divided = inputs[id(tensor)]
      value = 0
      for source in sources:
        value |= bits.get(id(source), 0)
      if divided:
        value = _divided(value)
      if bits.get(id(tensor)) != value:
        bits[id(tensor)] = value
        changed = True
    if not changed:
      break
  return bits


def check_unscaled(grads_and_vars: tensors.GradsAndVars) -> None:
  """Raises if a gradient is still scaled, or never saw the loss scale.

  See the module docstring for the rules; `grads_and_vars` must have passed
  `pairs.check_grads_and_vars`.

  Raises:
    ValueError: Naming the variable whose gradient is wrong and the fix.
  """
  pairs = [(tensors.values(g), v) for g, v in grads_and_vars if g is not None]
  bits = _walk(g for g, _ in pairs)
  allowed = provenance.recorded(tensors.require_graph(
      "LossScaleOptimizer.apply_gradients")).allowed > 0
  for grad, var in pairs:
    reached = bits.get(id(grad), 0)
    if reached & _SCALED:
      raise ValueError(
          f"The gradient for {var.name} was computed from a scaled loss but "
          "never divided by the loss scale, so it would be applied S times "
          "too large. Take gradients with `opt.compute_gradients(loss)`, or "
          "pass them through `opt.get_unscaled_gradients(grads)` (or divide "
          "them by `opt.get_loss_scale()`) before `apply_gradients`.")
    if reached & _DIVIDED and not reached & _SAW_SCALE and not allowed:
      raise ValueError(
          f"The gradient for {var.name} ({grad.name}) was divided by the loss "
          "scale, but the loss it was computed from was never multiplied by "
          "it, so it would be applied S times too small. Multiply the loss "
          "first: `tf.gradients(opt.get_scaled_loss(loss), ...)` (or `loss * "
          "opt.get_loss_scale()`), or take gradients with "
          "`opt.compute_gradients(loss)`.")
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


_16BIT_FLOATS, _NAMES_SHOWN = (tf.float16, tf.bfloat16), 5
# Inner optimizers warned about (True), once each.
_WARNED: PerObject[Any, bool] = PerObject(bool)


def warn_if_16bit_variables(optimizer: tf.compat.v1.train.Optimizer,
                            grads_and_vars: tensors.GradsAndVars) -> None:
  """Warns once per `optimizer` about trainable 16-bit variables being updated.

  Such a variable has no float32 master copy: its updates are rounded to its
  own dtype, and small ones are lost.
  """
  if _WARNED.peek(optimizer):
    return
  names = [var.name for grad, var in grads_and_vars
           if grad is not None and var.dtype.base_dtype in _16BIT_FLOATS]
  if not names:
    return
  _WARNED.set(optimizer, True)
  shown = ", ".join(names[:_NAMES_SHOWN])
  more = (f" and {len(names) - _NAMES_SHOWN} more"
          if len(names) > _NAMES_SHOWN else "")
  warnings.warn(
      f"LossScaleOptimizer is updating {len(names)} 16-bit float variable(s) "
      f"without float32 master weights: {shown}{more}. Updates smaller than "
      "half the float16 spacing (about 5e-4 of a weight near 1) are rounded "
      "away. Build the model under `with mp_optimizer.float32_master_weights():"
      "` (or `variable_scope(..., custom_getter=mp_optimizer."
      "float32_variable_getter)`) to store them in float32.",
      UserWarning, stacklevel=tensors.user_stacklevel())
