"""The ranks of a Slurm job step (`srun -n N python train.py`).

`srun` starts every task itself and tells each, in its environment, where
the step runs (`SLURM_PROCID`, `SLURM_LOCALID`, `SLURM_STEP_NUM_TASKS`,
`SLURM_STEP_NODELIST`, `SLURM_STEP_TASKS_PER_NODE`) and which TCP ports the
step has to itself (`SLURM_STEP_RESV_PORTS`). TensorFlow's
`SlurmClusterResolver` turns the first into the step's tasks, node by node
(nodes sorted by name, tasks in rank order on each); the ports need no
exchange between ranks, so no MPI is involved:

* The task with local id i on a node takes the i-th reserved port, on every
  node (Slurm reserves the same ports on all nodes of the step).
  `SLURM_STEP_RESV_PORTS` is set only where `slurm.conf` has
  `MpiParams=ports=LOW-HIGH`; elsewhere `MP_OPTIMIZER_SLURM_PORTS` (same
  form: `12000-12003` or `12000,12005`) names the ports, which must be free
  on every node of the step.
* Addresses: 127.0.0.1 when the step runs on one node, else the node's
  name as Slurm lists it (its `NodeName`, which must resolve to the node).

Checked with Slurm 22.05, one node, CPU only.
"""

import dataclasses
import re
from typing import List, Mapping, Optional, Tuple

import tensorflow as tf

JOB = "worker"
LOOPBACK = "127.0.0.1"
# What `srun` sets in each task of a step (a batch script's own shell has
# SLURM_PROCID but none of the SLURM_STEP_ ones).
STEP = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS",
        "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")
RESERVED = "SLURM_STEP_RESV_PORTS"
FALLBACK = "MP_OPTIMIZER_SLURM_PORTS"
_PORT_LIST = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")


@dataclasses.dataclass(frozen=True)
class SlurmStep:
  """This task's place in its step and every task's server address."""
  rank: int
  size: int
  local_rank: int
  local_size: int
  addresses: Tuple[str, ...]  # host:port of each rank's server, by rank.


def is_step(environ: Mapping[str, str]) -> bool:
  """Whether this process is a task that `srun` started."""
  return all(name in environ for name in STEP)


def parse_ports(name: str, value: str) -> List[int]:
  """The ports of `value`, a list such as `12000-12003,12005`.

  Raises:
    ValueError: `value` is not such a list.
  """
  text = value.strip().strip("[]")
  if not _PORT_LIST.fullmatch(text):
    raise ValueError(f"`{name}` must list TCP ports as `12000-12003` or "
                     f"`12000,12005`, got {value!r}.")
  ports = []
  for part in text.split(","):
    first, _, last = part.partition("-")
    ports.extend(range(int(first), int(last or first) + 1))
  return ports


def _ports(environ: Mapping[str, str]) -> Tuple[str, List[int]]:
  """The variable that names this step's ports, and the ports."""
  for name in (RESERVED, FALLBACK):
    if environ.get(name):
      return name, parse_ports(name, environ[name])
  raise ValueError(
      f"mp_optimizer.horovod under `srun` needs a TCP port per task: "
      f"`{RESERVED}` is not set (Slurm sets it when slurm.conf has "
      f"`MpiParams=ports=12000-12999`) and neither is `{FALLBACK}` (set it "
      f"to ports free on every node, such as `{FALLBACK}=12000-12003`).")


def read_step(environ: Mapping[str, str]) -> SlurmStep:
  """This task's `SlurmStep` (module doc). `environ` must be `os.environ`,
  which `SlurmClusterResolver` reads.

  Raises:
    ValueError: no ports (or fewer than a node's tasks), a malformed port
      list, or a task that Slurm placed elsewhere than the resolver does.
  """
  size = int(environ["SLURM_STEP_NUM_TASKS"])
  rank, local_rank = int(environ["SLURM_PROCID"]), int(environ["SLURM_LOCALID"])
  if size == 1:
    return SlurmStep(0, 1, 0, 1, ())
  source, ports = _ports(environ)
  # The resolver counts GPUs (with nvidia-smi, which fails where there is
  # none) only to set CUDA_VISIBLE_DEVICES, and lists no more tasks on a
  # node than it has GPUs per task. GPUs are pinned as Horovod does
  # (process_group.start_server), so it sets nothing here, and one "GPU"
  # per task for every task of the step lists them all. With port_base=0
  # the port it gives is the task's index on its node, the index into the
  # reserved ports (which need not be consecutive).
  resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
      port_base=0, gpus_per_node=size, gpus_per_task=1, auto_set_gpu=False)
  places = [address.rsplit(":", 1)
            for address in resolver.cluster_spec().job_tasks(JOB)]
  hosts = [host for host, _ in places]
  most = max(hosts.count(host) for host in hosts)
  if len(ports) < most:
    raise ValueError(
        f"mp_optimizer.horovod needs {most} TCP ports on each node (one per "
        f"task of the node), got {len(ports)} in `{source}`: "
        f"{environ[source]!r}.")
  host, index = places[rank]
  node: Optional[str] = environ.get("SLURMD_NODENAME")
  if int(index) != local_rank or (node is not None and node != host):
    raise ValueError(
        f"SlurmClusterResolver places rank {rank} as task {index} of node "
        f"{host!r}, Slurm ran it as task {local_rank} of {node!r}: launch "
        f"with `srun --distribution=block` (nodes in name order), or with "
        f"`mpirun`.")
  one_node = len(set(hosts)) == 1
  addresses = tuple(f"{LOOPBACK if one_node else name}:{ports[int(i)]}"
                    for name, i in places)
  return SlurmStep(rank, size, local_rank, hosts.count(host), addresses)
