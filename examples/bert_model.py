"""The BERT-style demo's model and data: a small fp16 transformer encoder.

`generate` draws the masked-token task: each sequence takes its first half
from one of a few topics and repeats it, so a masked token can be guessed
from the topic and read off its twin. `masked_lm_loss` builds the loss of a
two-layer encoder on it: float32 master weights, cast to float16 (or the
`dtype` given: bfloat16, float32) for the matmuls, attention and
feed-forward; LayerNorm and softmax statistics in float32. The variables
and their names are the same in every dtype, so a checkpoint of one
restores into another. `examples/bert_pretraining.py` trains it.
"""

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1
F16 = tf.float16
VOCAB, MASK_ID, LENGTH, HIDDEN, HEADS, LAYERS = 201, 0, 32, 64, 4, 2


def generate(rng, batch):
  """Token ids [batch, LENGTH], masked copies, and the mask (15%).

  Each sequence draws its first half from one of 8 topics (25 token ids
  each) and repeats it: a masked token is guessable from the topic (loss
  ln 25 = 3.2 instead of ln 200 = 5.3) and readable from its twin.
  """
  topics = rng.randint(0, 8, size=(batch, 1))
  half = 1 + topics * 25 + rng.randint(0, 25, size=(batch, LENGTH // 2))
  tokens = np.concatenate([half, half], axis=1)
  mask = rng.rand(batch, LENGTH) < 0.15
  return tokens, np.where(mask, MASK_ID, tokens), mask.astype(np.float32)


def dense(x, units, name, dtype=F16):
  w = v1.get_variable(f"{name}/kernel", [x.shape[-1], units],
                      initializer=v1.truncated_normal_initializer(stddev=0.02))
  b = v1.get_variable(f"{name}/bias", [units], initializer=v1.zeros_initializer())
  return tf.tensordot(x, tf.cast(w, dtype), 1) + tf.cast(b, dtype)


def layer_norm(x, name, dtype=F16):
  """LayerNorm in float32, returned in `dtype`."""
  x = tf.cast(x, tf.float32)
  mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
  gamma = v1.get_variable(f"{name}/LayerNorm/gamma", [HIDDEN],
                          initializer=v1.ones_initializer())
  beta = v1.get_variable(f"{name}/LayerNorm/beta", [HIDDEN],
                         initializer=v1.zeros_initializer())
  return tf.cast((x - mean) * tf.math.rsqrt(var + 1e-12) * gamma + beta,
                 dtype)


def encoder_layer(h, name, dtype=F16):
  def heads(t):
    return tf.transpose(tf.reshape(t, [-1, LENGTH, HEADS, HIDDEN // HEADS]),
                        [0, 2, 1, 3])

  q, k, v = (heads(dense(h, HIDDEN, f"{name}/{n}", dtype)) for n in "qkv")
  logits = tf.matmul(q, k, transpose_b=True) / np.sqrt(HIDDEN // HEADS)
  weights = tf.cast(tf.nn.softmax(tf.cast(logits, tf.float32)), dtype)
  context = tf.reshape(tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3]),
                       [-1, LENGTH, HIDDEN])
  h = layer_norm(
      h + dense(context, HIDDEN, f"{name}/attention_output", dtype),
      f"{name}/attention", dtype)
  ffn = dense(tf.nn.gelu(dense(h, 4 * HIDDEN, f"{name}/intermediate", dtype)),
              HIDDEN, f"{name}/output", dtype)
  return layer_norm(h + ffn, f"{name}/output", dtype)


def masked_lm_loss(inputs, targets, mask, dtype=F16):
  """The masked tokens' mean cross-entropy, float32; computed in `dtype`."""
  table = v1.get_variable("embeddings/word", [VOCAB, HIDDEN],
                          initializer=v1.truncated_normal_initializer(stddev=0.02))
  position = v1.get_variable("embeddings/position", [LENGTH, HIDDEN],
                             initializer=v1.truncated_normal_initializer(
                                 stddev=0.02))
  h = layer_norm(tf.cast(tf.gather(table, inputs) + position, dtype),
                 "embeddings", dtype)
  for i in range(LAYERS):
    h = encoder_layer(h, f"encoder/layer_{i}", dtype)
  logits = tf.cast(tf.tensordot(h, tf.cast(table, dtype), [[2], [1]]),
                   tf.float32)
  per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets,
                                                             logits=logits)
  return tf.reduce_sum(per_token * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)
