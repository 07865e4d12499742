"""Small real models for the tests: fp32 variables, fp16 compute.

`poison` multiplies the loss: feed NaN or Inf to make every gradient of that
model non-finite, 1.0 (the default) for a clean step.
"""

import contextlib

import numpy as np
import tensorflow as tf

F16, F32 = tf.float16, tf.float32

OPTIMIZERS = {
    "sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
    "adam": lambda: tf.compat.v1.train.AdamOptimizer(0.01),
}


def poison_input(name: str = "poison") -> tf.Tensor:
  return tf.compat.v1.placeholder_with_default(1.0, [], name=name)


def dense_loss(poison: tf.Tensor, scope: str = "dense",
               compute_dtype: tf.DType = F16) -> tf.Tensor:
  """A 4->2 linear regression on fixed random data; returns a float32 loss."""
  rng = np.random.RandomState(0)
  x = tf.constant(rng.randn(16, 4).astype(np.float32))
  y = tf.constant(rng.randn(16, 2).astype(np.float32))
  with tf.compat.v1.variable_scope(scope):
    w = tf.compat.v1.get_variable(
        "w", initializer=(0.5 * rng.randn(4, 2)).astype(np.float32))
    b = tf.compat.v1.get_variable("b", initializer=np.zeros(2, np.float32))
  pred = (tf.matmul(tf.cast(x, compute_dtype), tf.cast(w, compute_dtype)) +
          tf.cast(b, compute_dtype))
  return tf.reduce_mean(tf.square(tf.cast(pred, F32) - y)) * poison


def embedding_loss(poison: tf.Tensor, rows: int = 10) -> tf.Tensor:
  """Looks up rows 1, 3, 3 of a table: its gradient is tf.IndexedSlices."""
  rng = np.random.RandomState(1)
  table = tf.compat.v1.get_variable(
      "table", initializer=rng.randn(rows, 3).astype(np.float32))
  looked_up = tf.gather(table, tf.constant([1, 3, 3]))
  return tf.reduce_sum(tf.square(tf.cast(looked_up, F16))) * tf.cast(poison,
                                                                      F16)


@contextlib.contextmanager
def legacy_graph_behavior(legacy: bool):
  """With legacy=True, builds as TF1 did: v1 control flow, ref variables.

  This is what `tf.compat.v1.disable_v2_behavior()` selects for those two
  switches; they are restored afterwards so other tests are unaffected.
  """
  if not legacy:
    yield
    return
  tf.compat.v1.disable_control_flow_v2()
  tf.compat.v1.disable_resource_variables()
  try:
    yield
  finally:
    tf.compat.v1.enable_control_flow_v2()
    tf.compat.v1.enable_resource_variables()


def regression(batch_rows: int = None, compute_dtype: tf.DType = F32):
  """A fed linear regression: returns (x, y, loss) with x [n, 4], y [n, 2]."""
  x = tf.compat.v1.placeholder(tf.float32, [batch_rows, 4], name="x")
  y = tf.compat.v1.placeholder(tf.float32, [batch_rows, 2], name="y")
  rng = np.random.RandomState(3)
  with tf.compat.v1.variable_scope("regression"):
    w = tf.compat.v1.get_variable(
        "w", initializer=(0.5 * rng.randn(4, 2)).astype(np.float32))
    b = tf.compat.v1.get_variable("b", initializer=np.zeros(2, np.float32))
  pred = (tf.matmul(tf.cast(x, compute_dtype), tf.cast(w, compute_dtype)) +
          tf.cast(b, compute_dtype))
  return x, y, tf.reduce_mean(tf.square(tf.cast(pred, F32) - y))


def regression_data(rows: int, seed: int = 0):
  rng = np.random.RandomState(seed)
  return (rng.randn(rows, 4).astype(np.float32),
          (3.0 * rng.randn(rows, 2)).astype(np.float32))
