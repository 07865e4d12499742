"""Hand-written float32 master-weight getters, pointed to the library's.

TF1 float16 code (NVIDIA's mixed-precision guide and many model zoos) stores
float16 variables in float32 with a `custom_getter` of its own:

```
def float32_variable_storage_getter(getter, name, ..., dtype=None, ...):
    variable = getter(name, ..., dtype=tf.float32 if trainable else dtype, ...)
    return tf.cast(variable, dtype) if trainable and dtype != tf.float32 else variable
```

Such a getter keeps working, so nothing is rewritten; a notice names
`mp_optimizer.float32_variable_getter` and says what it does: it stores
trainable float16/bfloat16 variables in float32 and creates every other one
as requested, and covers what hand-written ones often miss (a float16 dtype
that comes only from the initializer's value, partitioned variables, an
enclosing scope's getter). A getter whose code never names `trainable`
(TPU code's bfloat16 getters) stores non-trainable variables in float32
too: the notice says so.

A function is taken for one when it has a getter's signature (its second
parameter is `name`, or it takes `*args` after the first), its first
parameter is called in its body, its body names `float32`, and it returns
through a `cast`. An Estimator model function that calls a model function it
was given and casts (`create_model_fn(detection_model_fn, configs, ...)`,
`unet_fn(features, labels, mode, params)`) has no getter's signature.
"""

import libcst as cst

from mp_optimizer.migrate import passes


def _notice(name: str, reads_trainable: bool) -> str:
  ignores = "" if reads_trainable else (
      f"; `{name}` does not look at `trainable`, so it stores non-trainable "
      "variables (moving averages, counters) in float32 too, and checkpoints "
      "written with it hold them in float32")
  return (f"`{name}` looks like a hand-written float32 master-weight "
          "getter: `mp_optimizer.float32_variable_getter` stores trainable "
          "float16/bfloat16 variables in float32 and casts them on read, "
          "creates every other variable as requested, and also handles "
          "float16 initial values, partitioned variables and an enclosing "
          f"scope's getter{ignores}; pass it as `custom_getter=`, or build "
          "the model under `with mp_optimizer.float32_master_weights():`. "
          "Checkpoint names stay the same. Not rewritten: such getters differ "
          "in detail")


class GetterPass(passes.ReportingPass, cst.CSTVisitor):
  """Collects a notice for each function shaped like a float32 getter."""

  def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
    params = node.params.params
    if not params or not (
        (len(params) > 1 and params[1].name.value == "name") or
        (len(params) == 1 and isinstance(node.params.star_arg, cst.Param))):
      return
    shape = _Shape(params[0].name.value)
    node.body.visit(shape)
    if shape.calls_getter and shape.float32 and shape.casts and shape.returns:
      self._report(node, _notice(node.name.value, shape.trainable),
                   needs_human=False)


class _Shape(cst.CSTVisitor):
  """What a function's code (not its docstring or comments) does."""

  def __init__(self, getter: str):
    super().__init__()
    self._getter = getter
    self.calls_getter = self.float32 = self.casts = self.returns = False
    self.trainable = False  # Whether it looks at `trainable` at all.

  def visit_Call(self, node: cst.Call) -> None:
    func = node.func
    self.calls_getter |= isinstance(func, cst.Name) and func.value == (
        self._getter)
    self.casts |= (isinstance(func, cst.Name) and func.value == "cast") or (
        isinstance(func, cst.Attribute) and func.attr.value == "cast")

  def visit_Name(self, node: cst.Name) -> None:
    self.float32 |= node.value == "float32"
    self.trainable |= node.value == "trainable"

  def visit_SimpleString(self, node: cst.SimpleString) -> None:
    self.float32 |= node.evaluated_value == "float32"
    self.trainable |= node.evaluated_value == "trainable"

  def visit_Return(self, node: cst.Return) -> None:
    self.returns |= node.value is not None
