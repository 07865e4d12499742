"""The legacy mixed-precision API: its names and where each one goes.

Legacy code reached TensorFlow's mixed-precision API through many doors: the
`tf.contrib.mixed_precision` module (and its two private modules), TF 1.14+'s
`tf.train.experimental` and `tf.compat.v1.mixed_precision(.experimental)`
exports, TF 2.1-2.3's `tf.mixed_precision.experimental`, each under
`tensorflow`, `tensorflow.compat.v1` or `tensorflow.compat.v2`. Every such
path is spelled out here as a fully qualified name, the form libcst's
`QualifiedNameProvider` resolves an expression to, whatever alias the file
imported `tensorflow` under.
"""

import dataclasses
from typing import Dict, FrozenSet, Optional, Set

CONTRIB = "contrib"
TF = "tf"


@dataclasses.dataclass(frozen=True)
class Target:
  """Where a legacy name goes.

  Attributes:
    package: "mp_optimizer" or "managers" (`mp_optimizer.managers`, which the
      converted code imports as `from mp_optimizer import managers`).
    name: The public name in that package.
    family: CONTRIB for `tf.contrib.mixed_precision` names, TF for TensorFlow's
      own `LossScale`/`MixedPrecisionLossScaleOptimizer`/graph-rewrite names.
  """
  package: str
  name: str
  family: str


# The module each `Target.package` is imported from.
MODULES = {"mp_optimizer": "mp_optimizer", "managers": "mp_optimizer.managers"}

_CONTRIB_TARGETS = {
    "LossScaleManager": "managers",
    "FixedLossScaleManager": "managers",
    "ExponentialUpdateLossScaleManager": "managers",
    "LossScaleOptimizer": "mp_optimizer",
}
_TF_TARGETS = {
    "LossScale": "managers",
    "FixedLossScale": "managers",
    "DynamicLossScale": "managers",
    "MixedPrecisionLossScaleOptimizer": "mp_optimizer",
    "enable_mixed_precision_graph_rewrite": "mp_optimizer",
    "disable_mixed_precision_graph_rewrite": "mp_optimizer",
}
_MANAGER_NAMES = ("LossScaleManager", "FixedLossScaleManager",
                  "ExponentialUpdateLossScaleManager")

# TF 1.15 and 2.0 installed the real package as `tensorflow_core`, and code
# of that time imported from it directly.
_PACKAGES = ("tensorflow", "tensorflow_core")
# The spellings of contrib's public module; its private modules (and
# everything else of contrib's) live below them.
_CONTRIB_ROOTS = tuple(
    f"{package}{compat}.contrib.mixed_precision"
    for package in _PACKAGES for compat in ("", ".compat.v1"))
# TensorFlow's public namespaces that held its own loss-scale names.
_TF_NAMESPACES = tuple(
    f"{package}{compat}.{module}"
    for package in _PACKAGES for compat in ("", ".compat.v1", ".compat.v2")
    for module in ("train.experimental", "mixed_precision",
                   "mixed_precision.experimental"))
_TF_PRIVATES = tuple(f"{package}.python.training.experimental"
                     for package in _PACKAGES)


def _build_names() -> Dict[str, Target]:
  names = {}
  for module in _CONTRIB_ROOTS:
    for name, package in _CONTRIB_TARGETS.items():
      names[f"{module}.{name}"] = Target(package, name, CONTRIB)
    for name in _MANAGER_NAMES:
      names[f"{module}.python.loss_scale_manager.{name}"] = Target(
          "managers", name, CONTRIB)
    names[f"{module}.python.loss_scale_optimizer.LossScaleOptimizer"] = Target(
        "mp_optimizer", "LossScaleOptimizer", CONTRIB)
  for module in _TF_NAMESPACES:
    for name, package in _TF_TARGETS.items():
      names[f"{module}.{name}"] = Target(package, name, TF)
  for private in _TF_PRIVATES:
    for name in ("LossScale", "FixedLossScale", "DynamicLossScale"):
      names[f"{private}.loss_scale.{name}"] = Target("managers", name, TF)
    names[f"{private}.loss_scale_optimizer.MixedPrecisionLossScaleOptimizer"] = (
        Target("mp_optimizer", "MixedPrecisionLossScaleOptimizer", TF))
    for name in ("enable_mixed_precision_graph_rewrite",
                 "disable_mixed_precision_graph_rewrite"):
      names[f"{private}.mixed_precision.{name}_v1"] = Target(
          "mp_optimizer", name, TF)
  return names


LEGACY_NAMES: Dict[str, Target] = _build_names()


def _build_converted() -> Dict[str, Target]:
  """This library's names for the legacy ones, as converted code spells them
  (also `mp_optimizer.contrib`)."""
  converted = {}
  for target in set(LEGACY_NAMES.values()):
    modules = (["mp_optimizer"] if target.package == "mp_optimizer" else
               ["mp_optimizer.managers"])
    if target.family == CONTRIB:
      modules.append("mp_optimizer.contrib")
    for module in modules:
      converted[f"{module}.{target.name}"] = target
  return converted


# A run on converted code reports what is still to do from these.
LIBRARY_NAMES: Dict[str, Target] = _build_converted()

# Modules whose every public member is a legacy name. The contrib ones (the
# roots and their two private modules, `...python.loss_scale_manager` and
# `...python.loss_scale_optimizer`) map, as a whole, onto
# `mp_optimizer.contrib` (a superset of each of them).
_MODULE_FAMILY: Dict[str, str] = {
    name.rsplit(".", 1)[0]: target.family
    for name, target in LEGACY_NAMES.items()}
CONTRIB_MODULES: FrozenSet[str] = frozenset(
    m for m, family in _MODULE_FAMILY.items() if family == CONTRIB)


def _prefixes(dotted: str) -> Set[str]:
  parts = dotted.split(".")
  return {".".join(parts[:i]) for i in range(1, len(parts))}


# Packages on the way to a legacy module (`tensorflow`, `tensorflow.contrib`,
# `tensorflow.compat.v1.train`, ...): a star import from one of them hides
# which legacy names a file uses.
PARENT_MODULES: FrozenSet[str] = frozenset(
    p for m in _MODULE_FAMILY for p in _prefixes(m)) - frozenset(_MODULE_FAMILY)


def family_of_module(dotted: str) -> Optional[str]:
  """Returns CONTRIB or TF if `dotted` is a legacy module, else None."""
  return _MODULE_FAMILY.get(dotted)


def is_contrib_path(dotted: str) -> bool:
  """True for contrib's public module or anything under it."""
  return any(dotted == m or dotted.startswith(m + ".")
             for m in _CONTRIB_ROOTS)


def is_contrib_parent(dotted: str) -> bool:
  """True for `tensorflow.contrib.mixed_precision.python` and its like."""
  return dotted in PARENT_MODULES and is_contrib_path(dotted)


def is_unknown_contrib_member(path: str) -> bool:
  """True for `tf.contrib.mixed_precision.<a name it never had>`."""
  parent = path.rpartition(".")[0]
  return ((parent in CONTRIB_MODULES or is_contrib_parent(parent))
          and path not in LEGACY_NAMES and family_of_module(path) is None
          and not is_contrib_parent(path))


# Private members of the legacy classes, from TF 1.15's contrib sources and
# TF 2.x's training/experimental sources. Our classes do not have them.
# Names this specific are reported wherever they appear in a file that uses
# the legacy API; the rest only on objects known to be legacy.
DISTINCTIVE_PRIVATE: FrozenSet[str] = frozenset({
    "_loss_scale_manager", "_down_scale", "_num_good_steps", "_num_bad_steps",
    "_reset_stats", "_current_loss_scale", "_add_weight", "_loss_scale_value",
    "_doing_dynamic_loss_scaling", "_unscale_grads", "_scale_grad",
    "_distributed_apply", "_initial_loss_scale", "_increment_period",
    "_incr_every_n_steps", "_decr_every_n_nan_or_inf",
})
LEGACY_PRIVATE: FrozenSet[str] = DISTINCTIVE_PRIVATE | frozenset({
    "_opt", "_optimizer", "_loss_scale", "_weights", "_multiplier",
    "_incr_ratio", "_decr_ratio", "_scale_loss", "_apply_gradients",
})

# Private members the replacement keeps, with the legacy meaning, on what
# the names listed make (their names in this library): contrib's optimizer
# kept the wrapped optimizer in `_opt`, as the replacement's optimizers do
# (also the one the graph rewrite returns for a tf.compat.v1 optimizer), and
# its fixed manager the number in `_loss_scale`, as the replacement's fixed
# scales do. Reading them is not reported there.
KEPT_PRIVATE: Dict[str, FrozenSet[str]] = {
    "_opt": frozenset({"LossScaleOptimizer", "MixedPrecisionLossScaleOptimizer",
                       "enable_mixed_precision_graph_rewrite"}),
    "_loss_scale": frozenset({"FixedLossScaleManager", "FixedLossScale"}),
}

# Public replacements for the private members people reached for most.
PRIVATE_HINTS: Dict[str, str] = {
    "_loss_scale_manager": "`.loss_scale_manager`",
    "_opt": "`.inner_optimizer`",
    "_optimizer": "`.inner_optimizer`",
    "_loss_scale": "`.get_loss_scale()` (or `.loss_scale_manager`)",
    "_current_loss_scale": "`()` / `.get_loss_scale()`, or `.variables()`",
    "_num_good_steps": "`.variables()`",
    "_num_bad_steps": "`.variables()`",
    "_weights": "`.variables()`",
    "_loss_scale_value": "`.loss_scale_value`",
    "_initial_loss_scale": "`.initial_loss_scale`",
    "_increment_period": "`.increment_period`",
    "_multiplier": "`.multiplier`",
    "_incr_every_n_steps": "`.incr_every_n_steps`",
    "_decr_every_n_nan_or_inf": "`.decr_every_n_nan_or_inf`",
    "_incr_ratio": "`.incr_ratio`",
    "_decr_ratio": "`.decr_ratio`",
}
