"""Horovod's names this drop-in does not provide, and what to use instead."""

# Name in horovod.tensorflow -> the closest supported spelling.
CLOSEST = {
    "Adasum": "hvd.Average or hvd.Sum",
    "Min": "hvd.Average or hvd.Sum",
    "Max": "hvd.Average or hvd.Sum",
    "Product": "hvd.Average or hvd.Sum",
    "DistributedGradientTape": "hvd.DistributedOptimizer (TF1 graph code)",
    "PartialDistributedGradientTape":
        "hvd.DistributedOptimizer (TF1 graph code)",
    "broadcast_": "hvd.broadcast (it returns the root's value)",
    "broadcast_object": "hvd.broadcast of a tensor",
    "allgather_object": "hvd.allgather of a tensor",
    "grouped_allreduce": "hvd.allreduce of each tensor, or "
                         "hvd.DistributedOptimizer (it reduces gradients of "
                         "one dtype together)",
    "grouped_allgather": "hvd.allgather of each tensor",
    "reducescatter": "hvd.allreduce",
    "grouped_reducescatter": "hvd.allreduce",
    "alltoall": "hvd.allgather",
    "cross_rank": "hvd.rank() // hvd.local_size()",
    "cross_size": "hvd.size() // hvd.local_size()",
    "shutdown": "nothing: the server stops with the process",
    "join": "nothing: every rank runs the same steps",
    "ProcessSet": "the global process set (leave process_set out)",
    "add_process_set": "the global process set (leave process_set out)",
    "global_process_set": "the global process set (leave process_set out)",
    "SyncBatchNormalization": "tf.compat.v1.layers.batch_normalization "
                              "(not synchronized)",
    "elastic": "a restart from a checkpoint",
    "keras": "hvd.DistributedOptimizer around a tf.compat.v1.train "
             "optimizer",
}


def closest_spelling(name: str) -> Exception:
  """The error for `hvd.<name>`: NotImplementedError for a Horovod name,
  AttributeError (as Python's) for any other."""
  if name in CLOSEST:
    return NotImplementedError(
        f"hvd.{name} is not supported by mp_optimizer.horovod; use "
        f"{CLOSEST[name]}.")
  return AttributeError(
      f"module 'mp_optimizer.horovod' has no attribute {name!r}")
