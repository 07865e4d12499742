"""OpenSeq2Seq's loss scaling: found, read and reported, never rewritten.

OpenSeq2Seq (NVIDIA's TF1 sequence-to-sequence toolkit) scaled the loss with
objects of its own: `AutomaticLossScaler(algorithm="Backoff"|"LogMax",
params)` (`BackoffScaler`, `LogMaxScaler` behind it), driven through
`update_op(has_nan, amax)`, `.loss_scale` and `check_grads(grads_and_vars)`
by its `MixedPrecisionOptimizerWrapper(opt, loss_scale)`, which its
`optimize_loss(..., loss_scaling=..., loss_scaling_params=...)` builds from a
model config's `"loss_scaling"` entry: a string names an algorithm, a number
is a fixed scale. None of this can be rewritten call by call; each place is
reported with the manager that does the same, for
`mp_optimizer.LossScaleOptimizer(opt, manager)`.

Its modules, one step each: `api` (OpenSeq2Seq's names and defaults, and the
file filter `mentions`, which needs no libcst), `places` (the pass that finds
the places), `literals` (the values written there), `equivalents` (the
managers that do the same) and `reasons` (the findings' text). Nothing is
imported here, so that the file filter loads no libcst.
"""
