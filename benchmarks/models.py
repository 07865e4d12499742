"""Realistic models for the benchmark: float16 compute, float32 variables.

Each builder makes its loss in the default graph from fixed random inputs
(a step reads no feed) and float32 variables read through a cast to float16,
as mixed-precision TF1 code does:

* `resnet20`: ResNet-20 for 32x32 images (3 stages of 3 basic blocks, 16,
  32 and 64 channels), batch 8 (float16 convolutions are slow on CPUs
  without AVX-512), with batch norm in training mode whose
  moving averages are updated by ops in `UPDATE_OPS`;
* `bert_like`: a 4-layer Transformer encoder (hidden 128, 2 heads,
  feed-forward 512) on sequences of 64 tokens, batch 16, with a 30,000-row
  token embedding read by `tf.gather` (its gradient is a
  `tf.IndexedSlices`) and a 2-class head;
* `wide_and_deep`: a linear part on a 100,000-row hashed cross feature and
  a deep part on 26 categorical features (10,000 x 16 embeddings each)
  plus 13 dense ones through 3 ReLU layers of 256, batch 256, sigmoid loss.
"""

from typing import Callable, Dict

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1
F16, F32 = tf.float16, tf.float32
_RNG_SEED = 0


def _variable(name: str, shape, stddev: float, rng) -> tf.Variable:
  return v1.get_variable(name, initializer=(
      rng.randn(*shape) * stddev).astype(np.float32))


def _read16(variable: tf.Variable) -> tf.Tensor:
  return tf.cast(variable, F16)


def _batch_norm(name: str, x: tf.Tensor) -> tf.Tensor:
  """Fused batch norm in training mode; moving averages into UPDATE_OPS."""
  channels = x.shape[-1]
  with v1.variable_scope(name):
    gamma = v1.get_variable("gamma", initializer=tf.ones([channels]))
    beta = v1.get_variable("beta", initializer=tf.zeros([channels]))
    moving_mean = v1.get_variable("moving_mean", initializer=tf.zeros(
        [channels]), trainable=False)
    moving_var = v1.get_variable("moving_variance", initializer=tf.ones(
        [channels]), trainable=False)
  y, mean, variance = v1.nn.fused_batch_norm(x, gamma, beta, epsilon=1e-5,
                                             is_training=True)
  for average, batch in ((moving_mean, mean), (moving_var, variance)):
    v1.add_to_collection(v1.GraphKeys.UPDATE_OPS, v1.assign_sub(
        average, (average - batch) * 0.1))
  return y


def _conv(name: str, x: tf.Tensor, out: int, stride: int, rng) -> tf.Tensor:
  fan_in = 9 * int(x.shape[-1])
  kernel = _variable(name, (3, 3, int(x.shape[-1]), out),
                     np.sqrt(2.0 / fan_in), rng)
  return tf.nn.conv2d(x, _read16(kernel), strides=stride, padding="SAME")


def resnet20(batch: int = 8) -> tf.Tensor:
  rng = np.random.RandomState(_RNG_SEED)
  images = tf.constant(rng.rand(batch, 32, 32, 3).astype(np.float16))
  labels = tf.constant(rng.randint(0, 10, size=batch))
  x = tf.nn.relu(_batch_norm("bn0", _conv("conv0", images, 16, 1, rng)))
  for stage, channels in enumerate((16, 32, 64)):
    for block in range(3):
      name = f"stage{stage}/block{block}"
      stride = 2 if stage and not block else 1
      y = tf.nn.relu(_batch_norm(f"{name}/bn1",
                                 _conv(f"{name}/conv1", x, channels, stride,
                                       rng)))
      y = _batch_norm(f"{name}/bn2", _conv(f"{name}/conv2", y, channels, 1,
                                           rng))
      if stride != 1 or int(x.shape[-1]) != channels:  # Option A shortcut.
        x = tf.pad(x[:, ::stride, ::stride, :],
                   [[0, 0], [0, 0], [0, 0],
                    [0, channels - int(x.shape[-1])]])
      x = tf.nn.relu(x + y)
  pooled = tf.reduce_mean(x, axis=[1, 2])
  logits = _dense("logits", pooled, 10, rng)
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=tf.cast(logits, F32)))


def _dense(name: str, x: tf.Tensor, out: int, rng) -> tf.Tensor:
  fan_in = int(x.shape[-1])
  kernel = _variable(f"{name}/kernel", (fan_in, out), np.sqrt(1.0 / fan_in),
                     rng)
  bias = v1.get_variable(f"{name}/bias", initializer=tf.zeros([out]))
  return tf.matmul(x, _read16(kernel)) + _read16(bias)


def _layer_norm(name: str, x: tf.Tensor) -> tf.Tensor:
  """Layer norm computed in float32 (its sums would lose float16 bits)."""
  width = int(x.shape[-1])
  gamma = v1.get_variable(f"{name}/gamma", initializer=tf.ones([width]))
  beta = v1.get_variable(f"{name}/beta", initializer=tf.zeros([width]))
  x32 = tf.cast(x, F32)
  mean, variance = tf.nn.moments(x32, axes=[-1], keepdims=True)
  return tf.cast((x32 - mean) * tf.math.rsqrt(variance + 1e-6) * gamma + beta,
                 F16)


def bert_like(batch: int = 16, length: int = 64, vocab: int = 30_000,
              hidden: int = 128, heads: int = 2, layers: int = 4) -> tf.Tensor:
  rng = np.random.RandomState(_RNG_SEED)
  ids = tf.constant(rng.randint(0, vocab, size=(batch, length)))
  labels = tf.constant(rng.randint(0, 2, size=batch))
  table = _variable("word_embeddings", (vocab, hidden), 0.02, rng)
  positions = _variable("position_embeddings", (length, hidden), 0.02, rng)
  x = _layer_norm("embeddings/norm", tf.cast(
      tf.gather(table, ids) + positions, F16))
  flat = tf.reshape(x, [batch * length, hidden])
  size = hidden // heads
  for layer in range(layers):
    name = f"layer{layer}"

    def split(t):
      return tf.transpose(tf.reshape(t, [batch, length, heads, size]),
                          [0, 2, 1, 3])

    q, k, v = (split(_dense(f"{name}/{part}", flat, hidden, rng))
               for part in ("query", "key", "value"))
    scores = tf.matmul(q, k, transpose_b=True) * (1.0 / np.sqrt(size))
    weights = tf.cast(tf.nn.softmax(tf.cast(scores, F32)), F16)
    context = tf.reshape(tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3]),
                         [batch * length, hidden])
    flat = _layer_norm(f"{name}/attention_norm",
                       flat + _dense(f"{name}/output", context, hidden, rng))
    inner = tf.nn.relu(_dense(f"{name}/intermediate", flat, 4 * hidden, rng))
    flat = _layer_norm(f"{name}/output_norm",
                       flat + _dense(f"{name}/ffn_output", inner, hidden, rng))
  first = tf.reshape(flat, [batch, length, hidden])[:, 0, :]
  logits = _dense("classifier", tf.tanh(_dense("pooler", first, hidden, rng)),
                  2, rng)
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=tf.cast(logits, F32)))


def wide_and_deep(batch: int = 256, categorical: int = 26, rows: int = 10_000,
                  dim: int = 16, cross_rows: int = 100_000) -> tf.Tensor:
  rng = np.random.RandomState(_RNG_SEED)
  labels = tf.constant(rng.randint(0, 2, size=(batch, 1)).astype(np.float32))
  dense_features = tf.constant(rng.randn(batch, 13).astype(np.float16))
  cross = _variable("wide/cross_weights", (cross_rows, 1), 0.01, rng)
  wide_logit = tf.cast(tf.gather(cross, tf.constant(
      rng.randint(0, cross_rows, size=batch))), F16)
  embedded = [dense_features]
  for i in range(categorical):
    table = _variable(f"deep/embedding_{i}", (rows, dim), 0.05, rng)
    embedded.append(tf.cast(tf.gather(table, tf.constant(
        rng.randint(0, rows, size=batch))), F16))
  x = tf.concat(embedded, axis=1)
  for i in range(3):
    x = tf.nn.relu(_dense(f"deep/hidden_{i}", x, 256, rng))
  logit = _dense("deep/logit", x, 1, rng) + wide_logit
  return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
      labels=labels, logits=tf.cast(logit, F32)))


MODELS: Dict[str, Callable[..., tf.Tensor]] = {
    "resnet20": resnet20, "bert_like": bert_like,
    "wide_and_deep": wide_and_deep}
# Arguments that make each model tiny, for a run that only checks the code.
SMOKE = {"resnet20": {"batch": 1}, "bert_like": dict(
    batch=2, length=8, vocab=500, layers=1),
         "wide_and_deep": dict(batch=8, categorical=2, rows=100,
                               cross_rows=100)}
LABELS = {
    "resnet20": "ResNet-20, 32x32x3, batch 8, batch norm (UPDATE_OPS)",
    "bert_like": "4-layer encoder, hidden 128, 30,000-row embedding "
                 "(sparse gradient), 64 tokens, batch 16",
    "wide_and_deep": "wide (100,000-row cross) and deep (26 x 10,000x16 "
                     "embeddings, 3 x 256 ReLU), batch 256",
}
