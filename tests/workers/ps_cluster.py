"""Running a parameter-server cluster (1 ps + 2 workers) on 127.0.0.1.

Each task is a process started by `launch.Worker` with the arguments
`OUT_DIR CLUSTER_JSON JOB INDEX [extra...]`; each worker writes
OUT_DIR/worker_<i>.json. The cluster runs under a deadline and every process
group is killed when it returns.
"""

import json
import os
import time
from typing import Callable, Dict, List, Sequence, Tuple

import tensorflow as tf

from tests.workers import launch

TASKS = (("ps", 0), ("worker", 0), ("worker", 1))
DEADLINE_SECONDS = 100  # How long a task waits for anything.


def wait(condition: Callable[[], bool], what: str) -> None:
  """Polls `condition`; exits the process if it does not hold in time."""
  deadline = time.monotonic() + DEADLINE_SECONDS
  while not condition():
    if time.monotonic() > deadline:
      raise SystemExit(f"gave up waiting for {what}")
    time.sleep(0.05)


def serve_ps(cluster: tf.train.ClusterSpec, out_dir: str) -> None:
  """Serves as the ps task until both workers have written their results."""
  tf.distribute.Server(cluster, job_name="ps", task_index=0, start=True)
  wait(lambda: all(os.path.exists(os.path.join(out_dir, f"worker_{i}.json"))
                   for i in range(len(TASKS) - 1)), "the workers' results")


def run(add_cleanup: Callable, script: str, extra: Sequence[str],
        timeout: float) -> Tuple[List[launch.Finished], Dict[int, dict]]:
  """Runs `script` as every task; returns their ends and the workers' JSON."""
  out_dir = launch.scratch_dir(add_cleanup)
  logs = launch.scratch_dir(add_cleanup)
  ps_port, *worker_ports = launch.free_ports(len(TASKS))
  cluster = json.dumps({
      "ps": [f"{launch.LOOPBACK}:{ps_port}"],
      "worker": [f"{launch.LOOPBACK}:{port}" for port in worker_ports]})
  processes = [launch.Worker(script, [out_dir, cluster, job, str(index),
                                      *extra], logs)
               for job, index in TASKS]
  finished = launch.wait_all(processes, timeout)
  results = {}
  for index in range(len(TASKS) - 1):
    path = os.path.join(out_dir, f"worker_{index}.json")
    if os.path.exists(path):
      with open(path) as f:
        results[index] = json.load(f)
  return finished, results
