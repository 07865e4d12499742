"""Finds a user's own `managers` folder hiding the public `managers` package.

`import managers` takes the first `managers` on `sys.path`, and a script's
own folder comes first. A project with its own `managers` folder (or
`managers.py`) next to the script therefore gets its own module, and code
written as `managers.ExponentialUpdateLossScaleManager(...)` fails far from
the cause. This library imports only `mp_optimizer.managers`, so it keeps
working; these helpers say what happened where it can be seen: once when
`mp_optimizer` is imported, and when an optimizer receives such an object.

Nothing here imports TensorFlow.
"""

import importlib.util
import pathlib
import sys
import warnings
from typing import Any, Optional

# The public top-level `managers` package is installed beside `mp_optimizer`.
_OURS = pathlib.Path(__file__).resolve().parent.parent / "managers"
FIX = ("Write `from mp_optimizer import managers` instead of `import "
       "managers`, or rename that folder.")


def _location(spec) -> Optional[pathlib.Path]:
  """The folder of a package (also a namespace package), else the file."""
  if spec.submodule_search_locations:
    return pathlib.Path(list(spec.submodule_search_locations)[0]).resolve()
  return pathlib.Path(spec.origin).resolve() if spec.origin else None


def shadowing_path() -> Optional[pathlib.Path]:
  """Returns where `import managers` would load from, if that is not ours.

  Returns:
    The folder (or `managers.py` file) that `import managers` finds, when it
    is not this project's `managers` package; None when it is ours, or when
    no `managers` is importable at all.
  """
  try:
    spec = importlib.util.find_spec("managers")
  except (ImportError, ValueError):  # A `managers` in sys.modules, no spec.
    return None
  if spec is None:
    return None
  location = _location(spec)
  return None if location in (None, _OURS) else location


def warn_if_shadowed() -> None:
  """Warns once, at import, when `import managers` would load another module."""
  location = shadowing_path()
  if location is not None:
    warnings.warn(
        f"`import managers` loads {location}, not the loss-scale managers of "
        f"mp_optimizer: a folder or module named `managers` earlier on "
        f"sys.path hides them. {FIX}", UserWarning, stacklevel=3)


def foreign_manager_message(argument: str, value: Any) -> Optional[str]:
  """Explains a manager-like `value` that is not one of this library's.

  Args:
    argument: The argument name to quote.
    value: What the optimizer received; the caller has already checked that
      it is not a `managers.LossScaleManager`.

  Returns:
    A message naming the module the object came from and the fix, or None if
    `value` does not look like a loss-scale manager.
  """
  cls = value if isinstance(value, type) else type(value)
  module_name = getattr(cls, "__module__", "") or ""
  module = sys.modules.get(module_name)
  source = getattr(module, "__file__", None) or module_name
  if module_name.split(".")[0] == "managers":
    return (f"`{argument}` is {cls.__name__} from {source}, not one of "
            "mp_optimizer's managers: a folder or module named `managers` "
            f"earlier on sys.path hides mp_optimizer's. {FIX}")
  if all(hasattr(value, name) for name in ("get_loss_scale",
                                           "update_loss_scale")):
    return (f"`{argument}` is {cls.__name__} from {source}, which has the "
            "methods of a loss-scale manager but is not a "
            "managers.LossScaleManager. Subclass "
            "`mp_optimizer.managers.LossScaleManager`, or use one of its "
            "classes (`from mp_optimizer import managers`).")
  return None
