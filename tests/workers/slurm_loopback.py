"""A one-node Slurm on 127.0.0.1 for the tests: start it, stop it.

    python3 tests/workers/slurm_loopback.py start DIR
    SLURM_CONF=DIR/slurm.conf srun -n 2 python ...
    python3 tests/workers/slurm_loopback.py stop DIR

`start` writes a munge key, a `slurm.conf` and the daemons' state, logs and
pid files under DIR, then starts `munged`, `slurmctld` and `slurmd` (as the
user running it, which Slurm's daemons want to be root) and waits until the
node takes jobs. The daemons listen on free ports of 127.0.0.1 and answer
only clients that read DIR/slurm.conf; the system's Slurm and munge
configuration is not read or touched. Each job step gets reserved ports
(`MpiParams=ports=...`: Slurm sets `SLURM_STEP_RESV_PORTS` in every task).

`stop` cancels the jobs still running, ends the daemons whose pid files
are in DIR (only those) and waits until they are gone. Standard library
only: it runs before any virtual environment exists. Slurm 22.05 (Debian
12's `slurm-wlm`).
"""

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

# A name that resolves to no address: the tasks must not need it (one node:
# 127.0.0.1).
NODE = "loopback-node"
CPUS = 2
# The ports Slurm hands to job steps (SLURM_STEP_RESV_PORTS), away from the
# ones the tests pick (launch.FIRST_PORT onwards) and the ephemeral range.
RESERVED_PORTS = "12000-12999"
READY_SECONDS = 60
DAEMONS = ("slurmd", "slurmctld", "munged")  # In the order `stop` ends them.


def _free_port() -> int:
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]


def _config(run: pathlib.Path) -> str:
  return "\n".join([
      "ClusterName=mpoptimizer",
      f"SlurmctldHost={socket.gethostname().split('.')[0]}(127.0.0.1)",
      f"SlurmctldPort={_free_port()}",
      f"SlurmdPort={_free_port()}",
      "SlurmUser=root",
      "SlurmdUser=root",
      "AuthType=auth/munge",
      "CredType=cred/munge",
      f"AuthInfo=socket={run}/munge.socket",
      f"StateSaveLocation={run}/state",
      f"SlurmdSpoolDir={run}/spool",
      f"SlurmctldPidFile={run}/slurmctld.pid",
      f"SlurmdPidFile={run}/slurmd.pid",
      f"SlurmctldLogFile={run}/slurmctld.log",
      f"SlurmdLogFile={run}/slurmd.log",
      "ProctrackType=proctrack/linuxproc",
      "TaskPlugin=task/none",
      "SelectType=select/cons_tres",
      "SelectTypeParameters=CR_CPU",
      "JobAcctGatherType=jobacct_gather/none",
      "AccountingStorageType=accounting_storage/none",
      "MpiDefault=none",
      f"MpiParams=ports={RESERVED_PORTS}",
      "ReturnToService=2",
      f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs={CPUS} State=UNKNOWN",
      f"PartitionName=loopback Nodes={NODE} Default=YES MaxTime=INFINITE "
      "State=UP",
      ""])


def _run(*command: str, env=None) -> None:
  subprocess.run(command, check=True, env=env, stdin=subprocess.DEVNULL)


def _node_is_idle(env) -> bool:
  state = subprocess.run(
      ["sinfo", "--noheader", "--nodes", NODE, "--format", "%t"], env=env,
      capture_output=True, text=True, check=False).stdout.strip()
  return state in ("idle", "mix", "alloc")


def start(run: pathlib.Path) -> None:
  """Starts munged, slurmctld and slurmd on 127.0.0.1 with state in `run`."""
  run.mkdir(mode=0o700, parents=True, exist_ok=True)
  for sub in ("state", "spool"):
    (run / sub).mkdir(mode=0o700, exist_ok=True)
  key = run / "munge.key"
  key.write_bytes(os.urandom(1024))
  key.chmod(0o400)
  conf = run / "slurm.conf"
  conf.write_text(_config(run))
  env = dict(os.environ, SLURM_CONF=str(conf))
  _run("munged", f"--socket={run}/munge.socket", f"--key-file={key}",
       f"--pid-file={run}/munged.pid", f"--log-file={run}/munged.log",
       f"--seed-file={run}/munged.seed", "--force")
  _run("slurmctld", "-f", str(conf), "-c", env=env)
  _run("slurmd", "-f", str(conf), "-N", NODE, env=env)
  deadline = time.monotonic() + READY_SECONDS
  while not _node_is_idle(env):
    if time.monotonic() > deadline:
      logs = "\n".join(f"--- {name}.log\n" + _tail(run / f"{name}.log")
                       for name in DAEMONS)
      raise SystemExit(f"Slurm's node did not come up in {READY_SECONDS} s:"
                       f"\n{logs}")
    time.sleep(0.5)


def _tail(path: pathlib.Path, chars: int = 2000) -> str:
  return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  return True


def _cancel_jobs(run: pathlib.Path) -> None:
  """Cancels every job of this Slurm (its tasks end with them)."""
  env = dict(os.environ, SLURM_CONF=str(run / "slurm.conf"))
  if not (run / "slurmctld.pid").exists():
    return
  subprocess.run(["scancel", "--full", "--user", "root"], env=env,
                 capture_output=True, check=False)
  deadline = time.monotonic() + 30
  while time.monotonic() < deadline:
    jobs = subprocess.run(["squeue", "--noheader"], env=env,
                          capture_output=True, text=True, check=False)
    if jobs.returncode or not jobs.stdout.strip():
      return
    time.sleep(0.5)


def stop(run: pathlib.Path) -> None:
  """Cancels the jobs left, then ends the daemons `start` started in `run`
  (by their pid files)."""
  _cancel_jobs(run)
  for name in DAEMONS:
    pid_file = run / f"{name}.pid"
    if not pid_file.exists():
      continue
    pid = int(pid_file.read_text().split()[0])
    if _alive(pid):
      os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
      time.sleep(0.2)
    if _alive(pid):
      os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)  # slurmd removes its own.


if __name__ == "__main__":
  if len(sys.argv) != 3 or sys.argv[1] not in ("start", "stop"):
    raise SystemExit(__doc__)
  {"start": start, "stop": stop}[sys.argv[1]](pathlib.Path(sys.argv[2]))
