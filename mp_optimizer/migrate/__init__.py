"""`mp-optimizer-migrate`: moves legacy mixed-precision code onto this package.

    mp-optimizer-migrate [--in-place] [--jobs N] [--horovod] [--precision P] PATH...
    python -m mp_optimizer.migrate [--in-place] [--jobs N] [--horovod] [--precision P] PATH...

Each PATH is a Python file or a directory, searched for `*.py` (hidden
directories, virtualenvs and site-packages are skipped). Every use of
`tf.contrib.mixed_precision` and of TensorFlow's own `LossScale`,
`MixedPrecisionLossScaleOptimizer` and graph-rewrite names is rewritten to
`mp_optimizer`/`mp_optimizer.managers`, whatever alias `tensorflow` (or TF 1.15's
`tensorflow_core`) was imported under; the imports the new code needs are
added, and everything else in the file (layout, comments) is kept. By default
a unified diff is printed (apply it with `patch -p0`); `--in-place` writes the
files. `--precision bfloat16` also switches the converted code to the
bfloat16 mode (float16 dtypes to bfloat16, the loss-scale manager to
`managers.NoLossScale(keep_state_of=<the manager>)`, so checkpoints keep
their keys both ways; the float16 graph rewrite to the oneDNN bfloat16
one), with a notice for each change and a finding for what it cannot change. A file that cannot refer to the legacy API (it does not spell both
`tensorflow` and a legacy name) is not parsed at all.

OpenSeq2Seq's loss scaling (`AutomaticLossScaler`, `optimize_loss(...,
loss_scaling=...)`, a config's `"loss_scaling"`) is reported, never rewritten,
with the manager that does the same (Backoff) or comes nearest (LogMax).

With `--horovod`, `import horovod.tensorflow as hvd` (and `from horovod
import tensorflow as hvd`) becomes `mp_optimizer.horovod`, the drop-in on
TensorFlow's collective ops; Horovod names it lacks are reported.

What cannot be converted safely is printed to stderr as `file:line: reason`;
a documented difference the converted code now has is printed as
`file:line: notice: reason`, with the spelling that keeps the old behaviour.
Exit status: 0 when nothing is left to do by hand (notices may be printed), 1
when something is, 2 for bad usage or a file that cannot be read, parsed or
written (the others are still processed).

From Python, `convert(source)` returns the new source and its findings
(`Finding.needs_human` is False for a notice).

The names in `__all__` are the package's interface. Its modules are the
tool's inner workings, one step each: `cli` (the command line), `selection`
(which files found are converted: each real file once, TensorFlow's own
sources never), `files` (one file read, converted, written only if unchanged
since it was read, owner and mode kept), `mentions` (what a file or
statement must spell to be parsed), `chunks` (what is left out of the
parse), `limits` (what is too large to parse), `codemod` (`convert`, the
passes in order), `passes` (`Finding`, and the base every pass shares),
`names` (the legacy names and their targets), `resolve` (what a name refers
to through imports and aliases), `expressions` (the pass that rewrites
legacy references), `flow` and `calls` (legacy calls and what flows into
their arguments), `layout` (continuation lines), `findings` and
`subclasses` (what is left for a human), `getters` and `environment`
(hand-written float32 getters, NVIDIA's container variables), the
`openseq2seq` package (OpenSeq2Seq's loss scaling, reported with the
manager that does the same), `imports` (rewrites imports), `new_imports`
(adds them), `horovod` (`--horovod`), `precision` (`--precision bfloat16`),
`statements` (a module's logical lines) and `diffs` (unified diffs in
linear time). Neither TensorFlow nor `mp_optimizer`'s own TensorFlow code
is imported.
"""

import importlib

from mp_optimizer.migrate.cli import main

# Loaded on first use: they need libcst, which the command line imports only
# when a file mentions the legacy API.
_LAZY = {"Finding": "mp_optimizer.migrate.passes",
         "convert": "mp_optimizer.migrate.codemod"}

__all__ = [
    "Finding",
    "convert",
    "main",
]


def __getattr__(name):
  if name in _LAZY:
    return getattr(importlib.import_module(_LAZY[name]), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(__all__))
