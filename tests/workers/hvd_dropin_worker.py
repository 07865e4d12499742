"""One rank of `mpirun -np 2 python hvd_dropin_worker.py OUT_DIR [CASE ...]`.

(Or started with `TF_CONFIG`, one process per rank.) Runs the CASEs named,
or all of them.

A Horovod-style script on `mp_optimizer.horovod`: `hvd.init()`, then every
session is the script's own (`tf.compat.v1.Session()`,
`MonitoredTrainingSession`), with no target. Writes
OUT_DIR/<rank>_<case>.npz for each case, each its own graph:

* "collectives": `allreduce` (Average, Sum, fp16), `allgather` of tensors
  of different lengths, `broadcast` from rank 1, the reported group, and
  the TCP sockets this process listens on.
* "interactive": `allreduce` (Average) evaluated in a
  `tf.compat.v1.InteractiveSession()` (`Tensor.eval()`), and its target.
* "schedule_<order>": the scenario of `replicated` (rank r is replica r,
  float16 model, one rank's loss poisoned at some steps) with our optimizer
  outside (`LossScaleOptimizer(hvd.DistributedOptimizer(opt))`) or inside
  (`hvd.DistributedOptimizer(LossScaleOptimizer(opt))`), with precision
  telemetry: scale, global_step, skip count, w and the telemetry after
  every step, and the final variables.
* "tiny_<order>": gradients TINY_GRADIENTS sent with `Compression.fp16` in
  each order; w after one SGD step (learning rate 1) from zero.
* "sparse_<mode>": an embedding's `tf.IndexedSlices` gradient, gathered
  (default) or made dense (`sparse_as_dense`); the table after one step.
* "mts": `MonitoredTrainingSession` with `BroadcastGlobalVariablesHook(0)`
  on weights initialized differently on each rank; the weights after the
  broadcast and after three steps; what a second session finds
  uninitialized.
"""

import contextlib
import os
import sys

import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
import mp_optimizer.horovod as hvd
from tests.workers import replicated

v1 = tf.compat.v1
TINY_GRADIENTS = np.array([0.5e-8, 1e-8, 2e-8], np.float32)
TABLE = np.arange(12, dtype=np.float32).reshape(6, 2)
# Rank r looks up IDS[r] and weighs the rows by WEIGHTS[r].
IDS = ([0, 2, 2], [2, 5])
WEIGHTS = (np.float32([[1, 2], [3, 4], [5, 6]]), np.float32([[7, 8], [9, 10]]))
ORDERS = ("ours_outside", "hvd_outside")


def rank_values(rank: int) -> np.ndarray:
  """What rank `rank` reduces in "collectives"."""
  return np.float32([1.5, -2.0, 3.25]) * (rank + 1)


def listening_sockets() -> np.ndarray:
  """[port, 1 if on every interface else 0] of each TCP socket this process
  listens on (Linux: /proc/net/tcp*, matched by the socket's inode)."""
  inodes = set()
  for fd in os.listdir("/proc/self/fd"):
    with contextlib.suppress(OSError):
      target = os.readlink(f"/proc/self/fd/{fd}")
      if target.startswith("socket:["):
        inodes.add(target[8:-1])
  found = []
  for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    with open(table, encoding="ascii") as lines:
      for line in list(lines)[1:]:
        fields = line.split()
        address, port = fields[1].split(":")
        if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN.
          found.append([int(port, 16), int(set(address) == {"0"})])
  return np.array(found, np.int64).reshape(-1, 2)


def run_collectives() -> dict:
  mine = tf.constant(rank_values(hvd.rank()))
  fetches = {
      "average": hvd.allreduce(mine),
      "sum": hvd.allreduce(mine, op=hvd.Sum),
      "fp16": hvd.allreduce(mine * 1e-3, compression=hvd.Compression.fp16),
      "gathered": hvd.allgather(tf.fill([hvd.rank() + 1, 2], hvd.rank())),
      "broadcast": hvd.broadcast(mine, root_rank=1),
  }
  with v1.Session() as sess:
    result = sess.run(fetches)
  result["group"] = np.array([hvd.rank(), hvd.size(), hvd.local_rank(),
                              hvd.local_size()])
  result["listening"] = listening_sockets()
  return result


def run_interactive() -> dict:
  average = hvd.allreduce(tf.constant(rank_values(hvd.rank())))
  sess = v1.InteractiveSession()
  try:
    return {"average": average.eval(),
            "target": np.array(tf.compat.as_str(sess.sess_str))}
  finally:
    sess.close()


def wrap(order: str, inner, manager, telemetry: bool = False, **options):
  distributed = lambda opt: hvd.DistributedOptimizer(opt, **options)
  scaled = lambda opt: mp_optimizer.LossScaleOptimizer(
      opt, manager, precision_telemetry=telemetry)
  if order == "ours_outside":
    return scaled(distributed(inner))
  return distributed(scaled(inner))


def run_schedule(order: str) -> dict:
  poisoned_replica = v1.placeholder(tf.int32, [])
  w = v1.get_variable("w", initializer=replicated.INITIAL_W)
  global_step = v1.train.get_or_create_global_step()
  x, y = replicated.replica_data(hvd.rank())
  poison = tf.where(tf.equal(hvd.rank(), poisoned_replica), np.inf, 1.0)
  inner = v1.train.MomentumOptimizer(replicated.LEARNING_RATE,
                                     replicated.MOMENTUM)
  opt = wrap(order, inner, replicated.MANAGERS["tf2"](), telemetry=True)
  train_op = opt.minimize(replicated.loss(w, x, y) * poison,
                          global_step=global_step)
  telemetry = {f"telemetry.{name}": value for name, value
               in mp_optimizer.signals.precision().items() if name != "groups"}
  history = {"scales": [], "steps": [], "skips": [], "ws": [], **{
      name: [] for name in telemetry}}
  tracked = (mp_optimizer.signals.loss_scale(), global_step,
             mp_optimizer.skipped_steps(), w, *telemetry.values())
  with v1.Session() as sess:
    sess.run(v1.global_variables_initializer())
    sess.run(hvd.broadcast_global_variables(0))
    for replica in replicated.SCHEDULE:
      sess.run(train_op, {poisoned_replica: replica})
      for key, value in zip(history, sess.run(tracked)):
        history[key].append(value)
    final = sess.run({v.op.name.replace("/", "."): v
                      for v in v1.global_variables()})
  return {**history, **final}


def run_tiny(order: str) -> dict:
  w = v1.get_variable("w", initializer=np.zeros(3, np.float32))
  opt = wrap(order, v1.train.GradientDescentOptimizer(1.0),
             managers.FixedLossScaleManager(2**15),
             compression=hvd.Compression.fp16)
  train_op = opt.minimize(tf.reduce_sum(w * TINY_GRADIENTS))
  with v1.Session() as sess:
    sess.run(v1.global_variables_initializer())
    sess.run(train_op)
    return {"w": sess.run(w)}


def run_sparse(mode: str) -> dict:
  table = v1.get_variable("table", initializer=TABLE)
  rows = tf.nn.embedding_lookup(table, IDS[hvd.rank()])
  opt = hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(1.0),
                                 sparse_as_dense=mode == "dense")
  grads_and_vars = opt.compute_gradients(
      tf.reduce_sum(rows * WEIGHTS[hvd.rank()]))
  train_op = opt.apply_gradients(grads_and_vars)
  with v1.Session() as sess:
    sess.run(v1.global_variables_initializer())
    sess.run(train_op)
    return {"table": sess.run(table),
            "sparse": np.array(isinstance(grads_and_vars[0][0],
                                          tf.IndexedSlices))}


def run_mts() -> dict:
  w = v1.get_variable("w", shape=[4, 2], initializer=tf.constant_initializer(
      float(hvd.rank() + 1)))
  global_step = v1.train.get_or_create_global_step()
  x, y = replicated.replica_data(hvd.rank())
  opt = mp_optimizer.LossScaleOptimizer(
      hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(0.05)),
      managers.ExponentialUpdateLossScaleManager(2**10, 2))
  train_op = opt.minimize(replicated.loss(w, x, y), global_step=global_step)
  history = []
  with v1.train.MonitoredTrainingSession(
      hooks=[hvd.BroadcastGlobalVariablesHook(0)]) as sess:
    history.append(sess.run(w))
    for _ in range(3):
      sess.run(train_op)
    history.append(sess.run(w))
  with v1.Session() as sess:
    uninitialized = sess.run(v1.report_uninitialized_variables()).astype(str)
  return {"ws": np.array(history), "uninitialized": uninitialized}


def main(out_dir: str, *names: str) -> None:
  v1.disable_eager_execution()
  hvd.init()
  cases = {"collectives": run_collectives, "interactive": run_interactive,
           "mts": run_mts}
  for order in ORDERS:
    cases[f"schedule_{order}"] = lambda order=order: run_schedule(order)
    cases[f"tiny_{order}"] = lambda order=order: run_tiny(order)
  for mode in ("gathered", "dense"):
    cases[f"sparse_{mode}"] = lambda mode=mode: run_sparse(mode)
  for name, run in cases.items():
    if names and name not in names:
      continue
    with tf.Graph().as_default():
      result = run()
    np.savez(os.path.join(out_dir, f"{hvd.rank()}_{name}.npz"), **result)


if __name__ == "__main__":
  main(*sys.argv[1:])
