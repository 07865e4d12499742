"""The managers that do what OpenSeq2Seq's loss scalers did, spelled out.

* Backoff (`scale_min` 1.0, `scale_max` 2**24, also the first scale,
  `step_factor` 2.0, `step_window` 2000): on a step with NaN/Inf gradients
  the scale is divided by `step_factor` (clipped to `[scale_min,
  scale_max]`); it is multiplied by `step_factor` (clipped) every
  `step_window` finite steps since the last such step, or since the start.
  That is `ExponentialUpdateLossScaleManager` with `decr_every_n_nan_or_inf=1`
  and `decr_ratio=1/step_factor`, step for step. A Session's default
  rewrites (Grappler's constant folding) compute OpenSeq2Seq's
  `scale / step_factor` as `scale * (1/step_factor)`, so the numbers are the
  same bit for bit; with constant folding off, a `step_factor` that is not a
  power of two could make them differ in the last bit after a backoff.
* LogMax has no equivalent; the nearest is `AmaxHistoryLossScaleManager`.
* A fixed scale: OpenSeq2Seq applied steps with NaN/Inf gradients, so the
  same is `FixedLossScaleManager(value, skip_nonfinite_steps=False)`
  (`reasons`).
"""

import dataclasses
import math
import re
from typing import Dict, Optional

from mp_optimizer.migrate.openseq2seq import api


@dataclasses.dataclass(frozen=True)
class Value:
  """One argument as written, and its number when it is a numeric literal."""
  text: str
  number: Optional[float] = None


# A params dict as written (key -> value), or None when it is not a literal.
Params = Optional[Dict[str, Value]]


def _power_of_two(number: Optional[float]) -> bool:
  return number is not None and number > 0 and math.frexp(number)[0] == 0.5


def _text(params: Params, algorithm: str, key: str) -> str:
  """The value of `key`: as written, its default, or the key's own name
  when `params` is not known (None)."""
  if params is None:
    return key
  value = params.get(key)
  return value.text if value is not None else (
      api.DEFAULTS[algorithm][key])


def backoff(params: Params) -> str:
  """The manager that does what Backoff with `params` does, spelled out."""
  low, high, factor, window = (_text(params, "backoff", key) for key in (
      "scale_min", "scale_max", "step_factor", "step_window"))
  given = (params or {}).get("step_factor")
  number = 2.0 if params is not None and given is None else (
      given.number if given is not None else None)
  shrink = (repr(1 / number) if _power_of_two(number) else
            f"1 / {factor}" if re.fullmatch(r"[\w.]+", factor) else
            f"1 / ({factor})")
  return (f"managers.ExponentialUpdateLossScaleManager(init_loss_scale="
          f"{high}, incr_every_n_steps={window}, decr_every_n_nan_or_inf=1, "
          f"incr_ratio={factor}, decr_ratio={shrink}, min_loss_scale={low}, "
          f"max_loss_scale={high})")


def logmax(params: Params) -> str:
  """The nearest manager to LogMax with `params`, spelled out."""
  low = _text(params, "logmax", "scale_min")
  given = (params or {}).get("scale_min")
  if params is None or (given is not None and given.number is None):
    start = f"max(1.0, {low})"  # LogMax starts at 1.0, ours at >= the floor.
  else:
    start = given.text if given is not None and given.number > 1 else "1.0"
  return (f"managers.AmaxHistoryLossScaleManager(init_loss_scale={start}, "
          f"min_loss_scale={low}, "
          f"max_loss_scale={_text(params, 'logmax', 'scale_max')})")
