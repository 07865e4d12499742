"""Argument checks shared by every public constructor and method.

Each check raises before any graph op exists, with a message of the form
"`incr_ratio` must be > 1, got 0.5." so the user sees the argument, the value
received and what is allowed. `bool` is rejected wherever a number is expected:
`True` is an `int` to Python but never a meaningful loss scale or step count.
"""

import math
import numbers
from typing import Any, Optional

FLOAT32_MAX = 3.4028234663852886e38
# The range of a dynamic scale's floor: float32's smallest normal number, and
# the largest scale whose reciprocal is one (see `check_scale_floor`).
SMALLEST_FLOOR = 2.0**-126
LARGEST_FLOOR = 2.0**126
# The largest step count: what an int64 counter (and comparison) holds.
MAX_STEP_COUNT = 2**63 - 1


def describe(value: Any) -> str:
  """`value` as an error message shows what it received: repr and type."""
  return f"{value!r} (type {type(value).__name__})"


def check_real(name: str, value: Any) -> float:
  """Returns `value` as a float after checking it is a finite real number.

  Every number checked here ends up as a float32 constant in the graph, so it
  must also fit in float32.

  Raises:
    TypeError: If `value` is not an int or float (bools included).
    ValueError: If `value` is NaN, infinite, or beyond float32's range.
  """
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise TypeError(
        f"`{name}` must be a Python int or float, got {describe(value)}.")
  value = float(value)
  if not math.isfinite(value):
    raise ValueError(f"`{name}` must be finite, got {value}.")
  if abs(value) > FLOAT32_MAX:
    raise ValueError(
        f"`{name}` must fit in float32 (magnitude <= {FLOAT32_MAX:.7g}), "
        f"got {value:g}.")
  return value


def check_at_least(name: str, value: Any, minimum: float) -> float:
  """Checks that `value` is a finite real number >= `minimum`."""
  value = check_real(name, value)
  if value < minimum:
    raise ValueError(f"`{name}` must be >= {minimum:g}, got {value:g}.")
  return value


def check_greater(name: str, value: Any, bound: float) -> float:
  """Checks that `value` is a finite real number > `bound`."""
  value = check_real(name, value)
  if not value > bound:
    raise ValueError(f"`{name}` must be > {bound:g}, got {value:g}.")
  return value


def check_scale_floor(name: str, value: Any) -> float:
  """Checks a dynamic scale's floor: 2**-126 <= value <= 2**126.

  A floor below float32's smallest normal number is flushed to 0 by
  TensorFlow on CPU, so a scale that reached it would be 0 and never grow
  again; above 2**126 the scale's reciprocal is subnormal and every step
  counts as an overflow. Either way every later step would be skipped.

  Raises:
    TypeError: If `value` is not an int or float (bools included).
    ValueError: If it is not finite or outside that range.
  """
  value = check_real(name, value)
  if not SMALLEST_FLOOR <= value <= LARGEST_FLOOR:
    raise ValueError(
        f"`{name}` must be >= 2**-126 ({SMALLEST_FLOOR:g}, float32's smallest "
        f"normal number) and <= 2**126 ({LARGEST_FLOOR:g}, the largest scale "
        f"whose reciprocal is a normal float32), got {value:g}.")
  return value


def check_open_unit(name: str, value: Any) -> float:
  """Checks that `value` is a real number with 0 < value < 1."""
  value = check_real(name, value)
  if not 0.0 < value < 1.0:
    raise ValueError(f"`{name}` must be > 0 and < 1, got {value:g}.")
  return value


def check_positive_int(name: str, value: Any, minimum: int = 1) -> int:
  """Checks that `value` is an int >= `minimum` (bools and floats rejected)."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise TypeError(
        f"`{name}` must be a positive Python int, got {describe(value)}.")
  if value < minimum:
    raise ValueError(f"`{name}` must be >= {minimum}, got {value}.")
  return int(value)


def check_step_count(name: str, value: Any) -> int:
  """Like `check_positive_int`, but a whole float (`2000.0`) is accepted.

  For the managers' step counts, which contrib and TensorFlow took as floats
  too (a count read from a config file, or written `2e3`). A float with a
  fractional part is refused, not rounded.

  Counts are compared with int64 counters in the graph, so they may be as
  large as `MAX_STEP_COUNT` (2**63 - 1, e.g. `sys.maxsize` to mean "never").

  Raises:
    TypeError: If `value` is not a Python/NumPy int or float (bools included).
    ValueError: If it has a fractional part, is not finite, is below 1 or
      above `MAX_STEP_COUNT`.
  """
  if (not isinstance(value, bool) and isinstance(value, numbers.Real) and
      not isinstance(value, numbers.Integral)):
    if not float(value).is_integer():  # NaN and the infinities included.
      raise ValueError(
          f"`{name}` must be a whole number (an int, or a float such as "
          f"2.0), got {value!r}.")
    value = int(value)
  value = check_positive_int(name, value)
  if value > MAX_STEP_COUNT:
    raise ValueError(
        f"`{name}` must be <= 2**63 - 1 ({MAX_STEP_COUNT}), the largest count "
        f"an int64 step counter holds, got {value}.")
  return value


def check_bool(name: str, value: Any) -> bool:
  """Checks that `value` is a Python bool."""
  if not isinstance(value, bool):
    raise TypeError(f"`{name}` must be True or False, got {describe(value)}.")
  return value


def check_choice(name: str, value: Any, choices: tuple) -> Any:
  """Checks that `value` is one of `choices` (all of one type, e.g. `str`).

  Raises:
    TypeError: If `value` is not of the choices' type.
    ValueError: If it is, but is none of them.
  """
  allowed = ", ".join(repr(c) for c in choices)
  kind = type(choices[0])
  if not isinstance(value, kind):
    raise TypeError(f"`{name}` must be a {kind.__name__}, one of {allowed}; "
                    f"got {describe(value)}.")
  if value not in choices:
    raise ValueError(f"`{name}` must be one of {allowed}, got {value!r}.")
  return value


def check_optional_step_count(name: str, value: Any) -> Optional[int]:
  """Like `check_step_count`, but `None` is allowed and passed through."""
  return None if value is None else check_step_count(name, value)
