"""Keras-style read-only attributes of `LossScaleOptimizer`, as properties.

Code written against `tf.keras.mixed_precision.LossScaleOptimizer` reads
`initial_scale`, `dynamic_growth_steps`, `clipnorm`, `clipvalue`,
`global_clipnorm` and `gradient_accumulation_steps`. They hold Python values
known from the constructor, so they are readable before any graph exists.
These factories build those properties; the class stays one class.
"""

from typing import Any


def manager_setting(doc: str, *names: str) -> property:
  """A property: the first of the manager's attributes `names` it has, else None."""

  def read(optimizer) -> Any:
    manager = optimizer.loss_scale_manager
    return next((getattr(manager, name) for name in names
                 if hasattr(manager, name)), None)

  return property(read, doc=doc)


def option(name: str) -> property:
  """A property: the constructor option `name` as it was given, or None."""
  return property(lambda optimizer: optimizer._options[name],  # pylint: disable=protected-access
                  doc=f"The `{name}` option, or None if it was not given.")
