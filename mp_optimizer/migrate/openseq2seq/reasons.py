"""The findings for OpenSeq2Seq's loss scaling, each with what to use instead.

Every finding says what the place is, that it is not rewritten (OpenSeq2Seq's
scaler, optimizer wrapper and `optimize_loss` have interfaces of their own),
the manager that does the same or comes nearest (`equivalents`), and what
the training code around it must move to.
"""

from mp_optimizer.migrate.openseq2seq import api
from mp_optimizer.migrate.openseq2seq import equivalents

_MOVE = ("the training code around it (OpenSeq2Seq's optimize_loss or "
         "MixedPrecisionOptimizerWrapper, update_op, loss_scale, check_grads) "
         "must move to `mp_optimizer.LossScaleOptimizer(opt, manager)`, with "
         "the model built under `with mp_optimizer.float32_master_weights():` "
         "for the float32 copies of float16 variables that OpenSeq2Seq's "
         "wrapper kept")
_OWN = "not rewritten: OpenSeq2Seq's scaler has an interface of its own"
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
                   for key, value in api.DEFAULTS[algorithm].items())


def _about_params(algorithm: str, params: equivalents.Params) -> str:
  """What to add about `params`: not literal, unknown keys, no counterpart."""
  if params is None:
    return (" with the values of its params, not known here (defaults: "
            f"{_defaults(algorithm)})")
  said = ""
  unknown = sorted(set(params) - set(api.DEFAULTS[algorithm]))
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
                     params: equivalents.Params,
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
            "same rule, step for step, is "
            f"`{equivalents.backoff(params)}`" +
            _about_params("backoff", params) + f"; {_MOVE}")
  return (f"{head} LogMax loss scaling{_applied(mixed_only)}, {_OWN}, and no "
          f"manager has its rule: {_LOGMAX}; the nearest is "
          f"`{equivalents.logmax(params)}`" +
          _about_params("logmax", params) +
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
          f"\"Backoff\" is `{equivalents.backoff(None)}` with the values of "
          "its params "
          f"(defaults: {_defaults('backoff')}), \"LogMax\" is nearest to "
          f"`{equivalents.logmax(None)}`{fixed}; {_MOVE}")


def member_reason(shown: str) -> str:
  """The finding for a use of a scaler class other than a call."""
  return (f"`{shown}` uses OpenSeq2Seq's loss scaler, {_OWN}, which no "
          f"manager has; {_MOVE}")
