"""float32 master weights for models that build 16-bit float variables.

TF1 float16 code often builds its variables with `dtype=tf.float16`. The
optimizer then updates them in float16, and an update smaller than half the
spacing of float16 at the weight (2**-11 ≈ 4.9e-4 for a weight near 1) rounds
away: the weight never moves. The usual fix is a `custom_getter` that stores
each such variable in float32 and hands the model a float16 cast of it:

```
get_variable(name, dtype=float16, trainable)   under the getter:
    trainable:      master = get_variable(name, dtype=float32, ...)
                    return cast(master, float16)       # what the model sees
    not trainable:  return get_variable(name, dtype=float16, ...)   # as asked
```

Gradients reach the float32 variable through the cast, so the optimizer
updates float32 values; checkpoints hold the float32 variables under the
names the model asked for. bfloat16 requests are treated like float16.

`float32_variable_getter` is that getter; `float32_master_weights()` enters
it on the current variable scope. `LossScaleOptimizer.apply_gradients` warns
once about trainable 16-bit variables updated without it.
"""

import contextlib
from typing import Iterator

import numpy as np
import tensorflow as tf

_16BIT_FLOATS = (tf.float16, tf.bfloat16)


def _requested_dtype(dtype, initializer) -> tf.DType:
  """The dtype `get_variable` will give the variable.

  A value initializer decides the dtype: `get_variable` hands the getter its
  scope's default dtype (float32) and infers the real one from the value.
  """
  if initializer is not None and not callable(initializer):
    if isinstance(initializer, (tf.Tensor, tf.Variable)):
      return initializer.dtype.base_dtype
    values = np.asarray(initializer)
    if values.dtype.kind == "f":
      return tf.as_dtype(values.dtype)
  return tf.float32 if dtype is None else tf.as_dtype(dtype).base_dtype


def float32_variable_getter(getter, name, *args, dtype=None, initializer=None,
                            trainable=None, **kwargs):
  """A `custom_getter` that stores trainable 16-bit variables in float32.

  For `tf.compat.v1.variable_scope(..., custom_getter=...)`. A trainable
  variable requested as float16 (or bfloat16) is created in float32 and
  returned as a cast to the requested dtype; anything else is created as
  requested. Value initializers (tensors, arrays) are cast to float32;
  initializer objects are called with `dtype=float32`; regularizers,
  partitioners, `use_resource` and reuse are passed on unchanged, so a
  regularizer sees the float32 variable. A partitioned variable comes back
  as one cast tensor of the concatenated parts (its float32 parts are what
  is saved). Other getters of enclosing scopes are composed by
  `variable_scope` as usual.

  Example:

  ```python
  with tf.compat.v1.variable_scope(
      "model", custom_getter=mp_optimizer.float32_variable_getter):
    w = tf.compat.v1.get_variable("w", [4, 2], dtype=tf.float16)  # float16
  ```

  Args:
    getter: The next getter, as `variable_scope` passes it.
    name: The variable's full name.
    *args: Passed on to `getter`.
    dtype: The requested dtype.
    initializer: The requested initializer.
    trainable: Whether the variable is trainable (None counts as True).
    **kwargs: Passed on to `getter`.

  Returns:
    The variable, or for a trainable 16-bit request a tensor of the requested
    dtype read from a float32 variable.
  """
  requested = _requested_dtype(dtype, initializer)
  if requested not in _16BIT_FLOATS or trainable is False:
    return getter(name, *args, dtype=dtype, initializer=initializer,
                  trainable=trainable, **kwargs)
  if initializer is not None and not callable(initializer):
    initializer = tf.cast(initializer, tf.float32)
  master = getter(name, *args, dtype=tf.float32, initializer=initializer,
                  trainable=trainable, **kwargs)
  return tf.cast(master, requested)


@contextlib.contextmanager
def float32_master_weights() -> Iterator[tf.compat.v1.VariableScope]:
  """Applies `float32_variable_getter` inside the current variable scope.

  Variable names and the name scope stay as they are; a getter of the
  current or an enclosing scope still runs (this one runs first and asks it
  for the float32 variable).

  Example:

  ```python
  with mp_optimizer.float32_master_weights():
    logits = model(features)  # tf.float16 variables become float32 + cast
  ```

  Yields:
    The re-entered current variable scope.
  """
  with tf.compat.v1.variable_scope(
      tf.compat.v1.get_variable_scope(),
      custom_getter=float32_variable_getter,
      auxiliary_name_scope=False) as scope:
    yield scope


