"""Horovod's TF1 graph API on TensorFlow's own collective ops.

`import mp_optimizer.horovod as hvd` in place of `import horovod.tensorflow
as hvd`: the names below behave as Horovod's (docs: Scale-out with
Horovod's API). Any other name of `horovod.tensorflow` raises
`NotImplementedError` naming the closest supported spelling.
"""

from typing import Any

from mp_optimizer.horovod.basics import init
from mp_optimizer.horovod.basics import is_initialized
from mp_optimizer.horovod.basics import local_rank
from mp_optimizer.horovod.basics import local_size
from mp_optimizer.horovod.basics import rank
from mp_optimizer.horovod.basics import size
from mp_optimizer.horovod.broadcast import broadcast_global_variables
from mp_optimizer.horovod.broadcast import broadcast_variables
from mp_optimizer.horovod.broadcast import BroadcastGlobalVariablesHook
from mp_optimizer.horovod.compression import Average
from mp_optimizer.horovod.compression import Compression
from mp_optimizer.horovod.compression import Sum
from mp_optimizer.horovod.ops import allgather
from mp_optimizer.horovod.ops import allreduce
from mp_optimizer.horovod.ops import broadcast
from mp_optimizer.horovod.optimizer import DistributedOptimizer
from mp_optimizer.horovod import unsupported as _unsupported

__all__ = [
    "Average",
    "BroadcastGlobalVariablesHook",
    "Compression",
    "DistributedOptimizer",
    "Sum",
    "allgather",
    "allreduce",
    "broadcast",
    "broadcast_global_variables",
    "broadcast_variables",
    "init",
    "is_initialized",
    "local_rank",
    "local_size",
    "rank",
    "size",
]


def __getattr__(name: str) -> Any:
  """Refuses Horovod's other names with the closest supported spelling."""
  raise _unsupported.closest_spelling(name)
