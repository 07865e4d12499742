"""`mp_optimizer.horovod` in tasks that a real Slurm's `srun` starts.

`make test-slurm` starts a one-node Slurm on 127.0.0.1
(`tests/workers/slurm_loopback.py`: `MpiParams=ports=12000-12999`, so each
job step gets reserved ports) and runs this module with `SLURM_CONF` naming
it. The script of the `mpirun` test (`hvd_dropin_worker.py`) runs as
`srun -n 2` and as `mpirun -np 2`; each rank's results must be the same
under both launchers. Other jobs check which launcher wins when two set
their variables, the ports' fallback and the errors.

The jobs run only under MP_OPTIMIZER_REQUIRE_SLURM=1, which `make
test-slurm` sets beside the Slurm it started: elsewhere (`make test`) each
test that runs a job is skipped with that reason, so a suite never submits
jobs to a cluster it happens to find. Under it, a missing `srun` or a
controller that does not answer fails the test, so a missing Slurm cannot
pass for a green run.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import unittest
import uuid

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tests.scale_out import test_horovod_dropin as dropin
from tests.workers import hvd_dropin_worker as worker
from tests.workers import launch

REQUIRE = "MP_OPTIMIZER_REQUIRE_SLURM"
RANKS = dropin.RANKS
CASES = ("collectives", "schedule_ours_outside", "schedule_hvd_outside",
         "mts")
# What differs between launchers by design: the ports each server took.
LAUNCHER_SPECIFIC = ("listening",)


def slurm_missing() -> str:
  """Why no job can run here, or "" when a Slurm controller answers."""
  if shutil.which("srun") is None:
    return ("`srun` is not on PATH: `make test-slurm` installs Slurm "
            "(slurm-wlm, munge) and starts it on 127.0.0.1")
  try:
    ping = subprocess.run(["scontrol", "ping"], capture_output=True,
                          text=True, timeout=60, check=False)
  except subprocess.TimeoutExpired:
    return "`scontrol ping` did not answer in 60 s"
  if ping.returncode != 0 or "UP" not in ping.stdout:
    return (f"no Slurm controller answers `scontrol ping` (SLURM_CONF="
            f"{os.environ.get('SLURM_CONF')!r}): `make test-slurm` starts "
            f"one. It said: {(ping.stdout + ping.stderr).strip()[-300:]}")
  return ""


def require_slurm() -> None:
  """Skips outside `make test-slurm`; fails there without a Slurm."""
  if os.environ.get(REQUIRE) != "1":
    raise unittest.SkipTest(
        f"runs under `make test-slurm` only ({REQUIRE}=1), which starts its "
        "own Slurm on 127.0.0.1: a suite submits no jobs to a cluster it "
        "finds")
  reason = slurm_missing()
  if reason:
    raise AssertionError(f"{REQUIRE}=1 and {reason}")


def reserved_range() -> range:
  """The ports Slurm reserves for steps (`MpiParams=ports=LOW-HIGH`)."""
  config = subprocess.run(["scontrol", "show", "config"], capture_output=True,
                          text=True, timeout=60, check=True).stdout
  low, high = re.search(r"MpiParams\s*=\s*ports=(\d+)-(\d+)", config).groups()
  return range(int(low), int(high) + 1)


class _SlurmJobs(parameterized.TestCase):
  """Starts jobs with `srun`, each named so that they can be cancelled."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    require_slurm()
    cls.name = f"mp_optimizer_test.{uuid.uuid4().hex[:12]}"
    cls.addClassCleanup(subprocess.run, ["scancel", "--name", cls.name],
                        capture_output=True, check=False)
    cls.logs = launch.scratch_dir(cls.addClassCleanup)

  @classmethod
  def srun(cls, out_dir: str, options: tuple, cases: tuple = (),
           env=None) -> launch.Worker:
    """`srun OPTIONS python hvd_dropin_worker.py OUT_DIR CASES...`."""
    launcher = ["srun", "--job-name", cls.name, "--kill-on-bad-exit=1",
                *options]
    return launch.Worker("hvd_dropin_worker.py", [out_dir, *cases], cls.logs,
                         env=env, launcher=launcher)

  def assert_succeeded(self, finished) -> None:
    self.assertEqual([f.returncode for f in finished], [0] * len(finished),
                     launch.describe(finished))


def _results(out_dir: str, case: str, ranks: int = RANKS) -> list:
  load = dropin._load  # pylint: disable=protected-access
  return [load(os.path.join(out_dir, f"{rank}_{case}.npz"))
          for rank in range(ranks)]


class SrunTest(_SlurmJobs):
  """`srun -n 2` and `mpirun -np 2`, the same script, side by side."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dirs = {launcher: launch.scratch_dir(cls.addClassCleanup)
                for launcher in ("srun", "mpirun")}
    env = dropin.AS_ROOT if os.geteuid() == 0 else {}
    cls.finished = launch.wait_all([
        cls.srun(cls.dirs["srun"], ("--ntasks", str(RANKS)), CASES),
        launch.Worker("hvd_dropin_worker.py", [cls.dirs["mpirun"], *CASES],
                      cls.logs, env=env,
                      launcher=[dropin.MPIRUN, "-np", str(RANKS)]),
    ], dropin.TIMEOUT_SECONDS)

  def results(self, launcher: str, case: str) -> list:
    self.assert_succeeded(self.finished)
    return _results(self.dirs[launcher], case)

  def test_rank_and_local_rank_come_from_the_slurm_step(self):
    for rank, result in enumerate(self.results("srun", "collectives")):
      self.assertEqual(list(result["group"]), [rank, RANKS, rank, RANKS])

  def test_each_rank_serves_on_a_port_slurm_reserved_for_the_step(self):
    ports = [result["listening"][:, 0].tolist()
             for result in self.results("srun", "collectives")]
    self.assertEqual([len(p) for p in ports], [1] * RANKS, ports)
    self.assertNotEqual(ports[0], ports[1])
    for port in ports:
      self.assertIn(port[0], reserved_range())

  @parameterized.named_parameters((case, case) for case in CASES)
  def test_every_rank_gets_what_it_gets_under_mpirun(self, case):
    for under_srun, under_mpirun in zip(self.results("srun", case),
                                        self.results("mpirun", case)):
      names = sorted(set(under_mpirun) - set(LAUNCHER_SPECIFIC))
      self.assertEqual(sorted(set(under_srun) - set(LAUNCHER_SPECIFIC)),
                       names)
      for name in names:
        self.assertEqual(under_srun[name].tobytes(),
                         under_mpirun[name].tobytes(), name)

  @parameterized.named_parameters((case, case) for case in CASES[1:])
  def test_the_ranks_are_bit_identical(self, case):
    ranks = self.results("srun", case)
    for name in ranks[0]:
      self.assertEqual(ranks[0][name].tobytes(), ranks[1][name].tobytes(),
                       name)

  def test_the_collectives_reduce_every_ranks_values(self):
    values = [worker.rank_values(rank) for rank in range(RANKS)]
    for result in self.results("srun", "collectives"):
      np.testing.assert_array_equal(result["average"],
                                    (values[0] + values[1]) / 2)
      np.testing.assert_array_equal(result["broadcast"], values[1])


class PrecedenceTest(_SlurmJobs):
  """A process that two launchers' variables name: which one it follows."""

  def run_jobs(self, workers: list) -> list:
    finished = launch.wait_all(workers, dropin.TIMEOUT_SECONDS)
    self.assert_succeeded(finished)
    return finished

  def test_mpirun_inside_an_allocation_wins(self):
    # `mpirun` starts its daemon on the allocation's node with `srun` (the
    # node's name is not this host's), so each rank it starts also has the
    # variables of that one-task step.
    env = dropin.AS_ROOT if os.geteuid() == 0 else {}
    in_allocation = ["salloc", "--job-name", self.name, "--ntasks",
                     str(RANKS), dropin.MPIRUN, "-np", str(RANKS)]
    both = subprocess.run(
        [*in_allocation, "printenv", "OMPI_COMM_WORLD_SIZE",
         "SLURM_STEP_NUM_TASKS"], env=launch.worker_env(env),
        capture_output=True, text=True, timeout=dropin.TIMEOUT_SECONDS,
        check=False)
    self.assertEqual(both.stdout.split(), ["2", "1"] * RANKS, both.stderr)
    out_dir = launch.scratch_dir(self.addCleanup)
    self.run_jobs([launch.Worker(
        "hvd_dropin_worker.py", [out_dir, "collectives"], self.logs, env=env,
        launcher=in_allocation)])
    for rank, result in enumerate(_results(out_dir, "collectives")):
      self.assertEqual(list(result["group"]), [rank, RANKS, rank, RANKS])

  def test_tf_config_wins_over_the_slurm_step(self):
    # Two one-task steps, each told by TF_CONFIG that it is one of two.
    out_dir = launch.scratch_dir(self.addCleanup)
    ports = launch.free_ports(RANKS)
    self.run_jobs([
        self.srun(out_dir, ("--ntasks", "1"), ("collectives",),
                  env={"TF_CONFIG": launch.tf_config(ports, rank)})
        for rank in range(RANKS)])
    for rank, result in enumerate(_results(out_dir, "collectives")):
      self.assertEqual(list(result["group"]), [rank, RANKS, rank, RANKS])
      self.assertIn([ports[rank], 1], result["listening"].tolist())


  def test_a_batch_script_without_srun_is_one_rank(self):
    # The batch script's shell has SLURM_PROCID and SLURM_NTASKS=2, but no
    # step of its own: `python` run there is one process.
    out_dir = launch.scratch_dir(self.addCleanup)
    command = " ".join(shlex.quote(part) for part in (
        sys.executable, str(launch.WORKERS_DIR / "hvd_dropin_worker.py"),
        out_dir, "interactive"))
    log = os.path.join(self.logs, "batch.log")
    batch = subprocess.run(
        ["sbatch", "--wait", "--job-name", self.name, "--ntasks", str(RANKS),
         "--output", log, "--wrap", f"exec {command}"],
        env=launch.worker_env(), capture_output=True, text=True,
        timeout=dropin.TIMEOUT_SECONDS, check=False)
    with open(log, encoding="utf-8", errors="replace") as output:
      self.assertEqual(batch.returncode, 0, batch.stderr + output.read())
    result, = _results(out_dir, "interactive", ranks=1)
    np.testing.assert_array_equal(result["average"], worker.rank_values(0))
    self.assertEqual(str(result["target"]), "")


class PortsTest(_SlurmJobs):
  """Where the ports come from when the step has none reserved."""

  def test_the_fallback_variable_names_the_ports_by_local_rank(self):
    out_dir = launch.scratch_dir(self.addCleanup)
    ports = launch.free_ports(RANKS)
    finished = launch.wait_all([self.srun(
        out_dir, ("--ntasks", str(RANKS), "--resv-ports=0"), ("collectives",),
        env={"MP_OPTIMIZER_SLURM_PORTS": ",".join(map(str, ports))})],
                               dropin.TIMEOUT_SECONDS)
    self.assert_succeeded(finished)
    for rank, result in enumerate(_results(out_dir, "collectives")):
      self.assertEqual(list(result["group"]), [rank, RANKS, rank, RANKS])
      self.assertEqual(result["listening"].tolist(), [[ports[rank], 1]])
      np.testing.assert_array_equal(result["broadcast"],
                                    worker.rank_values(1))

  def test_one_task_needs_no_ports_and_starts_no_server(self):
    out_dir = launch.scratch_dir(self.addCleanup)
    finished = launch.wait_all([self.srun(
        out_dir, ("--ntasks", "1", "--resv-ports=0"), ("interactive",))],
                               dropin.TIMEOUT_SECONDS)
    self.assert_succeeded(finished)
    result, = _results(out_dir, "interactive", ranks=1)
    # Rank 0 of 1 averages its own values, in a session with no target.
    np.testing.assert_array_equal(result["average"], worker.rank_values(0))
    self.assertEqual(str(result["target"]), "")

  @parameterized.named_parameters(
      ("none_reserved", ("--resv-ports=0",), {},
       r"`SLURM_STEP_RESV_PORTS` is not set .* neither is "
       r"`MP_OPTIMIZER_SLURM_PORTS`"),
      ("fewer_than_tasks", ("--resv-ports=1",), {},
       r"needs 2 TCP ports on each node .*, got 1 in "
       r"`SLURM_STEP_RESV_PORTS`: '\d+'\."),
      ("malformed", ("--resv-ports=0",),
       {"MP_OPTIMIZER_SLURM_PORTS": "12000-"},
       r"`MP_OPTIMIZER_SLURM_PORTS` must list TCP ports as `12000-12003` or "
       r"`12000,12005`, got '12000-'"),
  )
  def test_init_refuses_a_step_without_its_ports(self, options, env,
                                                 message):
    out_dir = launch.scratch_dir(self.addCleanup)
    finished, = launch.wait_all([self.srun(
        out_dir, ("--ntasks", str(RANKS), *options), ("collectives",),
        env=env)], dropin.TIMEOUT_SECONDS)
    self.assertIsNotNone(finished.returncode, finished.log)
    self.assertNotEqual(finished.returncode, 0, finished.log)
    self.assertRegex(finished.log, "ValueError: .*" + message)
    self.assertEqual(os.listdir(out_dir), [])


class MakeTargetTest(parameterized.TestCase):
  """`make test-slurm`, read with `make -n` (nothing runs, no Slurm needed)."""

  def test_it_stops_the_daemons_whatever_happens_and_requires_slurm(self):
    commands = subprocess.run(
        ["make", "-n", "--no-print-directory", "test-slurm"],
        cwd=launch.REPO_ROOT, capture_output=True, text=True, timeout=60,
        check=True).stdout
    commands = re.sub(r"\\\n\s*", "", commands)  # One line per command.
    trap = re.search(r"trap '[^']*slurm_loopback\.py stop [^']*' EXIT",
                     commands)
    self.assertIsNotNone(trap, commands)
    self.assertLess(trap.start(), commands.index("slurm_loopback.py start"))
    self.assertIn(f"{REQUIRE}=1", commands)
    self.assertRegex(
        commands, r"for version in 2\.21 2\.15; do .*\.venv/tf\$version/bin/"
        r"python -m pytest tests/scale_out/test_horovod_slurm\.py")


if __name__ == "__main__":
  tf.test.main()
