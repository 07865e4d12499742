"""`LossScale`: TF2's loss-scale interface, over this package's managers.

TF's `tf.compat.v1.mixed_precision.LossScale` asks for `scale()` (i.e.
`__call__`), `update(grads)` and `get_config`/`from_config`. This base class
writes the first two once in terms of `LossScaleManager`'s
`get_loss_scale` and `update_loss_scale`, so each face implements its
policy only once: `FixedLossScale` (`fixed_loss_scale`) and
`DynamicLossScale` (`dynamic_loss_scale`) hold the one implementation of
their policy (`fixed.FixedScale`, `dynamic_scale.StateMachine`) that the
contrib manager holds too, so the policy is reachable through either API.
"""

import abc
from typing import Any, Dict, Tuple, Union

import tensorflow as tf

from mp_optimizer.managers import base
from mp_optimizer.managers import finite


class LossScale(base.LossScaleManager):
  """The interface of `tf.compat.v1.mixed_precision.LossScale`.

  `scale()` (i.e. `__call__`) returns the current scale; `update(grads)` checks
  the gradients and returns `(update_op, should_apply_gradients)`. Both are
  written once here in terms of the `LossScaleManager` methods, so a subclass
  implements the policy only once.
  """

  def __call__(self) -> tf.Tensor:
    """Returns the current loss scale as a float32 scalar tensor.

    A `tf.Tensor`, as TF's: a read of the scale variable made here, so the
    caller's control dependencies order it as they ordered TF's (a fixed
    scale's per-graph constant for `FixedLossScale`). Once the graph is
    finalized (in a hook), when no op can be added, the read the variable
    was made with: it too gives the current scale when run.
    `get_loss_scale()` still returns the variable itself, as contrib's did.
    """
    scale = self.get_loss_scale()
    if isinstance(scale, tf.Tensor):
      return scale
    graph = tf.compat.v1.get_default_graph()
    if graph.finalized:
      return graph.as_graph_element(scale)
    return tf.convert_to_tensor(scale)

  def update(self, grads) -> Tuple[Union[tf.Tensor, tf.Operation],
                                    Union[bool, tf.Tensor]]:
    """Checks `grads` and returns `(update_op, should_apply_gradients)`.

    The types are TF's: for a scale that checks the gradients, `update_op`
    is a scalar bool tensor that runs the update when evaluated (TF's is the
    output of a `tf.cond`), so `tf.identity(update_op)`,
    `tf.group(update_op)` and `sess.run(update_op)` all work; its value is
    the finite flag (TF's value carries no meaning). A fixed scale with
    `skip_nonfinite_steps=False` returns `(tf.no_op(), True)`, exactly as
    TF's `FixedLossScale` does.

    Args:
      grads: A nested structure of unscaled gradients; None entries are
        ignored. Under `tf.distribute`, call this in cross-replica context:
        every replica then gets the same answer.

    Returns:
      The update (see above), and a scalar bool tensor that is False when
      the step must be skipped (Python True for a scale that applies every
      step).
    """
    if not self.skips_nonfinite_steps:
      return tf.no_op(), True
    all_finite = finite.all_finite_in_sync(tf.nest.flatten(grads))
    with tf.control_dependencies([self.update_loss_scale(all_finite)]):
      update = tf.identity(all_finite, name="update_loss_scale")
    return update, all_finite

  @abc.abstractmethod
  def get_config(self) -> Dict[str, Any]:
    """Returns the constructor arguments, for `from_config`."""

  @classmethod
  def from_config(cls, config: Dict[str, Any]) -> "LossScale":
    """Builds a loss scale from `get_config()` output."""
    return cls(**config)
