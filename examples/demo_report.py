"""The digits demo's words, computed from its numbers: verdict, table, README.

Everything here reads a results dict (what `examples/digits_demo.py`
measured) and needs no TensorFlow:

* `verdict`: did the run show the demo's story, with the thresholds of the
  demo's promise (unscaled float16 more than 5 points below float32, scaled
  float16 and bfloat16 no more than 1 point below it)?
* `markdown`: the table and the line saying where it was measured; the README
  holds it between `BEGIN` and `END` (`update_readme` writes it there);
* `cpu`: the CPU, as the line under the table names it;
* `tensorboard_command`: a command that starts TensorBoard as printed;
* `png_results`: the results a demo picture carries in its PNG metadata.
"""

import importlib.util
import json
import math
import os
import pathlib
import platform
import re
import shlex
import sys
from typing import Dict, List, Optional, Tuple

RUNS = ("fp32", "fp16", "fp16 + loss scaling", "bf16")
UNSCALED_GAP = 5.0  # Points unscaled fp16 must fall below fp32, at least.
SCALED_GAP = 1.0  # Points scaled fp16 (and bf16) may fall below fp32, at most.
PNG_KEY = "digits_demo_results"
BEGIN = ("<!-- digits demo results: written by `python examples/digits_demo.py "
         "--readme README.md`, do not edit -->")
END = "<!-- end of digits demo results -->"


def by_name(results: dict) -> Dict[str, dict]:
  """Returns the results' rows by run name; each of `RUNS` must be there,
  unless `results["not_run"]` says why it was not run."""
  rows = {row["name"]: row for row in results["rows"]}
  missing = [name for name in RUNS
             if name not in rows and name not in results.get("not_run", {})]
  if missing:
    raise ValueError(f"the results have no row for {', '.join(missing)}")
  return rows


def problems(results: dict) -> List[str]:
  """What keeps the run from showing the story; empty if it shows it."""
  rows = by_name(results)
  fp32, fp16, scaled = (rows[name]["accuracy"] for name in RUNS[:3])
  bf16 = rows["bf16"]["accuracy"] if "bf16" in rows else fp32
  found = []
  if fp32 - fp16 <= UNSCALED_GAP:
    found.append(
        f"float16 without loss scaling reached {fp16:.2f}%, within "
        f"{UNSCALED_GAP:g} points of float32's {fp32:.2f}%")
  if fp32 - scaled > SCALED_GAP:
    found.append(
        f"float16 with loss scaling reached {scaled:.2f}%, more than "
        f"{SCALED_GAP:g} point below float32's {fp32:.2f}%")
  if fp32 - bf16 > SCALED_GAP:
    found.append(
        f"bfloat16 reached {bf16:.2f}%, more than {SCALED_GAP:g} point below "
        f"float32's {fp32:.2f}%")
  return found


def verdict(results: dict) -> Tuple[bool, str]:
  """Returns (whether the run showed the story, a sentence that says so)."""
  found = problems(results)
  if found:
    return False, "The demo's effect did not show: " + "; ".join(found) + "."
  rows = by_name(results)
  fp32, fp16, scaled = (rows[name]["accuracy"] for name in RUNS[:3])
  return True, (
      f"Float16 without loss scaling reached {fp16:.2f}% test accuracy "
      f"({rows['fp16']['zeros']:.2f}% of its gradient entries were zero in "
      f"float16), {fp32 - fp16:.2f} points below float32's {fp32:.2f}%; with "
      f"dynamic loss scaling it reached {scaled:.2f}%. " + _bfloat16(results))


def _bfloat16(results: dict) -> str:
  """The verdict's sentence on the bfloat16 run."""
  row = by_name(results).get("bf16")
  if row is None:
    return f"bfloat16 was not run: {results['not_run']['bf16']}."
  return (f"bfloat16, with no loss scale, reached {row['accuracy']:.2f}% "
          f"({_percent(row['zeros'])} of its gradient entries zero in "
          f"bfloat16, {row['skipped']} skipped steps).")


def title(results: dict) -> str:
  """The picture's title, two lines: the accuracies and what they show."""
  rows = by_name(results)
  fp32, fp16, scaled = (rows[name]["accuracy"] for name in RUNS[:3])
  bf16 = rows["bf16"]["accuracy"] if "bf16" in rows else None
  found = problems(results)
  if found:
    return "The demo's effect did not show:\n" + ";\n".join(found)
  return (f"Test accuracy: float32 {fp32:.2f}%, float16 {fp16:.2f}% "
          f"({rows['fp16']['zeros']:.2f}% of its gradient entries zero), "
          f"float16 + loss scaling {scaled:.2f}%, bfloat16 "
          + ("not run" if bf16 is None else f"{bf16:.2f}%") + "\n"
          f"Unscaled float16 falls {fp32 - fp16:.2f} points behind float32; "
          f"with dynamic loss scaling it ends {_gap(scaled, fp32)} it"
          + ("" if bf16 is None else
             f", bfloat16 without a scale {_gap(bf16, fp32)} it"))


def _gap(accuracy: float, reference: float) -> str:
  """'1.25 points below', '0.28 points above' or 'level with'."""
  if accuracy == reference:
    return "level with"
  side = "below" if accuracy < reference else "above"
  return f"{abs(reference - accuracy):.2f} points {side}"


def _percent(value: Optional[float], missing: str = "n/a (float32)") -> str:
  if value is None:
    return missing
  if 0 < value < 0.005:
    return "<0.01%"
  return f"{value:.2f}%"


def power_of_two(value: float) -> str:
  """`value` as a power of two: '2^-30', '2^48.71'."""
  exponent = math.log2(value)
  return (f"2^{exponent:.0f}" if exponent == round(exponent)
          else f"2^{exponent:.2f}")


def _scale(row: dict) -> str:
  if row.get("dtype") == "bfloat16":
    return "none (NoLossScale)"
  return power_of_two(row["scale"]) if row["dynamic"] else "1 (fixed)"


def table(results: dict) -> List[str]:
  """The results as Markdown table lines, one row per run."""
  lines = ["| run | test accuracy | final training loss | gradient entries "
           "zero in the run's 16-bit type | the same in float16, by "
           "precision telemetry | skipped steps | final loss scale |",
           "|---|---:|---:|---:|---:|---:|---:|"]
  for name in RUNS:
    row = by_name(results).get(name)
    if row is None:
      lines.append(f"| {name} | not run: {results['not_run'][name]} |"
                   + " – |" * 5)
      continue
    lines.append(f"| {name} | {row['accuracy']:.2f}% | {row['loss']:.4f} | "
                 f"{_percent(row['zeros'])} | "
                 f"{_percent(row['telemetry_zeros'], _no_telemetry(row))} | "
                 f"{row['skipped']} | "
                 f"{_scale(row)} |")
  return lines


def _no_telemetry(row: dict) -> str:
  """What the telemetry column says for a run it does not measure."""
  return ("n/a (float16's measure)" if row.get("dtype") == "bfloat16"
          else "n/a (float32)")


def markdown(results: dict) -> str:
  """The table, where it was measured, and the verdict, as Markdown."""
  setting = ", ".join(f"`{k}={v}`" if v is not None else f"`{k}` unset"
                      for k, v in results["environment"].items())
  return "\n".join(table(results) + [
      "",
      f"Measured by `python examples/digits_demo.py` ({results['steps']} "
      f"steps of {results['batch_size']} images): TensorFlow "
      f"{results['tensorflow']}, {results['machine']}, {setting}; the four "
      f"runs took {results['wall_time']:.0f} s. {verdict(results)[1]}"]) + "\n"


def _split_readme(path: str) -> Tuple[str, str, str]:
  """Returns the text before `BEGIN`, between the marker lines, after `END`.

  Raises:
    ValueError: If the file does not hold each marker once, on its own line,
      `BEGIN` first.
  """
  text = pathlib.Path(path).read_text(encoding="utf-8")
  found = re.fullmatch(
      rf"(.*?^){re.escape(BEGIN)}\n(.*?)^{re.escape(END)}$(.*)", text,
      re.S | re.M)
  if not found or text.count(BEGIN) != 1 or text.count(END) != 1:
    raise ValueError(f"{path} must hold the line {BEGIN!r} and, after it, the "
                     f"line {END!r}, once each")
  return found.group(1), found.group(2), found.group(3)


def readme_block(path: str) -> str:
  """The text between the marker lines of `path`.

  Raises:
    ValueError: As `update_readme`.
  """
  return _split_readme(path)[1]


def update_readme(path: str, results: dict) -> None:
  """Replaces the text between the marker lines of `path` with `markdown`.

  Raises:
    ValueError: If the file does not hold each marker once, on its own line,
      `BEGIN` first.
  """
  head, _, tail = _split_readme(path)
  pathlib.Path(path).write_text(
      f"{head}{BEGIN}\n{markdown(results)}{END}{tail}", encoding="utf-8")


def png_results(path: str) -> dict:
  """The results a demo picture carries in its PNG text metadata."""
  from PIL import Image  # pylint: disable=import-outside-toplevel
  with Image.open(path) as picture:
    text = picture.text.get(PNG_KEY)
  if text is None:
    raise ValueError(f"{path} has no {PNG_KEY!r} metadata: draw it with "
                     "python examples/digits_demo.py --png PATH")
  return json.loads(text)


def tensorboard_command(logdir: str) -> Optional[str]:
  """A shell command that starts TensorBoard on `logdir`, or None.

  The `tensorboard` script next to the running interpreter when there is one
  (a virtual environment's `bin`), else `python -m tensorboard.main`; None if
  this interpreter cannot import TensorBoard.
  """
  if importlib.util.find_spec("tensorboard") is None:
    return None
  script = os.path.join(os.path.dirname(sys.executable), "tensorboard")
  argv = ([script] if os.access(script, os.X_OK)
          else [sys.executable, "-m", "tensorboard.main"])
  return shlex.join(argv + ["--logdir", os.path.abspath(logdir)])


# /proc/cpuinfo flags that decide how a CPU computes in float16.
FLOAT16_FLAGS = (("f16c", "F16C"), ("avx512f", "AVX-512"),
                 ("avx512_bf16", "AVX-512 BF16"),
                 ("avx512_fp16", "AVX-512 FP16"))


def cpu() -> str:
  """The CPU's model, count, and which float16-related ISAs it has or lacks.

  From /proc/cpuinfo where there is one (Linux); else the machine type.
  """
  try:
    text = pathlib.Path("/proc/cpuinfo").read_text(encoding="utf-8")
  except OSError:
    text = ""
  model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
  flags = re.search(r"^flags\s*:(.*)$", text, re.M)
  name = model.group(1).strip() if model else platform.machine()
  described = f"{name} ({os.cpu_count()} CPUs)"
  if flags:
    have = set(flags.group(1).split())
    described += "".join(f", {'with' if flag in have else 'no'} {name}"
                         for flag, name in FLOAT16_FLAGS)
  return described
