"""This process's memory, and the machine's, as the benchmarks size pools.

Linux only (read from /proc); elsewhere the readings are NaN, and
`trim_heap` does nothing without glibc.
"""

import ctypes


def _proc_mb(path: str, key: str) -> float:
  """The value of `key` (given in kB) in a /proc status file, in MB."""
  try:
    with open(path, encoding="utf-8") as status:
      for line in status:
        if line.startswith(key + ":"):
          return int(line.split()[1]) / 1024
  except OSError:
    pass
  return float("nan")


def rss_mb() -> float:
  """Resident memory of this process, in MB."""
  return _proc_mb("/proc/self/status", "VmRSS")


def available_mb() -> float:
  """Memory the machine can still give without swapping, in MB."""
  return _proc_mb("/proc/meminfo", "MemAvailable")


def trim_heap() -> None:
  """Hands the heap's free pages back to the system (glibc's malloc_trim).

  Graphs and Sessions closed earlier in the process leave free heap that the
  next build reuses unseen: without this, the resident memory a build adds,
  and the memory available, would count the reused pages as free.
  """
  try:
    ctypes.CDLL("libc.so.6").malloc_trim(0)
  except (OSError, AttributeError):  # Not glibc: nothing to hand back.
    pass
