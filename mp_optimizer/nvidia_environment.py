"""NVIDIA's mixed-precision environment variables, honoured on stock TensorFlow.

Many TF1 training scripts got mixed precision only from NVIDIA's TensorFlow
containers, which read three environment variables:

* `TF_ENABLE_AUTO_MIXED_PRECISION=1`: the float16 graph rewrite and dynamic
  loss scaling, for every `tf.compat.v1.train.Optimizer`;
* `TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE` (0 or 1): the rewrite alone,
  overriding the first for it;
* `TF_ENABLE_AUTO_MIXED_PRECISION_LOSS_SCALING` (0 or 1): dynamic loss
  scaling alone, likewise.

Stock TensorFlow 2.x ignores them: such a script trains in float32 without
loss scaling, and says nothing. To run it unchanged with what the container
did:

    python -m mp_optimizer.nvidia_environment train.py --amp ...

or call `honour_nvidia_environment()` first thing in a program. From then on,
the first time an optimizer computes or applies gradients (`minimize` does
both) the variables are read, as the script has set them by then, and the
optimizer is handed to this library's public API:
`mp_optimizer.enable_mixed_precision_graph_rewrite(opt, "dynamic")` for both,
`mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, "dynamic")` for loss
scaling alone (`..._GRAPH_REWRITE=0`), and the rewrite switched on for
Sessions created afterwards for the rewrite alone (`..._LOSS_SCALING=0`).
Nothing happens while none is set. Dynamic loss scaling uses the library's
"dynamic" settings (it starts at 2**15 and doubles after 2000 finite
steps). Optimizers that already scale the loss (this library's,
TensorFlow's mixed-precision ones) are left alone. For code you can
change, the explicit call is clearer: the codemod (`mp-optimizer-migrate`)
reports each place such a variable is set.
"""

import dataclasses
import os
import runpy
import sys
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import tensorflow as tf

import mp_optimizer
from mp_optimizer._internal.keyed import PerObject

VARIABLE = "TF_ENABLE_AUTO_MIXED_PRECISION"
GRAPH_REWRITE = VARIABLE + "_GRAPH_REWRITE"
LOSS_SCALING = VARIABLE + "_LOSS_SCALING"
_METHODS = ("compute_gradients", "apply_gradients")
_ON, _OFF = ("1", "true"), ("0", "false", "")


@dataclasses.dataclass(frozen=True)
class Settings:
  """What NVIDIA's container would have done for an optimizer.

  Attributes:
    graph_rewrite: Turn on TensorFlow's float16 graph rewrite.
    loss_scaling: Wrap the optimizer for dynamic loss scaling.
  """
  graph_rewrite: bool
  loss_scaling: bool


def _flag(environ: Mapping[str, str], name: str, default: bool) -> bool:
  value = environ.get(name)
  if value is None:
    return default
  if value.strip().lower() in _ON:
    return True
  if value.strip().lower() in _OFF:
    return False
  raise ValueError(f"{name} must be 0 or 1, as NVIDIA's containers read it; "
                   f"got {value!r}")


def settings(environ: Optional[Mapping[str, str]] = None) -> Settings:
  """Reads NVIDIA's variables.

  Args:
    environ: The environment to read; None reads `os.environ`.

  Returns:
    The `Settings` they ask for (both False when none is set).

  Raises:
    ValueError: If one is set to something other than 0, 1, true or false.
  """
  environ = os.environ if environ is None else environ
  both = _flag(environ, VARIABLE, False)
  return Settings(graph_rewrite=_flag(environ, GRAPH_REWRITE, both),
                  loss_scaling=_flag(environ, LOSS_SCALING, both))


# NVIDIA's container changed `tf.train.Optimizer`'s own methods, which is
# what lets an unmodified script's optimizers (of any subclass, however
# made) get loss scaling; nothing public reaches them, so the two methods of
# the base class are replaced here, and only here, by versions that hand
# the call to the optimizer's wrapper. The wrapper calls the optimizer's own
# methods again; `_INSIDE` lets those calls through to the originals, and an
# optimizer that scales the loss already, found on the call stack (nothing
# public says which optimizer another one wraps), keeps its inner one as is.


@dataclasses.dataclass
class _Handover:
  """Where an optimizer's calls go: `wrapper`, or its own methods if None."""
  wrapper: Optional[Any]


# The replaced methods' originals, by name, kept per class replaced.
_ORIGINALS: PerObject[type, Dict[str, Callable[..., Any]]] = PerObject(dict)
_WRAPPERS: PerObject[Any, _Handover] = PerObject(lambda: _Handover(None))
# Per optimizer, per thread: `.active` while its wrapper is handling a call.
_INSIDE: PerObject[Any, threading.local] = PerObject(threading.local)


def _scales_already(opt: Any) -> bool:
  return isinstance(opt, (mp_optimizer.LossScaleOptimizer,
                          tf.compat.v1.mixed_precision.
                          MixedPrecisionLossScaleOptimizer))


def _called_by_a_scaling_optimizer() -> bool:
  """Whether an optimizer that scales the loss is on the call stack: its
  inner optimizer is reached through it (as NVIDIA's was), never wrapped."""
  frame = sys._getframe(1)  # pylint: disable=protected-access
  while frame is not None:  # Once per optimizer: the answer is kept.
    if _scales_already(frame.f_locals.get("self")):
      return True
    frame = frame.f_back
  return False


def _wrapper(opt: Any) -> Optional[Any]:
  """The optimizer to hand `opt`'s calls to, made on first use (or None)."""
  known = _WRAPPERS.peek(opt)
  if known is not None:
    return known.wrapper
  if _called_by_a_scaling_optimizer():
    return None
  wanted, wrapper = settings(), None
  if not _scales_already(opt) and wanted.loss_scaling:
    wrapper = (mp_optimizer.enable_mixed_precision_graph_rewrite(opt, "dynamic")
               if wanted.graph_rewrite else
               mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, "dynamic"))
  elif wanted.graph_rewrite:  # The rewrite alone: a throwaway optimizer.
    mp_optimizer.enable_mixed_precision_graph_rewrite(
        tf.compat.v1.train.GradientDescentOptimizer(1.0), loss_scale=1)
  _WRAPPERS.set(opt, _Handover(wrapper))
  return wrapper


def _handed_over(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
  def method(self, *args, **kwargs):
    inside = _INSIDE.of(self)
    wrapper = None if getattr(inside, "active", False) else _wrapper(self)
    if wrapper is None:
      return original(self, *args, **kwargs)
    inside.active = True
    try:
      return getattr(wrapper, name)(*args, **kwargs)
    finally:
      inside.active = False
  method.__name__, method.__doc__ = name, original.__doc__
  return method


def honour_nvidia_environment() -> None:
  """Makes every `tf.compat.v1.train.Optimizer` do what NVIDIA's did.

  Call it before the program builds its optimizers; calling it again does
  nothing. The variables are read when each optimizer first computes or
  applies gradients. `stop_honouring_nvidia_environment` undoes it.
  """
  base = tf.compat.v1.train.Optimizer
  originals = _ORIGINALS.of(base)
  for name in _METHODS:
    if name not in originals:
      originals[name] = getattr(base, name)
      setattr(base, name, _handed_over(name, originals[name]))


def stop_honouring_nvidia_environment() -> None:
  """Gives `tf.compat.v1.train.Optimizer` its own methods back.

  Optimizers wrapped already stay wrapped in the graphs they built.
  """
  base = tf.compat.v1.train.Optimizer
  originals = _ORIGINALS.of(base)
  for name in list(originals):
    setattr(base, name, originals.pop(name))
  for opt in _WRAPPERS.keys():
    _WRAPPERS.discard(opt)


_USAGE = ("usage: python -m mp_optimizer.nvidia_environment SCRIPT [ARG...]\n"
          "Runs SCRIPT with NVIDIA's TF_ENABLE_AUTO_MIXED_PRECISION variables "
          "honoured for its tf.compat.v1 optimizers.")


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Runs a script as `__main__` with the variables honoured.

  Args:
    argv: The script's path and its arguments; None reads `sys.argv[1:]`.

  Returns:
    0 after the script ends; 2 for bad usage (the script's own `sys.exit`
    and exceptions go through).
  """
  args: List[str] = list(sys.argv[1:] if argv is None else argv)
  if not args or args[0] in ("-h", "--help"):
    print(_USAGE, file=sys.stdout if args else sys.stderr)
    return 0 if args else 2
  script = args[0]
  if not os.path.isfile(script):
    print(f"mp_optimizer.nvidia_environment: SCRIPT {script!r} is not a file",
          file=sys.stderr)
    return 2
  honour_nvidia_environment()
  sys.argv = args
  sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
  runpy.run_path(script, run_name="__main__")
  return 0


if __name__ == "__main__":
  sys.exit(main())
