"""The amax rule: `AmaxHistoryLossScaleManager`'s settings, state and next state.

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
from typing import Dict, List

import tensorflow as tf

from mp_optimizer._internal import per_graph
from mp_optimizer._internal import tensors

FLOAT16_MAX = 65504.0
# The powers of two the rule may choose: 1/S stays a normal float32.
SMALLEST_POWER, LARGEST_POWER = -126, 126
# The state, in the order the manager makes, reads and writes it.
STATE_NAMES = ("loss_scale", "amax_history", "amax_steps", "extra_margin",
               "clean_steps")


@dataclasses.dataclass(frozen=True)
class AmaxSettings:
  """`AmaxHistoryLossScaleManager`'s settings and their defaults.

  One field per constructor argument, same name, same default (the
  arguments are described in the manager's docstring).
  """
  init_loss_scale: float = 2.0**15
  history_length: int = 16
  margin: int = 1
  relax_after: int = 1000
  min_loss_scale: float = 1.0
  max_loss_scale: float = 2.0**24


def state_specs(settings: AmaxSettings) -> List[per_graph.VariableSpec]:
  """The state variables of `STATE_NAMES`, at their values before step 1."""
  return [per_graph.VariableSpec("loss_scale", tf.float32,
                                 settings.init_loss_scale),
          per_graph.VariableSpec("amax_history", tf.float32,
                                 [0.0] * settings.history_length,
                                 any_length=True),
          per_graph.VariableSpec("amax_steps", tf.int64, 0),
          per_graph.VariableSpec("extra_margin", tf.int64, 0),
          per_graph.VariableSpec("clean_steps", tf.int64, 0)]


def next_state(settings: AmaxSettings, finite: tf.Tensor, amax: tf.Tensor,
               old: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """The transition of the module docstring, on the values read in `old`.

  Args:
    settings: The manager's validated settings.
    finite: Scalar bool tensor: were all of the step's gradients finite?
    amax: Scalar float32 tensor: the step's largest |gradient|, unscaled.
    old: The state read before the step, one tensor per `STATE_NAMES`.

  Returns:
    The state after the step, one tensor per `STATE_NAMES`.
  """
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


def _exponent(x: tf.Tensor) -> tf.Tensor:
  """floor(log2(x)) of a positive normal float32, exactly, as int64."""
  bits = tf.bitcast(x, tf.int32)
  return tf.cast(tf.bitwise.right_shift(bits, 23) & 0xFF, tf.int64) - 127
