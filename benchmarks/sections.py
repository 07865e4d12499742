"""Sections of BENCHMARKS.md that one runner writes and the others keep.

`overhead.py` rewrites the file's head; `options.py`, `horovod_loopback.py`,
`bfloat16.py`, `check_readings.py`, `floor.py` (two sections) and
`scaling.py` each own a section between their markers, which the others
carry over as they stand.
"""

import os

OPTIONS_BEGIN = "<!-- options: written by benchmarks/options.py -->"
OPTIONS_END = "<!-- options: end -->"
HOROVOD_BEGIN = "<!-- horovod: written by benchmarks/horovod_loopback.py -->"
HOROVOD_END = "<!-- horovod: end -->"
BFLOAT16_BEGIN = "<!-- bfloat16: written by benchmarks/bfloat16.py -->"
BFLOAT16_END = "<!-- bfloat16: end -->"
READINGS_BEGIN = "<!-- readings: written by benchmarks/check_readings.py -->"
READINGS_END = "<!-- readings: end -->"
FLOOR_BEGIN = "<!-- floor: written by benchmarks/floor.py -->"
FLOOR_END = "<!-- floor: end -->"
MODELS_BEGIN = "<!-- models: written by benchmarks/floor.py --models -->"
MODELS_END = "<!-- models: end -->"


def _read(path: str) -> str:
  if not os.path.exists(path):
    return ""
  with open(path, encoding="utf-8") as f:
    return f.read()


def saved(path: str, begin: str, end: str) -> str:
  """The section from `begin` through `end` as `path` has it, or ""."""
  text = _read(path)
  if begin not in text or end not in text:
    return ""
  return begin + text.split(begin, 1)[1].split(end, 1)[0] + end


def replace(path: str, begin: str, end: str, section: str,
            before: str) -> None:
  """Puts `section` (which starts with `begin`, ends with `end`) into `path`:
  in place of the old one, else before the marker `before`, else at the end."""
  text = _read(path)
  old = saved(path, begin, end)
  if old:
    text = text.replace(old, section)
  elif before in text:
    head, tail = text.split(before, 1)
    text = head + section + "\n\n" + before + tail
  else:
    text = text.rstrip("\n") + ("\n\n" if text else "") + section + "\n"
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
