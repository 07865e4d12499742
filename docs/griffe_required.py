"""A griffe extension for the API pages: a `REQUIRED` default reads as required.

The optimizers' constructors default their second argument to a sentinel
named `REQUIRED`, so that a missing argument gets a message that names the
fix; at run time their `__signature__` shows the argument as required. The
API pages are built from the source, where the sentinel would show as a
default value; this extension shows it as `help()` does.
"""

import griffe


class RequiredDefaults(griffe.Extension):
  """Drops defaults spelled `...REQUIRED`, making the parameter required."""

  def on_function_instance(self, *, func: griffe.Function, **kwargs) -> None:
    del kwargs  # Unused.
    for parameter in func.parameters:
      if str(parameter.default).rsplit(".", 1)[-1] == "REQUIRED":
        parameter.default = None
