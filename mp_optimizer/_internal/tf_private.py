"""The three places this library calls TensorFlow internals, and why.

Checked on TensorFlow 2.15 and 2.21. (Checkpoint tracking, the third use of
TF internals, lives in `tracking`.)

* `add_control_input`: a gate (`mp_optimizer._step.gate`) must make every op
  of its taken side depend on the side's pivot, including ops an inner
  optimizer built where the caller's control dependencies do not reach
  (`tf.control_dependencies(None)`, `tf.init_scope`). Those ops exist by the
  time the gate can see them, and TensorFlow has no public API to give an
  existing op a new input. TF's own v1 `tf.cond` does the same for
  input-less ops of a branch (`Operation._add_control_input`). The step's
  pacing (`mp_optimizer._step.pacing`) uses it too: the ops a product must
  wait for are the inner optimizer's updates, built after the product.
* `keras_optimizer_classes` / `wrapper_classes`: which optimizers TF's
  `enable_mixed_precision_graph_rewrite` wraps itself. TF decides by a
  registry that every Keras it has loaded fills in (TF's frozen Keras copy's
  `OptimizerV2`, and on TF <= 2.15 Keras 2's); it has no public reader, so it
  is read from `tensorflow.python.training.experimental.mixed_precision`.
  Deciding by the same table means this library refuses exactly what TF
  refuses.
* `route_default_sessions`: `mp_optimizer.horovod.init()` must make the
  sessions a legacy script creates itself (`tf.compat.v1.Session()`,
  `tf.compat.v1.InteractiveSession()`, `MonitoredTrainingSession`,
  Estimator) run on the process's `tf.distribute.Server`: cross-process
  collective ops run only there (an in-process session's collectives reach
  no other process). A session's target has no process-wide default in TF
  (its config has one, the eager context's, but not its target), so the
  constructor both session classes call, that of their internal base class
  `BaseSession`, is wrapped: an empty target becomes the server's, and the
  config is amended. `InteractiveSession` has filled in its own default
  config by then. Sessions given a target are left alone.
"""

import functools

from typing import Callable, Optional, Tuple

import tensorflow as tf
from tensorflow.python.client import session as tf_session  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.training.experimental import mixed_precision  # pylint: disable=g-direct-tensorflow-import


def add_control_input(op: tf.Operation, control: tf.Operation) -> None:
  """Makes `op` run only after `control` (and be dead when it is)."""
  op._add_control_input(control)  # pylint: disable=protected-access


def _registered() -> dict:
  return dict(mixed_precision._REGISTERED_WRAPPER_OPTIMIZER_CLS)  # pylint: disable=protected-access


def keras_optimizer_classes() -> Tuple[type, ...]:
  """The non-v1 optimizer classes TF's rewrite wraps in a Keras wrapper."""
  return tuple(cls for cls in _registered()
               if not issubclass(cls, tf.compat.v1.train.Optimizer))


def wrapper_classes() -> Tuple[type, ...]:
  """The loss-scale wrappers TF refuses to wrap again."""
  return tuple(wrapper for _, wrapper in _registered().values()
               if isinstance(wrapper, type))


# The constructor `route_default_sessions` wrapped, and where it now routes.
_ROUTE = {}


def route_default_sessions(
    target: str, amend: Callable[[Optional[tf.compat.v1.ConfigProto]],
                                 tf.compat.v1.ConfigProto]) -> None:
  """Makes sessions made with `target=""` use `target`, config `amend(config)`.

  Covers `tf.compat.v1.Session` and `tf.compat.v1.InteractiveSession`.
  Calling it again replaces the route; the constructor is wrapped once.
  """
  session_class = tf_session.BaseSession
  _ROUTE["target"], _ROUTE["amend"] = target, amend
  if "original" in _ROUTE:
    return
  original = _ROUTE["original"] = session_class.__init__

  @functools.wraps(original)
  def __init__(self, target="", graph=None, config=None):  # pylint: disable=redefined-outer-name
    if not target:
      target, config = _ROUTE["target"], _ROUTE["amend"](config)
    original(self, target, graph, config)

  session_class.__init__ = __init__
