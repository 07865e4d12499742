"""Model shapes to measure on: float32 variables, float16 compute.

Each shape builds a loss at a given size, so that ops added per variable can
be read off as a slope between two sizes. Inputs are fixed random constants:
a step reads no feed, and every step's gradients are finite.
"""

import dataclasses
import functools
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1
F16, F32 = tf.float16, tf.float32


@dataclasses.dataclass(frozen=True)
class Shape:
  """A family of models.

  Attributes:
    name: Short key, used on the command line and in tables.
    label: What the benchmarked member looks like, for the report.
    build: Builds the loss of the member of a given size in the default graph.
    size: The benchmarked size.
    other_size: A second size, for the slope of ops against variables.
    tiny: The same builder with small variables, for `smoke`; None when
      `build`'s are small already.
  """
  name: str
  label: str
  build: Callable[[int], tf.Tensor]
  size: int
  other_size: int
  tiny: Optional[Callable[[int], tf.Tensor]] = None


def _dense_stack(widths, batch: int, seed: int = 0) -> tf.Tensor:
  """ReLU layers between `widths`, He-initialized so activations stay O(1)."""
  rng = np.random.RandomState(seed)
  inputs = tf.constant(rng.randn(batch, widths[0]).astype(np.float32))
  hidden = tf.cast(inputs, F16)
  for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
    he_normal = rng.randn(fan_in, fan_out) * np.sqrt(2.0 / fan_in)
    kernel = v1.get_variable(f"dense_{i}/kernel",
                             initializer=he_normal.astype(np.float32))
    bias = v1.get_variable(f"dense_{i}/bias",
                           initializer=np.zeros(fan_out, np.float32))
    hidden = tf.nn.relu(tf.matmul(hidden, tf.cast(kernel, F16)) +
                        tf.cast(bias, F16))
  return tf.reduce_mean(tf.square(tf.cast(hidden, F32)))


def many_small(layers: int) -> tf.Tensor:
  """`layers` layers of 64x64 (kernel and bias each), batch 32."""
  return _dense_stack([64] * (layers + 1), batch=32)


def distinct_shapes(layers: int) -> tf.Tensor:
  """Like `many_small`, but widths 16, 17, 18...: no two variables alike."""
  return _dense_stack([16 + i for i in range(layers + 1)], batch=32)


def chain(layers: int, width: int = 32, batch: int = 8) -> tf.Tensor:
  """`layers` bias-free layers of width x width, each feeding the next.

  Kernels are random orthogonal matrices, so a chain of thousands keeps the
  activations' and gradients' size in float16, and no step overflows. Each
  variable's gradient exists only once backprop has reached its layer, as in
  a deep model: an update held back for the last gradient loses its overlap
  with the rest of backprop.
  """
  rng = np.random.RandomState(0)
  hidden = tf.cast(tf.constant(rng.randn(batch, width).astype(np.float32)),
                   F16)
  for i in range(layers):
    q, r = np.linalg.qr(rng.randn(width, width))
    kernel = v1.get_variable(f"layer_{i}/kernel",
                             initializer=(q * np.sign(np.diag(r))).astype(
                                 np.float32))
    hidden = tf.matmul(hidden, tf.cast(kernel, F16))
  return tf.reduce_mean(tf.square(tf.cast(hidden, F32)))


def wide(layers: int, width: int = 1024) -> tf.Tensor:
  """`layers` layers of width x width (1024 unless given), batch 64."""
  return _dense_stack([width] * (layers + 1), batch=64)


def embedding(tables: int, rows: int = 50_000, dim: int = 64,
              batch: int = 256) -> tf.Tensor:
  """`tables` tables of rows x dim, 256 lookups each, into one 64x1 head.

  The tables' gradients are `tf.IndexedSlices` of 256 rows. The tables are
  initialized by a seeded op, not from a constant: a graph (and each of its
  copies) would otherwise hold every table's values once more.
  """
  rng = np.random.RandomState(0)
  lookups = []
  for i in range(tables):
    table = v1.get_variable(
        f"embedding_{i}", [rows, dim], tf.float32,
        initializer=v1.random_normal_initializer(stddev=0.1, seed=i))
    ids = tf.constant(rng.randint(0, rows, size=batch))
    lookups.append(tf.cast(tf.gather(table, ids), F16))
  summed = lookups[0] if tables == 1 else tf.add_n(lookups)
  head = v1.get_variable("head", initializer=(rng.randn(dim, 1) * 0.1).astype(
      np.float32))
  out = tf.matmul(summed, tf.cast(head, F16))
  return tf.reduce_mean(tf.square(tf.cast(out, F32) - 1.0))


SHAPES = {
    "many_small": Shape("many_small", "100 layers of 64x64, batch 32",
                        many_small, size=100, other_size=20),
    "wide": Shape("wide", "4 layers of 1024x1024, batch 64", wide,
                  size=4, other_size=2,
                  tiny=functools.partial(wide, width=32)),
    "embedding": Shape("embedding",
                       "50,000x64 embedding, 256 lookups, 64x1 head",
                       embedding, size=1, other_size=3,
                       tiny=functools.partial(embedding, rows=500)),
}

def smoke(shape: Shape) -> Shape:
  """`shape` at two tiny sizes, with small variables, for a run that only
  checks the benchmark."""
  size, other = min(shape.size, 2), min(shape.other_size, 3)
  label = shape.label if shape.tiny is None else f"{shape.label}, made small"
  return dataclasses.replace(
      shape, label=label, build=shape.tiny or shape.build, size=size,
      other_size=other if other != size else size + 1)


# Only for counting ops: the worst case for grouping by shape.
DISTINCT = Shape("distinct", "layers 16x17, 17x18, ... (no two shapes alike)",
                 distinct_shapes, size=20, other_size=10)


# At N variables, the wide and embedding families keep their total size
# (the N=10 member's) and make each variable smaller: N=1,000 members of
# 1024x1024 or of 50,000x64 would need tens of GB with Adam's slots.
WIDE_PARAMETERS = 5 * 1024 * 1024
EMBEDDING_ROWS = 50_000 * 9
FAMILY_LABELS = {
    "many_small": "N/2 layers of 64x64 (kernel, bias), batch 32",
    "wide": "N/2 layers of width w (kernel, bias), batch 64; w = 1024 at "
            "N=10, then w^2 N/2 stays about 5.2M",
    "embedding": "N-1 tables of r x 64 (256 lookups each) and a 64x1 head; "
                 "r = 50,000 at N=10, then r (N-1) stays 450,000",
}


def wide_width(variables: int) -> int:
  """The width of the wide family's member with `variables` variables."""
  layers = max(1, variables // 2)
  return min(1024, int(np.sqrt(WIDE_PARAMETERS / layers)) // 8 * 8)


def with_variables(family: str, variables: int) -> tf.Tensor:
  """Builds the loss of `family`'s member with `variables` trainable ones.

  Raises:
    ValueError: For a family not in `FAMILY_LABELS`.
  """
  if family == "many_small":
    return many_small(max(1, variables // 2))
  if family == "wide":
    return wide(max(1, variables // 2), wide_width(variables))
  if family == "embedding":
    tables = max(1, variables - 1)
    return embedding(tables, rows=EMBEDDING_ROWS // tables)
  raise ValueError(f"`family` must be one of {sorted(FAMILY_LABELS)}, got "
                   f"{family!r}.")
