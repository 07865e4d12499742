"""Type aliases, the graph-mode guard and the small idioms every layer uses,
defined once."""

import os
import sys
from typing import Callable, List, Optional, Sequence, Tuple, Union

import tensorflow as tf

# A gradient as `compute_gradients` returns it.
Gradient = Optional[Union[tf.Tensor, tf.IndexedSlices]]
GradsAndVars = Sequence[Tuple[Gradient, tf.Variable]]
GradientList = List[Gradient]
# What a graph-building callable returns: ops or tensors to wait for.
Built = Union[tf.Operation, tf.Tensor, Sequence[Union[tf.Operation, tf.Tensor]]]


_EAGER_MESSAGE = (
    "{api} builds TF1-style graph ops and cannot run eagerly. Call "
    "`tf.compat.v1.disable_eager_execution()` at the start of the program, or "
    "build the model inside `with tf.Graph().as_default():` and run it with "
    "`tf.compat.v1.Session`. Inside `tf.function` use TF2's "
    "`tf.keras.mixed_precision.LossScaleOptimizer` instead.")


def outer_graph() -> Optional[tf.Graph]:
  """The outermost graph (what `tf.init_scope` lifts variable creation into),
  or None when that context is eager (TF2's default, or `tf.function`)."""
  with tf.init_scope():
    return None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()


def require_graph(api: str) -> tf.Graph:
  """Returns `outer_graph()`, the graph that owns variables made now.

  Args:
    api: The public name of the caller, quoted in the error.

  Raises:
    RuntimeError: If there is no such graph: the outermost context is eager.
  """
  graph = outer_graph()
  if graph is None:
    raise RuntimeError(_EAGER_MESSAGE.format(api=api))
  return graph


# Frames in these folders are not the user's code a warning points at.
_LIBRARY_DIRS = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
    os.path.dirname(os.path.abspath(tf.__file__)) + os.sep)


def user_stacklevel() -> int:
  """The `stacklevel` that makes a `warnings.warn` in the caller of this
  point at the first frame outside this package and TensorFlow."""
  level, frame = 1, sys._getframe(1)  # pylint: disable=protected-access
  while frame is not None and frame.f_code.co_filename.startswith(
      _LIBRARY_DIRS):
    level, frame = level + 1, frame.f_back
  return level


def values(grad: Union[tf.Tensor, tf.IndexedSlices]) -> tf.Tensor:
  """The tensor of entries: `.values` of an `IndexedSlices`, else `grad`."""
  return grad.values if isinstance(grad, tf.IndexedSlices) else grad


def with_values(grad: Union[tf.Tensor, tf.IndexedSlices],
                new_values: tf.Tensor) -> Union[tf.Tensor, tf.IndexedSlices]:
  """`grad` with its entries replaced; an `IndexedSlices` stays sparse."""
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(new_values, grad.indices, grad.dense_shape)
  return new_values


def read_or_zero(variable: tf.Variable) -> tf.Tensor:
  """Reads an uncollected counter, or 0 if nothing initialized it yet.

  Counters that are not checkpointed sit in no collection (see
  `per_graph.VariableSpec`), so no initializer ever runs them: the first write
  (an assign, which needs no initialization) does. Build this only where it
  runs rarely (it adds a small `tf.cond`).
  """
  return tf.cond(tf.compat.v1.is_variable_initialized(variable),
                 variable.read_value,
                 lambda: tf.constant(0, variable.dtype.base_dtype))


def in_cross_replica_context() -> bool:
  """True under a `tf.distribute` strategy, outside its replica functions."""
  return (tf.distribute.has_strategy() and
          tf.distribute.in_cross_replica_context())


def saturating_increment(counter: tf.Tensor) -> tf.Tensor:
  """`counter + 1`, or `counter` at its dtype's largest value (no wrap)."""
  return tf.where(counter < counter.dtype.max, counter + 1, counter)


def pivots(pred: tf.Tensor, name: str) -> Tuple[tf.Tensor, tf.Tensor]:
  """(on, off): tensors alive only when `pred` is True, resp. False.

  One Switch of `pred` on itself, named `name`. An op built under a control
  dependency on a pivot runs only on its side: on the other side it is dead
  and never runs. (A control edge from the Switch op itself would always
  fire: deadness lives on its outputs, hence an Identity of each.)
  """
  off, on = tf.raw_ops.Switch(data=pred, pred=pred, name=name)
  return (tf.identity(on, name=f"{name}_true"),
          tf.identity(off, name=f"{name}_false"))


def join(sides: Sequence[Tuple[tf.Tensor, Built]], name: str) -> tf.Operation:
  """One op that completes when the live side's ops have, named `name`.

  Args:
    sides: (pivot, what was built behind it) for each side of `pivots`.
    name: The name of the Merge.
  """
  done = []
  for pivot, built in sides:
    with tf.control_dependencies(tf.nest.flatten(built)):
      done.append(tf.identity(pivot))
  return tf.raw_ops.Merge(inputs=done, name=name).output.op


def branch(pred: tf.Tensor, when_true: Callable[[], Built],
           when_false: Callable[[], Built], name: str = "branch"
           ) -> tf.Operation:
  """Runs the ops `when_true()` builds if `pred`, else those of `when_false()`.

  `tf.cond` on op-returning sides, with fewer kernels: `tf.cond` adds a
  Switch (or a function argument) for every tensor a side captures; here
  each side is built behind one pivot (see `pivots`) and `join` ends it. A
  side must not build ops that escape control dependencies
  (`tf.init_scope`); the step's gate (`_step.gate`), which must allow that,
  handles it itself. For TF1 graphs only: inside a `tf.function`, automatic
  control dependencies would chain the two sides' uses of one resource, so
  the taken side would wait on the dead one.

  Args:
    pred: Scalar bool tensor.
    when_true: Builds the ops to run if `pred`.
    when_false: Builds the ops to run otherwise.
    name: Name of the Switch; the Merge is `<name>_done`.

  Returns:
    An op that completes when the taken side has.
  """
  on, off = pivots(pred, name)
  sides = []
  for pivot, build in ((off, when_false), (on, when_true)):
    with tf.control_dependencies([pivot]):
      sides.append((pivot, build()))
  return join(sides, f"{name}_done")
