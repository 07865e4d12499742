"""One task of an asynchronous parameter-server cluster sharing one scale.

    async_ps.py OUT_DIR CLUSTER_JSON JOB INDEX MANAGER OVERFLOWS

CLUSTER_JSON is `{"ps": [...], "worker": [...]}` on 127.0.0.1. The ps task
serves until both workers have written their result (or a deadline passes).
The model and the loss-scale state live on the ps; every worker runs its own
Session against its own server, with no synchronization between steps.
Worker 0 initializes, waits until worker 1 is stepping, then runs OVERFLOWS
steps whose loss is Inf (each must halve the scale once) and raises a `done`
flag; worker 1 runs finite steps, as fast as it can, until it sees the flag.
Each worker writes OUT_DIR/worker_<i>.json.
"""

import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.workers import ps_cluster

v1 = tf.compat.v1
START = 2.0**100


def make_manager(name: str):
  if name == "contrib":
    return managers.ExponentialUpdateLossScaleManager(
        START, incr_every_n_steps=10**9, decr_every_n_nan_or_inf=1,
        decr_ratio=0.5)
  return managers.DynamicLossScale(START, increment_period=10**9, multiplier=2)


def run_worker(cluster, index: int, out_dir: str, manager_name: str,
               overflows: int) -> dict:
  server = tf.distribute.Server(cluster, job_name="worker", task_index=index,
                                start=True)
  with tf.Graph().as_default():
    with v1.device(v1.train.replica_device_setter(
        cluster=cluster, worker_device=f"/job:worker/task:{index}")):
      w = v1.get_variable("w", initializer=np.ones(16, np.float32))
      done = v1.get_variable("done", initializer=False, trainable=False)
      poison = v1.placeholder(tf.float32, [])
      manager = make_manager(manager_name)
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(1e-3), manager)
      train_op = opt.minimize(tf.reduce_sum(tf.square(w)) * poison)
      raise_done = done.assign(True)
    scale = manager.get_loss_scale()
    good = [v for v in manager.variables() if v.op.name == "good_steps"][0]
    config = v1.ConfigProto(
        device_filters=["/job:ps", f"/job:worker/task:{index}"])
    with v1.Session(server.target, config=config) as sess:
      sess.run(v1.local_variables_initializer())  # Each worker's own.
      if index == 0:
        sess.run(v1.global_variables_initializer())
        ps_cluster.wait(lambda: sess.run(good) > 0,
                        "worker 1 to start stepping")
        scales = []
        for _ in range(overflows):
          sess.run(train_op, {poison: np.inf})
          scales.append(float(sess.run(scale)))
        sess.run(raise_done)
        return {"scales": scales, "final_scale": float(sess.run(scale)),
                "state_devices": [v.device for v in manager.variables()]}
      uninitialized = v1.report_uninitialized_variables(v1.global_variables())
      ps_cluster.wait(lambda: not len(sess.run(uninitialized)),
                      "initialization")
      steps, deadline = 0, time.monotonic() + ps_cluster.DEADLINE_SECONDS
      while not sess.run([train_op, done], {poison: 1.0})[1]:
        steps += 1
        if time.monotonic() > deadline:
          raise SystemExit("worker 0 never finished")
      return {"finite_steps": steps}


def main(argv) -> int:
  out_dir, cluster_json, job, index, manager_name, overflows = argv[1:]
  cluster = tf.train.ClusterSpec(json.loads(cluster_json))
  if job == "ps":
    ps_cluster.serve_ps(cluster, out_dir)
    return 0
  result = run_worker(cluster, int(index), out_dir, manager_name,
                      int(overflows))
  path = os.path.join(out_dir, f"worker_{index}.json")
  with open(path + ".tmp", "w") as f:
    json.dump(result, f)
  os.replace(path + ".tmp", path)
  return 0


if __name__ == "__main__":
  tf.compat.v1.disable_eager_execution()
  sys.exit(main(sys.argv))
