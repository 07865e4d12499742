"""`init()` and the process's place: `size`, `rank`, `local_rank`, `local_size`.

`init()` finds the process group from the launcher (`process_group`), starts
this rank's `tf.distribute.Server` when there is more than one rank, and
routes the sessions the script creates without a target onto it (see
`_internal.tf_private.route_default_sessions`): cross-process collective ops
run only in sessions on the server. Each such session gets a copy of its
config with `isolate_session_state` (its variables are its own, as in an
in-process session) and, unless set, `device_filters` naming this rank's task
(it places nothing on another rank's devices).
"""

import dataclasses
from typing import Optional

import tensorflow as tf

from mp_optimizer._internal import keyed
from mp_optimizer._internal import tf_private
from mp_optimizer.horovod import process_group


@dataclasses.dataclass(frozen=True)
class Joined:
  """What `init()` found and started: the group, and this rank's server
  (None for a group of one, which needs none)."""
  group: process_group.ProcessGroup
  server: Optional[tf.distribute.Server]


_JOINED: keyed.PerProcess[Joined] = keyed.PerProcess("process group")


def init() -> None:
  """Joins the ranks that launched together; call once, before building.

  Calling it again does nothing (as Horovod).

  Raises:
    ImportError: Under `mpirun` without `mpi4py`.
    ValueError: If `TF_CONFIG`'s task is not a `worker`; under `srun`, if
      the step has no ports reserved and `MP_OPTIMIZER_SLURM_PORTS` names
      none (or fewer than a node's tasks), or if Slurm placed this task
      elsewhere than `SlurmClusterResolver` does.
  """
  if _JOINED.peek() is not None:
    return
  group = process_group.discover()
  server = None
  if group.size > 1:
    server = process_group.start_server(group)
    tf_private.route_default_sessions(
        server.target, lambda config: session_config(config, group))
  _JOINED.set(Joined(group, server))


def session_config(config: Optional[tf.compat.v1.ConfigProto],
                   group: process_group.ProcessGroup
                   ) -> tf.compat.v1.ConfigProto:
  """A copy of `config` for a session on this rank's server (module doc)."""
  amended = tf.compat.v1.ConfigProto()
  if config is not None:
    amended.CopyFrom(config)
  amended.isolate_session_state = True
  if not amended.device_filters:
    amended.device_filters.append(group.device(group.rank))
  return amended


def is_initialized() -> bool:
  """Whether `init()` has run in this process."""
  return _JOINED.peek() is not None


def group() -> process_group.ProcessGroup:
  """The process group `init()` found.

  Raises:
    ValueError: Before `init()` (Horovod's class and wording).
  """
  joined = _JOINED.peek()
  if joined is None:
    raise ValueError(
        "mp_optimizer.horovod has not been initialized; call hvd.init() "
        "first.")
  return joined.group


def size() -> int:
  """The number of ranks. Raises ValueError before `init()`."""
  return group().size


def rank() -> int:
  """This process's rank, 0 to size() - 1. Raises ValueError before `init()`."""
  return group().rank


def local_size() -> int:
  """The number of ranks on this host. Raises ValueError before `init()`."""
  return group().local_size


def local_rank() -> int:
  """This process's rank on its host. Raises ValueError before `init()`."""
  return group().local_rank
