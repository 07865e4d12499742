"""`AmaxHistoryLossScaleManager`: a scale set from the gradients' magnitude.

The dynamic managers find the largest safe scale by trial: they grow it
until a step overflows, skip that step and back off. This one avoids most of
those overflows: it keeps a short history of the largest gradient magnitude
of each finite step (amax: unscaled, before any clip, read in the graph),
and sets the scale so that the largest recent gradient, scaled, stays
`margin` powers of two below float16's largest value. Should a step still
overflow (an intermediate backward tensor can be larger than any final
gradient), it backs off: the scale halves at once, and one more power of two
of margin stays until `relax_after` finite steps in a row have passed.

```
on a finite step with amax a:
    if a > 0: history = [a] + history[:history_length - 1]; steps += 1
    if extra > 0 and clean >= relax_after - 1: extra -= 1; clean = 0
    else: clean += 1
    peak = max(history)
    if peak > 0:
        power = clip(exponent(65504 / peak) - margin - extra, -126, 126)
        scale = clip(2 ** power, min_loss_scale, max_loss_scale)
on a non-finite step:
    extra += 1; clean = 0
    scale = max(min_loss_scale, scale / 2)
```
(`clean` and `extra` stop at int64's largest value instead of wrapping.)

`exponent(q)` is q's binary exponent, floor(log2(q)), read off its float32
bits, so the rule is exact. The history holds the newest amax first. A step
whose gradients are all zero (amax 0) measures nothing, so it leaves the
history as it was: zeros must not push a large amax out and let the scale
jump past what the next real gradients can take. The rule never chooses more
than 2**126, the largest scale whose reciprocal is a normal float32 (at
2**127 every step would count as an overflow), nor less than 2**-126. A
history restored from a checkpoint written with another `history_length` is
adapted at the next step: its newest entries are kept, up to the new length,
and missing ones count as no measurement. The optimizer hands the manager
each step's amax (`needs_gradient_amax`); under `tf.distribute` it is the
largest over all replicas. State (checkpointed, GLOBAL): `loss_scale`,
`amax_history`, `amax_steps`, `extra_margin`, `clean_steps`. OpenSeq2Seq's
`AutomaticLossScaler(algorithm="LogMax")` also sets the scale from the
gradients' magnitude, from running statistics of log2(amax) rather than
their recent maximum.
"""

import dataclasses
from typing import List, Optional

import tensorflow as tf

from mp_optimizer._internal import per_graph
from mp_optimizer._internal import tensors
from mp_optimizer._internal import validation
from mp_optimizer.managers import base

FLOAT16_MAX = 65504.0
# The powers of two the rule may choose: 1/S stays a normal float32.
SMALLEST_POWER, LARGEST_POWER = -126, 126
_NAMES = ("loss_scale", "amax_history", "amax_steps", "extra_margin",
          "clean_steps")


def _exponent(x: tf.Tensor) -> tf.Tensor:
  """floor(log2(x)) of a positive normal float32, exactly, as int64."""
  bits = tf.bitcast(x, tf.int32)
  return tf.cast(tf.bitwise.right_shift(bits, 23) & 0xFF, tf.int64) - 127


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


@dataclasses.dataclass(frozen=True)
class AmaxSettings:
  """`AmaxHistoryLossScaleManager`'s settings and their defaults.

  One field per constructor argument, same name, same default (the
  arguments are described in the class docstring).
  """
  init_loss_scale: float = 2.0**15
  history_length: int = 16
  margin: int = 1
  relax_after: int = 1000
  min_loss_scale: float = 1.0
  max_loss_scale: float = 2.0**24


_AMAX = AmaxSettings  # Its class attributes are the defaults.


class AmaxHistoryLossScaleManager(base.LossScaleManager):
  """Sets the scale from a history of the gradients' largest magnitude.

  See the module docstring for the rule. The dynamic managers grow the scale
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
    self._settings = AmaxSettings(
        init, length,
        validation.check_positive_int("margin", margin, minimum=0),
        validation.check_step_count("relax_after", relax_after),
        min_loss_scale=low, max_loss_scale=high)
    specs = [per_graph.VariableSpec("loss_scale", tf.float32, init),
             per_graph.VariableSpec("amax_history", tf.float32,
                                    [0.0] * length, any_length=True),
             per_graph.VariableSpec("amax_steps", tf.int64, 0),
             per_graph.VariableSpec("extra_margin", tf.int64, 0),
             per_graph.VariableSpec("clean_steps", tf.int64, 0)]
    self._state = per_graph.PerGraphVariables(self, specs)
    self._state.create_if_graph()

  init_loss_scale = base.setting("init_loss_scale")
  history_length = base.setting("history_length")
  margin = base.setting("margin")
  relax_after = base.setting("relax_after")
  min_loss_scale = base.setting("min_loss_scale")
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
      new = self._next(finite_grads, amax,
                       {name: state[name].read_value() for name in _NAMES})
      return [state[name].assign(new[name], read_value=False)
              for name in _NAMES]

    with tf.name_scope("loss_scale_update"):
      return self._state.mutex(api).run(locked, after=[finite_grads, amax])

  def _next(self, finite: tf.Tensor, amax: tf.Tensor, old: dict) -> dict:
    """The transition of the module docstring, on the values read in `old`."""
    settings = self._settings
    length = settings.history_length
    low, high = settings.min_loss_scale, settings.max_loss_scale
    measured = tf.logical_and(finite, amax > 0)
    # [a, history..., zeros]: its first `length` entries are the history with
    # a recorded, the next `length` the history kept. A restored history of
    # another length (see the module docstring) comes out `length` long too.
    padded = tf.concat([tf.reshape(amax, [1]), old["amax_history"],
                        tf.zeros([length])], axis=0)
    history = tf.where(measured, padded[:length], padded[1:length + 1])
    # `clean >= relax_after - 1`, and counters that stop at their largest
    # value: a restored counter at int64's largest value must not wrap.
    relax = tf.logical_and(old["extra_margin"] > 0,
                           old["clean_steps"] >= settings.relax_after - 1)
    extra = tf.where(finite, old["extra_margin"] - tf.cast(relax, tf.int64),
                     tensors.saturating_increment(old["extra_margin"]))
    clean = tf.where(tf.logical_and(finite, tf.logical_not(relax)),
                     tensors.saturating_increment(old["clean_steps"]),
                     tf.constant(0, tf.int64))
    peak = tf.reduce_max(history)
    quotient = tf.minimum(FLOAT16_MAX / tf.maximum(peak, 2.0**-126),
                          tf.float32.max)
    # exponent(q) is at most 127, so a margin of 512 already gives the
    # smallest power; capping both terms keeps the int64 sum from wrapping.
    power = (_exponent(quotient) - min(settings.margin, 512) -
             tf.minimum(extra, 512))
    target = tf.pow(2.0, tf.cast(tf.clip_by_value(
        power, SMALLEST_POWER, LARGEST_POWER), tf.float32))
    target = tf.clip_by_value(target, low, high)
    scale = tf.where(finite, tf.where(peak > 0, target, old["loss_scale"]),
                     tf.maximum(old["loss_scale"] * 0.5, low))
    return {"loss_scale": scale, "amax_history": history,
            "amax_steps": old["amax_steps"] + tf.cast(measured, tf.int64),
            "extra_margin": extra, "clean_steps": clean}

  def __repr__(self) -> str:
    return base.call_repr("AmaxHistoryLossScaleManager",
                          keywords=dataclasses.asdict(self._settings))
