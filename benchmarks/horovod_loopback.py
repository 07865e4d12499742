"""What `mp_optimizer.horovod` costs a step: two processes on loopback.

    python benchmarks/horovod_loopback.py [--steps 200] [--output BENCHMARKS.md]
        [--smoke]

One float16 model (LAYERS matmuls of WIDTH x WIDTH on a batch of BATCH, a
loss-scaling optimizer around Momentum with a dynamic scale), timed as the
median step over `--steps` steps after a warm-up, in four set-ups:

* one process, an in-process `tf.compat.v1.Session` (no scale-out at all);
* two ranks under `mpirun -np 2`, each training alone in a session on its
  server (the routed session, no reduction): "without the distributed
  optimizer";
* the same two ranks with `LossScaleOptimizer(hvd.DistributedOptimizer(opt))`
  (these two are timed in ROUNDS alternating rounds, so load drift hits
  both alike);
* two workers of `MultiWorkerMirroredStrategy` (`TF_CONFIG`), the same model
  in `strategy.run`, a `Session` on each worker's server.

Rank 0 (worker 0) reports. The table goes to the console and into the
Horovod section of the output file (`benchmarks.sections`), with the load
average beside it: six engineers share this machine's two cores, so the
figures are what one run saw.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # After the sys.path line above, as all below.
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
import mp_optimizer.horovod as hvd
from benchmarks import scaling_report
from benchmarks import sections

v1 = tf.compat.v1
SIZES = {"full": (8, 256, 64), "smoke": (2, 8, 4)}  # LAYERS, WIDTH, BATCH.
WARMUP = 5
ROUNDS = 10
TIMEOUT_SECONDS = 600


def loss_of(layers: int, width: int, batch: int) -> tf.Tensor:
  """The model: float16 matmuls and ReLUs, a float32 loss."""
  rng = np.random.RandomState(0)
  h = tf.constant(rng.randn(batch, width).astype(np.float16))
  for i in range(layers):
    w = v1.get_variable(f"w{i}", initializer=(
        rng.randn(width, width) / np.sqrt(width)).astype(np.float32))
    h = tf.nn.relu(tf.matmul(h, tf.cast(w, tf.float16)))
  return tf.reduce_mean(tf.square(tf.cast(h, tf.float32)))


def optimizer(distributed: bool) -> v1.train.Optimizer:
  inner = v1.train.MomentumOptimizer(1e-3, 0.9)
  if distributed:
    inner = hvd.DistributedOptimizer(inner)
  return mp_optimizer.LossScaleOptimizer(inner,
                                         managers.DynamicLossScale(2**10))


def step_seconds(sess, train_op, steps: int) -> list:
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    sess.run(train_op)
    times.append(time.perf_counter() - start)
  return times


def median_ms(sess, train_op, steps: int) -> float:
  step_seconds(sess, train_op, WARMUP)
  return 1000 * float(np.median(step_seconds(sess, train_op, steps)))


def prepared(size, distributed: bool):
  """A session (routed to this rank's server) and the train op, warmed up."""
  with tf.Graph().as_default() as graph:
    train_op = optimizer(distributed).minimize(loss_of(*size))
    init = v1.global_variables_initializer()
    broadcast = hvd.broadcast_global_variables(0) if distributed else None
  sess = v1.Session(graph=graph)
  sess.run(init)
  if broadcast is not None:
    sess.run(broadcast)
  step_seconds(sess, train_op, WARMUP)
  return sess, train_op


def run_interleaved(size, steps: int) -> dict:
  """Both rank set-ups, timed in ROUNDS alternating rounds."""
  contenders = {"2 ranks, each alone": prepared(size, False),
                "2 ranks, hvd.DistributedOptimizer": prepared(size, True)}
  times = {label: [] for label in contenders}
  for _ in range(ROUNDS):
    for label, (sess, train_op) in contenders.items():
      times[label] += step_seconds(sess, train_op, max(1, steps // ROUNDS))
  for sess, _ in contenders.values():
    sess.close()
  return {label: 1000 * float(np.median(t)) for label, t in times.items()}


def run_plain(size, steps: int) -> float:
  with tf.Graph().as_default():
    train_op = optimizer(False).minimize(loss_of(*size))
    with v1.Session() as sess:
      sess.run(v1.global_variables_initializer())
      return median_ms(sess, train_op, steps)


def run_strategy(size, steps: int) -> float:
  config = json.loads(os.environ["TF_CONFIG"])
  server_config = v1.ConfigProto()
  server_config.experimental.collective_group_leader = (
      "/job:worker/replica:0/task:0")
  server = tf.distribute.Server(
      tf.train.ClusterSpec(config["cluster"]), job_name="worker",
      task_index=config["task"]["index"], config=server_config, start=True)
  with tf.Graph().as_default():
    strategy = v1.distribute.experimental.MultiWorkerMirroredStrategy()
    with strategy.scope():
      opt = optimizer(distributed=False)
      train_op = strategy.group(strategy.run(
          lambda: opt.minimize(loss_of(*size))))
      init = v1.global_variables_initializer()
    session_config = strategy.update_config_proto(v1.ConfigProto())
    with v1.Session(server.target, config=session_config) as sess:
      sess.run(init)
      return median_ms(sess, train_op, steps)


def run_role(role: str, size, steps: int, out: str) -> None:
  """One process of one set-up; rank 0 writes {label: ms} to `out`."""
  if role == "local":
    result, rank = {"one process": run_plain(size, steps)}, 0
  elif role == "hvd":
    v1.disable_eager_execution()
    hvd.init()
    rank = hvd.rank()
    result = run_interleaved(size, steps)
  else:
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    result = {"2 workers, MultiWorkerMirroredStrategy": run_strategy(size,
                                                                     steps)}
  if rank == 0:
    with open(out, "w", encoding="utf-8") as f:
      json.dump(result, f)


def _tf_configs() -> list:
  """The `TF_CONFIG` of each of two workers on free loopback ports."""
  sockets = [socket.socket() for _ in range(2)]
  for sock in sockets:
    sock.bind(("127.0.0.1", 0))
  cluster = {"worker": [f"127.0.0.1:{s.getsockname()[1]}" for s in sockets]}
  for sock in sockets:
    sock.close()
  return [json.dumps({"cluster": cluster,
                      "task": {"type": "worker", "index": index}})
          for index in range(2)]


def _start(role: str, args, out: str, launcher=(), env=None):
  """Starts one process of `role` (with its launcher) in its own group."""
  command = [*launcher, sys.executable, os.path.abspath(__file__), "--role",
             role, "--steps", str(args.steps), "--result", out]
  if args.smoke:
    command.append("--smoke")
  return subprocess.Popen(  # pylint: disable=consider-using-with
      command, env={**os.environ, "PYTHONPATH": ROOT, **(env or {})},
      start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
  """Kills what is left of `process`'s group (mpirun's ranks included)."""
  if process.poll() is None:
    os.killpg(process.pid, signal.SIGKILL)
  process.wait()


def measure(args) -> dict:
  """Runs the four set-ups one after the other; {label: median ms}."""
  results = {}
  as_root = ({"OMPI_ALLOW_RUN_AS_ROOT": "1",
              "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
             if os.geteuid() == 0 else {})
  mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
  with tempfile.TemporaryDirectory() as scratch:
    # Each set-up's processes start once the one before has ended, so no
    # two set-ups share the cores.
    jobs = {"local": lambda: [_start("local", args,
                                     os.path.join(scratch, "local"))],
            "hvd": lambda: [_start("hvd", args, os.path.join(scratch, "hvd"),
                                   launcher=[mpirun, "-np", "2"],
                                   env=as_root)],
            "mwms": lambda: [_start("mwms", args,
                                    os.path.join(scratch, "mwms"),
                                    env={"TF_CONFIG": tf_config})
                             for tf_config in _tf_configs()]}
    for role, start in jobs.items():
      processes = start()
      for process in processes:
        try:
          process.wait(timeout=TIMEOUT_SECONDS)
        finally:
          _stop(process)
      if any(p.returncode for p in processes):
        raise RuntimeError(f"the {role} set-up failed")
      with open(os.path.join(scratch, role), encoding="utf-8") as f:
        results.update(json.load(f))
  return results


def section(size, steps: int, results: dict, load) -> str:
  base = results["one process"]
  rows = [f"| {label} | {ms:.2f} | {ms / base:.2f} |"
          for label, ms in results.items()]
  layers, width, batch = size
  return "\n".join([
      sections.HOROVOD_BEGIN, "## Two processes on loopback: mp_optimizer.horovod", "",
      f"{layers} float16 matmuls of {width}x{width}, batch {batch}, "
      "`LossScaleOptimizer` around Momentum; median of "
      f"{steps} steps, TF {tf.__version__}, on one machine; the set-ups "
      "ran one after the other (the two rank set-ups in alternating "
      f"rounds), load average {load[0]:.2f} at the start "
      f"and {load[1]:.2f} at the end (`benchmarks/horovod_loopback.py`).",
      "", "| set-up | median step (ms) | ÷ one process |", "|---|---|---|",
      *rows, "", sections.HOROVOD_END])


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--steps", type=int, default=200)
  parser.add_argument("--output", default="BENCHMARKS.md")
  parser.add_argument("--smoke", action="store_true")
  parser.add_argument("--role", choices=("local", "hvd", "mwms"))
  parser.add_argument("--result")
  args = parser.parse_args()
  size = SIZES["smoke" if args.smoke else "full"]
  if args.role:
    run_role(args.role, size, args.steps, args.result)
    return 0
  load_start = os.getloadavg()[0]
  results = measure(args)
  text = section(size, args.steps, results, (load_start, os.getloadavg()[0]))
  print(text)
  sections.replace(os.path.join(ROOT, args.output), sections.HOROVOD_BEGIN,
                   sections.HOROVOD_END, text, scaling_report.BEGIN)
  return 0


if __name__ == "__main__":
  sys.exit(main())
