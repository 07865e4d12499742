"""OpenSeq2Seq's loss-scaling API: its names, where they live, its defaults.

Nothing here needs libcst: the file filter (`mentions`) runs without it.
"""

import re
from typing import Optional

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
