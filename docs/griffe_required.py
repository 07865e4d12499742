"""A griffe extension for the API pages: signatures read as `help()` shows them.

The API pages are built from the source, not from the imported package, so a
default is shown as it is written there. Two kinds of default are written
for the code, not for the reader, and this extension shows them as the
running signature (`help()`) does:

* The optimizers' constructors default their second argument to a sentinel
  named `REQUIRED`, so that a missing argument gets a message that names the
  fix; at run time their `__signature__` shows the argument as required.
* The managers' constructors read their defaults from a frozen dataclass of
  their settings (`incr_ratio=_SETTINGS.incr_ratio`), or wrap one in an
  `Unset` marker (`base.Unset(_DYNAMIC.initial_loss_scale)`); the page shows
  the number that dataclass field holds.
"""

import re
from typing import Any, Optional

import griffe

_UNSET = re.compile(r"(?:\w+\.)?Unset\((.*)\)")
_SETTING = re.compile(r"(\w+)\.(\w+)")


def _setting_default(module: Any, text: str, depth: int = 0) -> Optional[str]:
  """The source text of the settings field `text` names, or None."""
  unset = _UNSET.fullmatch(text)
  if unset:
    text = unset.group(1)
  match = _SETTING.fullmatch(text)
  if not match or depth > 3:
    return None
  try:
    holder = module.members[match.group(1)]
    if holder.is_attribute:  # `_SETTINGS = dynamic.ExponentialSettings`
      holder = module.modules_collection[holder.value.canonical_path]
    field = holder.members[match.group(2)] if holder.is_class else None
  except (KeyError, AttributeError, griffe.AliasResolutionError,
          griffe.CyclicAliasError):  # Not a settings class of the package.
    return None
  if field is None or not field.is_attribute or field.value is None:
    return None
  value = str(field.value)
  return _setting_default(holder.module, value, depth + 1) or value


class RequiredDefaults(griffe.Extension):
  """Drops `REQUIRED` defaults; shows settings defaults as their values."""

  def on_function_instance(self, *, func: griffe.Function, **kwargs) -> None:
    del kwargs  # Unused.
    for parameter in func.parameters:
      if str(parameter.default).rsplit(".", 1)[-1] == "REQUIRED":
        parameter.default = None

  def on_function(self, *, func: griffe.Function, **kwargs) -> None:
    # Runs once every module is loaded: settings classes can be looked up.
    del kwargs  # Unused.
    for parameter in func.parameters:
      if parameter.default is not None:
        parameter.default = _setting_default(
            func.module, str(parameter.default)) or parameter.default
