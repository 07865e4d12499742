"""`AmaxHistoryLossScaleManager`: a scale set from the gradients' magnitude.

The manager validates its arguments into `amax_rule.AmaxSettings`, keeps the
rule's state per graph and moves it one step under the state's mutex; the
rule itself (what the next scale is, as pseudocode and as graph ops) is
`managers.amax_rule`. `gradient_amax` measures what the rule reads: the
step's largest gradient magnitude, which the optimizer passes to
`update_loss_scale`.
"""

import dataclasses
from typing import List, Optional

import tensorflow as tf

from mp_optimizer._internal import per_graph
from mp_optimizer._internal import tensors
from mp_optimizer._internal import validation
from mp_optimizer.managers import amax_rule
from mp_optimizer.managers import base


def gradient_amax(grads) -> tf.Tensor:
  """The largest |entry| over all non-None gradients, float32 (0 for none).

  NaN when an entry is NaN, Inf when one is Inf (a non-finite step's amax is
  not recorded). Under `tf.distribute` in cross-replica context, the largest
  over all replicas.
  """
  grads = [g for g in grads if g is not None]
  if tensors.in_cross_replica_context():
    strategy = tf.distribute.get_strategy()
    local = strategy.extended.call_for_each_replica(
        lambda *replica_grads: tf.reshape(gradient_amax(replica_grads), [1]),
        args=tuple(grads))
    return tf.reduce_max(strategy.gather(local, axis=0))
  maxima = [tf.reduce_max(tf.abs(tf.cast(tensors.values(g), tf.float32)))
            for g in grads]
  if not maxima:
    return tf.constant(0.0)
  return tf.reduce_max(tf.stack(maxima), name="gradient_amax")


_AMAX = amax_rule.AmaxSettings  # Its class attributes are the defaults.


class AmaxHistoryLossScaleManager(base.LossScaleManager):
  """Sets the scale from a history of the gradients' largest magnitude.

  See `managers.amax_rule` for the rule. The dynamic managers grow the scale
  until an overflow tells them to stop, and skip that step; this one reads
  the gradients' size instead, so it skips far fewer steps.

  Example:

  ```python
  opt = mp_optimizer.LossScaleOptimizer(
      tf.compat.v1.train.AdamOptimizer(1e-3),
      managers.AmaxHistoryLossScaleManager(history_length=16, margin=1))
  ```

  Args:
    init_loss_scale: The scale of the first step (before any amax is known),
      finite, in [min_loss_scale, max_loss_scale].
    history_length: Positive int, at most `MAX_HISTORY_LENGTH` (65536):
      how many finite steps' amax to keep (the history is read and written
      whole on every step).
    margin: Non-negative int: powers of two kept between the scaled peak and
      float16's largest value (65504).
    relax_after: Positive whole number: finite steps in a row after which
      one power of two of margin added by an overflow is given back.
    min_loss_scale: Floor of the scale, from 2**-126 to 2**126.
    max_loss_scale: Ceiling of the scale, finite, >= min_loss_scale (above
      2**126 the rule still chooses at most 2**126).

  Raises:
    TypeError: If a number has the wrong type (bools rejected).
    ValueError: If a value is out of range.
  """

  needs_gradient_amax = True
  MAX_HISTORY_LENGTH = 2**16

  def __init__(self, init_loss_scale: float = _AMAX.init_loss_scale,
               history_length: int = _AMAX.history_length,
               margin: int = _AMAX.margin,
               relax_after: int = _AMAX.relax_after, *,
               min_loss_scale: float = _AMAX.min_loss_scale,
               max_loss_scale: float = _AMAX.max_loss_scale):
    low = validation.check_scale_floor("min_loss_scale", min_loss_scale)
    high = validation.check_at_least("max_loss_scale", max_loss_scale, low)
    init = validation.check_at_least("init_loss_scale", init_loss_scale, low)
    if init > high:
      raise ValueError(f"`init_loss_scale` must be <= max_loss_scale "
                       f"({high:g}), got {init:g}.")
    length = validation.check_positive_int("history_length", history_length)
    if length > self.MAX_HISTORY_LENGTH:
      raise ValueError(
          f"`history_length` must be <= {self.MAX_HISTORY_LENGTH} (the "
          "history is a float32 vector read and written whole on every "
          f"step), got {length}.")
    self._settings = amax_rule.AmaxSettings(
        init, length,
        validation.check_positive_int("margin", margin, minimum=0),
        validation.check_step_count("relax_after", relax_after),
        min_loss_scale=low, max_loss_scale=high)
    self._state = per_graph.PerGraphVariables(
        self, amax_rule.state_specs(self._settings))
    self._state.create_if_graph()

  init_loss_scale = base.setting("init_loss_scale")
  history_length = base.setting("history_length")
  margin = base.setting("margin")
  relax_after = base.setting("relax_after")
  min_loss_scale = base.setting("min_loss_scale")
  scale_floor = base.setting(
      "min_loss_scale", "The least scale: `min_loss_scale`, as a float.")
  max_loss_scale = base.setting("max_loss_scale")

  @property
  def dynamic(self) -> bool:
    return True

  def get_loss_scale(self) -> tf.Variable:
    """Returns the current graph's float32 scale variable."""
    return self._state.get("AmaxHistoryLossScaleManager.get_loss_scale")[
        "loss_scale"]

  def variables(self) -> List[tf.Variable]:
    return list(self._state.existing().values())

  def update_loss_scale(self, finite_grads: tf.Tensor,
                        gradient_amax: Optional[tf.Tensor] = None
                        ) -> tf.Operation:
    """Returns the op that records this step and sets the next scale.

    Args:
      finite_grads: Scalar bool tensor: were all gradients finite?
      gradient_amax: Scalar float32 tensor: the step's largest |gradient|,
        unscaled and before any clip (`gradient_amax(grads)`);
        `LossScaleOptimizer` passes it. 0 (all-zero gradients) is not
        recorded.

    Raises:
      ValueError: If `gradient_amax` is not given.
    """
    base.check_finite_flag(finite_grads)
    if gradient_amax is None:
      raise ValueError(
          "AmaxHistoryLossScaleManager.update_loss_scale needs "
          "`gradient_amax`, the step's largest unscaled gradient magnitude "
          "(managers.amax.gradient_amax(grads)); LossScaleOptimizer passes "
          "it, got None.")
    api = "AmaxHistoryLossScaleManager.update_loss_scale"
    state = self._state.get(api)
    amax = tf.cast(gradient_amax, tf.float32)

    def locked():
      new = amax_rule.next_state(
          self._settings, finite_grads, amax,
          {name: state[name].read_value() for name in amax_rule.STATE_NAMES})
      return [state[name].assign(new[name], read_value=False)
              for name in amax_rule.STATE_NAMES]

    with tf.name_scope("loss_scale_update"):
      return self._state.mutex(api).run(locked, after=[finite_grads, amax])

  def __repr__(self) -> str:
    return base.call_repr("AmaxHistoryLossScaleManager",
                          keywords=dataclasses.asdict(self._settings))
