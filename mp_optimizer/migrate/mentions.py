"""What a file, or a statement of it, must spell to be worth parsing.

The codemod parses only what can matter, and decides that from the text
alone (no libcst): `might_use_legacy` for a whole file (the command line's
filter, and `convert`'s first step), `precision_words` for a file
`--precision bfloat16` may change, `STATEMENT` and `GETTER` for each
statement `chunks.Reduced` keeps.
"""

import re

from mp_optimizer.migrate import names
from mp_optimizer.migrate.openseq2seq import api as openseq2seq

# A file refers to the legacy API only through an import that spells
# `tensorflow` (or `tensorflow_core`). Every legacy name contains `LossScale`
# or `mixed_precision`; so does every legacy module but `train.experimental`,
# which is reported only when reached by `getattr` (or a star import from
# TensorFlow); a hand-written float32 getter calls its `getter(`. A file
# that uses this library (converted code, run again: what is still to do is
# reported) spells `mp_optimizer` or imports `managers`; one that sets
# NVIDIA's variables spells them; one that uses OpenSeq2Seq's loss scaling
# passes `openseq2seq.mentions`. A file with none of these has nothing to
# convert or report: it is never parsed.
_MENTIONS = re.compile(
    rb"mixed_precision|LossScale|train\.experimental|import\s+experimental|"
    rb"[\"']experimental[\"']|from\s+tensorflow[\w.]*\s+import\s*\*|"
    rb"getter\s*\(")
_OURS = re.compile(
    rb"TF_ENABLE_AUTO_MIXED_PRECISION|\bmp_optimizer\b|"
    rb"^[ \t]*(?:import|from)[ \t]+managers\b", re.MULTILINE)


def might_use_legacy(source: bytes) -> bool:
  """False if `source` (a file's bytes) has nothing to convert or report.

  Args:
    source: The bytes of a Python file in an ASCII-compatible encoding (all
      that Python accepts).
  """
  return (b"tensorflow" in source and _MENTIONS.search(source) is not None
          ) or _OURS.search(source) is not None or openseq2seq.mentions(source)


def precision_words(data: bytes) -> bool:
  """Whether `data` spells what `--precision bfloat16` rewrites or reports."""
  return any(word in data for word in (b"float16", b"half", b"LossScale",
                                       b"mixed_precision", b"65504"))


# What a statement must spell to be parsed: the file filter's legacy
# spellings, the library's own names (a converted file, run again), the
# manager's two methods (a loss-scale subclass that defines both is not
# reported), contrib's private members (also a method that overrides one),
# NVIDIA's environment variables, OpenSeq2Seq's loss scaling (its
# scalers, its optimizer wrapper, `optimize_loss`, configs), and what builds
# a Saver (`savers`).
_PRIVATE = "|".join(sorted(names.LEGACY_PRIVATE))
STATEMENT = re.compile(
    r"mixed_precision|LossScale|experimental|getter|mp_optimizer|managers|"
    r"(?:get|update)_loss_scale|TF_ENABLE_AUTO_MIXED_PRECISION|import|Scaler|"
    r"loss_scaling|MixedPrecisionOptimizerWrapper|optimize_loss|"
    r"Saver|MonitoredTrainingSession|EstimatorSpec|Scaffold|"
    rf"\b(?:{_PRIVATE})\b")
# A function that may be a float32 getter (`getters.GetterPass`): its second
# parameter is `name`, or it takes `*args` after the first.
GETTER = re.compile(r"\s*(?:@.*\n\s*)*(?:async\s+)?def\s+\w+\s*\(\s*\w+"
                    r"[^,()]*,\s*(?:name\b|\*(?!\*))")
