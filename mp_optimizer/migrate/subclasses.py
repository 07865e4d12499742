"""Subclasses of the legacy classes that use their private attributes.

Some model zoos subclassed contrib's `ExponentialUpdateLossScaleManager`,
skipped its `__init__`, and set contrib's private attributes themselves
(`self._loss_scale = tf.get_variable(...)`, `self._num_good_steps = ...`),
leaving contrib's inherited methods to read them. The import converts
cleanly, yet the replacement's methods read attributes of their own, which
such a class never sets: it fails when the graph is built. `findings`
records every `self._x` a subclass reads or assigns, for the names the
legacy classes kept (contrib 1.15's sources, TF 2.x's training/experimental
ones), and reports each class once, with what to do instead.
"""

import dataclasses
from typing import Iterable, Set

import libcst as cst

from mp_optimizer.migrate import names

_MANAGERS = frozenset({"LossScaleManager", "FixedLossScaleManager",
                       "ExponentialUpdateLossScaleManager", "LossScale",
                       "FixedLossScale", "DynamicLossScale"})
_SETTINGS = {
    "ExponentialUpdateLossScaleManager": (
        "init_loss_scale, incr_every_n_steps, decr_every_n_nan_or_inf, "
        "incr_ratio, decr_ratio"),
    "FixedLossScaleManager": "loss_scale",
    "DynamicLossScale": "initial_loss_scale, increment_period, multiplier",
    "FixedLossScale": "loss_scale_value",
}


@dataclasses.dataclass
class Subclass:
  """A class that extends a legacy class (or one that does), as visited.

  Attributes:
    name: The class's name.
    base: The legacy class it extends (its name in this library).
    line: The line of its `class` statement.
    reads: Private attributes of the legacy class it reads on `self`.
    assigns: Those it assigns on `self`.
  """
  name: str
  base: str
  line: int
  reads: Set[str] = dataclasses.field(default_factory=set)
  assigns: Set[str] = dataclasses.field(default_factory=set)

  def record(self, attr: str, assigned: bool) -> bool:
    """Notes `self.<attr>`; returns whether it is a legacy private name.

    Reading one the replacement keeps (`names.KEPT_PRIVATE`) is fine.
    """
    if attr not in names.LEGACY_PRIVATE:
      return False
    if assigned or self.base not in names.KEPT_PRIVATE.get(attr, ()):
      (self.assigns if assigned else self.reads).add(attr)
    return True

  def reason(self) -> str:
    """The finding for this class ('' if it uses no private attribute)."""
    used = []
    if self.assigns:
      used.append("assigns " + ", ".join(f"`{a}`" for a in sorted(
          self.assigns)))
    if self.reads:
      used.append("reads " + ", ".join(f"`{a}`" for a in sorted(self.reads)))
    if not used:
      return ""
    head = (f"class `{self.name}` extends `{self.base}` and "
            f"{' and '.join(used)}: private attributes of the legacy class, "
            "which the replacement does not use as it did (it fails, or "
            "ignores them, when the graph is built); ")
    if self.base not in _MANAGERS:
      return head + ("use the replacement's public properties "
                     "(`.inner_optimizer`, `.loss_scale_manager`) instead")
    settings = _SETTINGS.get(self.base)
    return head + (
        "subclass `managers.LossScaleManager` and implement "
        "`get_loss_scale()` and `update_loss_scale(finite_grads)` with "
        "variables of your own" +
        (f", or drop the class and pass its values to "
         f"`managers.{self.base}({settings})`" if settings else ""))


def defines(node: cst.CSTNode, methods: Iterable[str]) -> bool:
  """Whether `node` is a class whose body defines every one of `methods`."""
  if not isinstance(node, cst.ClassDef):
    return False
  defined = {statement.name.value for statement in node.body.body
             if isinstance(statement, cst.FunctionDef)}
  return set(methods) <= defined
