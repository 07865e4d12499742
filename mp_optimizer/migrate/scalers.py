"""OpenSeq2Seq's loss scaling: its names, and the managers that do the same.

OpenSeq2Seq (NVIDIA's TF1 sequence-to-sequence toolkit) scaled the loss with
objects of its own: `AutomaticLossScaler(algorithm="Backoff"|"LogMax",
params)` (`BackoffScaler`, `LogMaxScaler` behind it), driven through
`update_op(has_nan, amax)`, `.loss_scale` and `check_grads(grads_and_vars)`
by its `MixedPrecisionOptimizerWrapper(opt, loss_scale)`, which its
`optimize_loss(..., loss_scaling=..., loss_scaling_params=...)` builds from a
model config's `"loss_scaling"` entry: a string names an algorithm, a number
is a fixed scale. None of this can be rewritten call by call; each place is
reported with the manager that does the same (`reason`), for
`mp_optimizer.LossScaleOptimizer(opt, manager)`:

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
  same is `FixedLossScaleManager(value, skip_nonfinite_steps=False)`.

Nothing here needs libcst: the file filter (`mentions`) runs without it.
"""

import dataclasses
import math
import re
from typing import Dict, Optional

SCALERS = {"AutomaticLossScaler": None, "BackoffScaler": "backoff",
           "LogMaxScaler": "logmax"}  # Class -> the algorithm it fixes.
OPTIMIZE_LOSS = "optimize_loss"
WRAPPER = "MixedPrecisionOptimizerWrapper"
_MODULES = {
    **{name: ("open_seq2seq.optimizers.automatic_loss_scaler",)
       for name in SCALERS},
    OPTIMIZE_LOSS: ("open_seq2seq.optimizers.optimizers",
                    "open_seq2seq.optimizers"),
    WRAPPER: ("open_seq2seq.optimizers.mp_wrapper",),
}
ALGORITHMS = ("backoff", "logmax")
DEFAULTS = {
    "backoff": {"scale_min": "1.0", "scale_max": "2.0**24",
                "step_factor": "2.0", "step_window": "2000"},
    "logmax": {"scale_min": "1.0", "scale_max": "2.0**24", "log_max": "16.0",
               "beta1": "0.99", "beta2": "0.999", "overflow_std_dev": "3.09"},
}

# A file can use OpenSeq2Seq's loss scaling only if it imports from
# open_seq2seq (OpenSeq2Seq's own modules import these relatively) and
# spells one of these.
_PACKAGE = (b"open_seq2seq", b"automatic_loss_scaler", b"mp_wrapper")
_MENTIONS = re.compile(rb"LossScaler|BackoffScaler|LogMaxScaler|loss_scaling|"
                       rb"MixedPrecisionOptimizerWrapper")

_MOVE = ("the training code around it (OpenSeq2Seq's optimize_loss or "
         "MixedPrecisionOptimizerWrapper, update_op, loss_scale, check_grads) "
         "must move to `mp_optimizer.LossScaleOptimizer(opt, manager)`, with "
         "the model built under `with mp_optimizer.float32_master_weights():` "
         "for the float32 copies of float16 variables that OpenSeq2Seq's "
         "wrapper kept")
_OWN = "not rewritten: OpenSeq2Seq's scaler has an interface of its own"


def mentions(source: bytes) -> bool:
  """Whether `source` (a file's bytes) may use OpenSeq2Seq's loss scaling."""
  return any(name in source for name in _PACKAGE) and (
      _MENTIONS.search(source) is not None)


def kind(path: str) -> Optional[str]:
  """The OpenSeq2Seq name `path` (a qualified name) is, or None.

  Absolute paths must be OpenSeq2Seq's own; a relative import (as in
  OpenSeq2Seq's own package) must name the module and the name.
  """
  module, _, name = path.rpartition(".")
  relative = module.lstrip(".")
  for full in _MODULES.get(name, ()):
    if module == full or (module.startswith(".") and relative and
                          ("." + full).endswith("." + relative)):
      return name
  return None


@dataclasses.dataclass(frozen=True)
class Value:
  """One argument as written, and its number when it is a numeric literal."""
  text: str
  number: Optional[float] = None


def _power_of_two(number: Optional[float]) -> bool:
  return number is not None and number > 0 and math.frexp(number)[0] == 0.5


def _text(params: Optional[Dict[str, Value]], algorithm: str,
          key: str) -> str:
  """The value of `key`: as written, its default, or the key's own name
  when `params` is not known (None)."""
  if params is None:
    return key
  value = params.get(key)
  return value.text if value is not None else DEFAULTS[algorithm][key]


def backoff(params: Optional[Dict[str, Value]]) -> str:
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


def logmax(params: Optional[Dict[str, Value]]) -> str:
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


_LOGMAX = ("it sets the scale to 2**(16 - mu - overflow_std_dev * sigma) "
           "from running means of log2 of each step's largest gradient, "
           "starts at 1.0, and takes a step with NaN/Inf gradients for "
           "log2(amax) = 2**log_max, which holds the scale at scale_min for "
           "thousands of steps")
_AMAX = ("which sets the scale from the largest gradient of the last 16 "
         "finite steps (history_length), a power of two (margin) below "
         "float16's largest value, and on an overflow halves it and keeps a "
         "power of two more margin for 1000 finite steps (relax_after)")
_FIXED = "`managers.FixedLossScaleManager({}, skip_nonfinite_steps=False)`"


def _applied(mixed_only: bool) -> str:
  return ' (applied only with dtype="mixed")' if mixed_only else ""


def _defaults(algorithm: str) -> str:
  return ", ".join(f"{key} {value}"
                   for key, value in DEFAULTS[algorithm].items())


def _about_params(algorithm: str, params: Optional[Dict[str, Value]]) -> str:
  """What to add about `params`: not literal, unknown keys, no counterpart."""
  if params is None:
    return (" with the values of its params, not known here (defaults: "
            f"{_defaults(algorithm)})")
  said = ""
  unknown = sorted(set(params) - set(DEFAULTS[algorithm]))
  if unknown:
    said += (" (OpenSeq2Seq rejects its params' "
             f"{', '.join(f'`{k}`' for k in unknown)} with ValueError)")
  alone = [k for k in ("log_max", "beta1", "beta2", "overflow_std_dev")
           if algorithm == "logmax" and k in params]
  if alone:
    said += (f" ({', '.join(f'`{k}`' for k in alone)} of its params "
             f"{'has' if len(alone) == 1 else 'have'} no counterpart)")
  return said


def algorithm_reason(label: str, algorithm: str,
                     params: Optional[Dict[str, Value]],
                     mixed_only: bool = False) -> str:
  """The finding for Backoff or LogMax (`algorithm`, lowercase).

  Args:
    label: What the place is, quoted (`AutomaticLossScaler(...)`).
    algorithm: "backoff" or "logmax".
    params: The scaler's params as written, or None if they are not a
      literal (a dict display, `dict(...)` or None).
    mixed_only: The place is a `loss_scaling` that OpenSeq2Seq applies only
      with dtype="mixed".
  """
  head = f"{label} is OpenSeq2Seq's"
  if algorithm == "backoff":
    return (f"{head} Backoff loss scaling{_applied(mixed_only)}, {_OWN}; the "
            f"same rule, step for step, is `{backoff(params)}`" +
            _about_params("backoff", params) + f"; {_MOVE}")
  return (f"{head} LogMax loss scaling{_applied(mixed_only)}, {_OWN}, and no "
          f"manager has its rule: {_LOGMAX}; the nearest is "
          f"`{logmax(params)}`" + _about_params("logmax", params) +
          f", {_AMAX}; {_MOVE}")


def unknown_algorithm_reason(label: str, shown: str) -> str:
  """The finding for a literal algorithm OpenSeq2Seq does not have."""
  return (f"{label} names the algorithm {shown}, which OpenSeq2Seq's "
          "AutomaticLossScaler rejects with ValueError (it has \"Backoff\" "
          "and \"LogMax\")")


def fixed_reason(label: str, shown: str, mixed_only: bool) -> str:
  """The finding for a fixed scale, `shown` as written."""
  return (f"{label} is OpenSeq2Seq's fixed loss scale{_applied(mixed_only)}, "
          "not rewritten; the same is " + _FIXED.format(shown) +
          " (OpenSeq2Seq applied steps with NaN/Inf gradients, which "
          f"`managers.FixedLossScaleManager({shown})` skips); {_MOVE}")


def not_literal_reason(label: str, shown: str, numbers: bool,
                       mixed_only: bool = False) -> str:
  """The finding for an algorithm (or `loss_scaling`) that is not a literal.

  Args:
    label: What the place is, quoted.
    shown: The expression, as written.
    numbers: Whether a number (a fixed scale) is among the values it may
      take.
    mixed_only: As for `algorithm_reason`.
  """
  fixed = (", a number N is " + _FIXED.format("N")) if numbers else ""
  return (f"{label} is OpenSeq2Seq's loss scaling{_applied(mixed_only)}, "
          f"{_OWN}, and which manager does the same cannot be computed here: "
          f"`{shown}` is not a literal. Look at the values it takes: "
          f"\"Backoff\" is `{backoff(None)}` with the values of its params "
          f"(defaults: {_defaults('backoff')}), \"LogMax\" is nearest to "
          f"`{logmax(None)}`{fixed}; {_MOVE}")


def member_reason(shown: str) -> str:
  """The finding for a use of a scaler class other than a call."""
  return (f"`{shown}` uses OpenSeq2Seq's loss scaler, {_OWN}, which no "
          f"manager has; {_MOVE}")
