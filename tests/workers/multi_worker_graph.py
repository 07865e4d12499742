"""One worker of MultiWorkerMirroredStrategy training in a v1 graph.

    TF_CONFIG=... multi_worker_graph.py OUT_DIR MANAGER [MANAGER ...]

The graph-mode route that works on every TensorFlow 2.x: this process starts
its `tf.distribute.Server` from `TF_CONFIG`, builds the graph under
`tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy` (collective
all-reduce), and runs it in a `tf.compat.v1.Session` on the server's target
with the strategy's session config. Worker i is replica i of the scenario in
`replicated`; for each MANAGER (a fresh graph each, on the same server) it
writes OUT_DIR/<task>_<manager>.npz: the scale and global_step after every
step of the schedule, and the final local value of every global variable.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

from tests.workers import replicated

v1 = tf.compat.v1


def start_server() -> tf.distribute.Server:
  config = json.loads(os.environ["TF_CONFIG"])
  session_config = v1.ConfigProto()
  session_config.experimental.collective_group_leader = (
      "/job:worker/replica:0/task:0")
  return tf.distribute.Server(
      tf.train.ClusterSpec(config["cluster"]), job_name="worker",
      task_index=config["task"]["index"], config=session_config, start=True)


def build(manager_name: str, poisoned_replica: tf.Tensor) -> dict:
  """Builds one model and its train op; returns the tensors to run."""
  with v1.variable_scope(manager_name):
    w = v1.get_variable("w", initializer=replicated.INITIAL_W)
    step_counter = v1.get_variable("step", initializer=np.int64(0),
                                   trainable=False)
  optimizer = replicated.make_optimizer(manager_name)

  def step():
    replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
    xs, ys = replicated.all_replica_data()
    loss = replicated.loss(w, tf.gather(xs, replica_id),
                           tf.gather(ys, replica_id))
    poison = tf.where(tf.equal(replica_id, poisoned_replica), np.inf, 1.0)
    return optimizer.minimize(loss * poison, global_step=step_counter)

  strategy = tf.distribute.get_strategy()
  train_op = strategy.group(strategy.run(step))
  state = {v.op.name: v for v in optimizer.loss_scale_manager.variables()}
  return {"train_op": train_op, "scale": optimizer.get_loss_scale(),
          "step": step_counter,
          "variables": {"w": w, "momentum": optimizer.get_slot(w, "momentum"),
                        **state}}


def train(server: tf.distribute.Server, manager_names) -> dict:
  """Trains one model per manager, all in one graph and one session.

  One graph, because the collective keys of a new strategy start where those
  of the previous one did: graphs built one after the other on the same
  server would reuse keys, which the server refuses.

  Returns:
    {manager name: {"scales", "steps", "ws": one entry per step of the
    schedule; "w", "momentum" and each loss-scale state variable: its final
    value}}.
  """
  with tf.Graph().as_default():
    strategy = v1.distribute.experimental.MultiWorkerMirroredStrategy()
    poisoned_replica = v1.placeholder(tf.int32, [])
    with strategy.scope():
      models = {name: build(name, poisoned_replica) for name in manager_names}
      init = v1.global_variables_initializer()
    config = strategy.update_config_proto(v1.ConfigProto())
    with v1.Session(server.target, config=config) as sess:
      sess.run(init)
      history = {name: {"scales": [], "steps": [], "ws": []}
                 for name in manager_names}
      for replica in replicated.SCHEDULE:
        for name, model in models.items():
          sess.run(model["train_op"], {poisoned_replica: replica})
          for key, value in zip(("scales", "steps", "ws"), sess.run(
              (model["scale"], model["step"], model["variables"]["w"]))):
            history[name][key].append(value)
      return {name: {**{k: np.array(v) for k, v in history[name].items()},
                     **sess.run(model["variables"])}
              for name, model in models.items()}


def main(out_dir: str, *manager_names: str) -> None:
  server = start_server()
  task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
  for name, result in train(server, manager_names).items():
    np.savez(os.path.join(out_dir, f"{task}_{name}.npz"), **result)


if __name__ == "__main__":
  main(*sys.argv[1:])
