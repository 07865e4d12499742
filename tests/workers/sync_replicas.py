"""One task of a SyncReplicasOptimizer cluster with loss scaling inside it.

    sync_replicas.py OUT_DIR CLUSTER_JSON JOB INDEX

CLUSTER_JSON is `{"ps": [...], "worker": [...]}` on 127.0.0.1. The ps task
serves until both workers have written their result (or a deadline passes).
Each worker trains `SyncReplicasOptimizer(LossScaleOptimizer(GD, scale))`,
aggregating both workers' gradients every round, until `global_step` reaches
ROUNDS; the loss is Inf in the rounds POISONED names. Worker 0 is the chief
(it initializes and runs the queue runner that applies each round). Every
Session call has a deadline, so a deadlock ends the worker with an error.
Each worker writes OUT_DIR/worker_<i>.json.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.workers import ps_cluster

v1 = tf.compat.v1
ROUNDS = 8
POISONED = (2, 5)
START = 2.0**10
LEARNING_RATE = 0.1
INITIAL_W = np.full(4, 0.5, np.float32)


def run_worker(cluster, index: int) -> dict:
  server = tf.distribute.Server(cluster, job_name="worker", task_index=index,
                                start=True)
  with tf.Graph().as_default():
    with v1.device(v1.train.replica_device_setter(
        cluster=cluster, worker_device=f"/job:worker/task:{index}")):
      global_step = v1.train.get_or_create_global_step()
      w = v1.get_variable("w", initializer=INITIAL_W)
      poisoned = tf.reduce_any(tf.equal(global_step.read_value(), POISONED))
      loss = tf.reduce_sum(tf.square(w)) * tf.where(poisoned, np.inf, 1.0)
      scaling = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(LEARNING_RATE),
          managers.DynamicLossScale(START, increment_period=10**6))
      opt = v1.train.SyncReplicasOptimizer(
          scaling, replicas_to_aggregate=2, total_num_replicas=2)
      train_op = opt.minimize(loss, global_step=global_step)
    scale = scaling.get_loss_scale()
    skipped = mp_optimizer.skipped_steps()
    config = v1.ConfigProto(
        device_filters=["/job:ps", f"/job:worker/task:{index}"],
        operation_timeout_in_ms=ps_cluster.DEADLINE_SECONDS * 1000 // 2)
    sess = v1.Session(server.target, config=config)
    if index == 0:
      sess.run(v1.global_variables_initializer())
      sess.run(v1.local_variables_initializer())
      sess.run(opt.chief_init_op)
      sess.run(opt.get_init_tokens_op())
      opt.get_chief_queue_runner().create_threads(
          sess, coord=tf.train.Coordinator(), daemon=True, start=True)
    else:
      uninitialized = v1.report_uninitialized_variables(v1.global_variables())
      ps_cluster.wait(lambda: not len(sess.run(uninitialized)),
                      "initialization")
      sess.run(v1.local_variables_initializer())
      sess.run(opt.local_step_init_op)
    rounds_run = 0
    while sess.run(global_step) < ROUNDS:
      sess.run(train_op)
      rounds_run += 1
    return {"global_step": int(sess.run(global_step)),
            "scale": float(sess.run(scale)),
            "skipped_steps": int(sess.run(skipped)),
            "w": sess.run(w).tolist(), "rounds_run": rounds_run}


def main(argv) -> int:
  out_dir, cluster_json, job, index = argv[1:]
  cluster = tf.train.ClusterSpec(json.loads(cluster_json))
  if job == "ps":
    ps_cluster.serve_ps(cluster, out_dir)
    return 0
  try:
    result = run_worker(cluster, int(index))
  except tf.errors.DeadlineExceededError as error:
    result = {"deadlock": str(error).splitlines()[0]}
  path = os.path.join(out_dir, f"worker_{index}.json")
  with open(path + ".tmp", "w") as f:
    json.dump(result, f)
  os.replace(path + ".tmp", path)
  # The chief's queue runner thread may still wait on the ps: leave now.
  sys.stdout.flush()
  os._exit(0)  # pylint: disable=protected-access


if __name__ == "__main__":
  tf.compat.v1.disable_eager_execution()
  sys.exit(main(sys.argv))
