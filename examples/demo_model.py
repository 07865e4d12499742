"""The digits demo's graph: a leaky-ReLU MLP in float32, float16 or bfloat16.

`build` makes one run's graph in the current default graph. Variables are
float32 in every run; the forward and backward pass run in the run's dtype;
the cross-entropy is computed in float32 from float32 logits (as mixed
precision frameworks do). Every run trains through
`mp_optimizer.LossScaleOptimizer`: the fp32 and fp16 runs with a fixed scale
of 1 that applies every step (multiplying by 1 is exact, so this is plain
training), the third with the dynamic scale, the bfloat16 run in the
bfloat16 mode (`managers.NoLossScale()`: no scale, non-finite steps
skipped). So all four graphs carry the same `mp_optimizer.add_summaries()`
tags.

The loss weights each image's cross-entropy by `example_weight` (2**-30 by
default), the weight one element has in a loss averaged over 2**30 elements.
The gradient of a cross-entropy at its logits is softmax - one_hot, whose
entries are all smaller than 1 in magnitude, so every entry of the float16
gradient at the logits is below `example_weight`: with 2**-30 that is far
below float16's smallest subnormal, 2**-24, and it rounds to exactly zero,
whatever the CPU. bfloat16 has float32's exponent range: its gradients keep
those entries without any scale. Adam's step does not depend on the gradient's size (its
epsilon is scaled by the same weight), so float32 trains as with weight 1.

Underflow diagnostic: the run's gradient of the weighted loss (times the
step's loss scale S) is compared with a float32 gradient at the same weights
and batch, through the same branch of every leaky-ReLU unit. An entry that is exactly zero
in the run but not in float32 underflowed.
"""

import argparse
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers

v1 = tf.compat.v1
ADAM_EPSILON = 1e-8  # Adam's usual epsilon, for a loss of weight 1.
# The slope of the hidden units below 0. Not 0: a plain ReLU unit that is
# off for a whole batch has exactly zero gradients in float32 too, and such
# zeros would blur the picture of underflow (with ReLU, 14% of the scaled
# run's float16 gradient entries were zero for that reason alone).
LEAK = 0.1


def mlp(x: tf.Tensor, weights: List[Tuple[tf.Variable, tf.Variable]],
        dtype: tf.DType, masks: Optional[List[tf.Tensor]] = None
        ) -> Tuple[tf.Tensor, List[tf.Tensor]]:
  """Logits of a leaky-ReLU MLP computed in `dtype` from float32 `weights`.

  Returns the float32 logits and each hidden layer's slopes (1 where the
  unit's input is above 0, `LEAK` elsewhere). With `masks` given, those
  slopes replace the activations' own, so a float32 copy of the net follows
  exactly the branch each float16 unit took.
  """
  h, active = tf.cast(x, dtype), []
  for i, (w, b) in enumerate(weights):
    h = tf.matmul(h, tf.cast(w, dtype)) + tf.cast(b, dtype)
    if i < len(weights) - 1:
      slope = (tf.where(h > 0, tf.ones_like(h), LEAK * tf.ones_like(h))
               if masks is None else tf.cast(masks[i], dtype))
      active.append(tf.stop_gradient(slope))
      h = h * active[-1]
  return tf.cast(h, tf.float32), active


def make_weights(sizes: List[int], seed: int
                 ) -> List[Tuple[tf.Variable, tf.Variable]]:
  """Float32 weights, He-normal (std sqrt(2 / fan_in)), and zero biases.

  The same numbers in every run: they come from numpy with a fixed seed.
  """
  rng = np.random.RandomState(seed)
  return [(v1.get_variable(f"w{i}", initializer=(
      np.sqrt(2.0 / n_in) * rng.randn(n_in, n_out)).astype(np.float32)),
           v1.get_variable(f"b{i}", initializer=np.zeros(n_out, np.float32)))
          for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:]))]


def weighted_loss(labels: tf.Tensor, logits: tf.Tensor,
                  example_weight: float) -> Tuple[tf.Tensor, tf.Tensor]:
  """Returns (the weighted sum of cross-entropies, their mean), float32."""
  per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=logits)
  return (example_weight * tf.reduce_sum(per_example),
          tf.reduce_mean(per_example))


def _underflow_share(x, y, weights, loss, masks, scale, example_weight):
  """Share of float32-non-zero gradient entries that are zero in the run."""
  variables = [v for pair in weights for v in pair]
  grads = tf.gradients(loss * scale, variables)
  logits32 = mlp(x, weights, tf.float32, masks)[0]
  grads32 = tf.gradients(weighted_loss(y, logits32, example_weight)[0],
                         variables)
  lost = tf.add_n([tf.reduce_sum(tf.cast(
      tf.logical_and(tf.equal(g, 0.0), tf.not_equal(g32, 0.0)), tf.float32))
                   for g, g32 in zip(grads, grads32)])
  nonzero = tf.add_n([tf.reduce_sum(tf.cast(tf.not_equal(g32, 0.0),
                                            tf.float32)) for g32 in grads32])
  return lost / tf.maximum(nonzero, 1.0)


def make_manager(scaling: str,
                 args: argparse.Namespace) -> managers.LossScaleManager:
  """The run's manager: "dynamic", "fixed" (1, every step applied) or
  "none" (the bfloat16 mode)."""
  if scaling == "dynamic":
    return managers.ExponentialUpdateLossScaleManager(
        init_loss_scale=args.init_loss_scale,
        incr_every_n_steps=args.incr_every_n_steps)
  if scaling == "none":
    return managers.NoLossScale()
  return managers.FixedLossScaleManager(1, skip_nonfinite_steps=False)


def build(dtype: tf.DType, scaling: str, pixels: int,
          args: argparse.Namespace) -> Dict[str, tf.Tensor]:
  """Builds one run's graph in the default graph.

  Args:
    dtype: tf.float32, tf.float16 or tf.bfloat16, the dtype of the
      forward/backward pass.
    scaling: "dynamic" loss scaling, a "fixed" scale of 1, or "none" (the
      bfloat16 mode), as `make_manager`.
    pixels: The number of input features per image.
    args: The demo's parsed flags (depth, width, learning_rate,
      example_weight, init_loss_scale, incr_every_n_steps, seed).

  Returns:
    A dict of the placeholders, ops and tensors the training loop fetches.
  """
  x = v1.placeholder(tf.float32, [None, pixels], name="x")
  y = v1.placeholder(tf.int64, [None], name="y")
  weights = make_weights([pixels] + [args.width] * args.depth + [10],
                         args.seed)
  logits, masks = mlp(x, weights, dtype)
  loss, cross_entropy = weighted_loss(y, logits, args.example_weight)
  global_step = v1.train.get_or_create_global_step()
  manager = make_manager(scaling, args)
  opt = mp_optimizer.LossScaleOptimizer(
      v1.train.AdamOptimizer(args.learning_rate,
                             epsilon=ADAM_EPSILON * args.example_weight),
      manager, precision_telemetry=True)
  train_op = opt.minimize(loss, global_step=global_step)
  # What the newest step stored: mean over the variable groups of the share
  # of gradient entries zero in float16 at the step's scale.
  telemetry_zeros = 100.0 * tf.reduce_mean(
      mp_optimizer.signals.precision()["zero_share"])

  scale = mp_optimizer.signals.loss_scale()
  accuracy = 100.0 * tf.reduce_mean(
      tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
  zeros = 100.0 * _underflow_share(x, y, weights, loss, masks, scale,
                                   args.example_weight)
  # Fixed, absolute scopes in a fresh graph: the same tags in every run.
  step_summaries = [mp_optimizer.add_summaries()]
  with v1.name_scope("digits/"):
    step_summaries.append(v1.summary.scalar("train_loss", cross_entropy))
    test_summary = v1.summary.scalar("test_accuracy_percent", accuracy)
    zeros_summary = v1.summary.scalar("zero_gradient_entries_percent", zeros)
  return dict(x=x, y=y, train_op=train_op, loss=cross_entropy, scale=scale,
              applied=mp_optimizer.step_applied(),
              skipped=mp_optimizer.skipped_steps(), accuracy=accuracy,
              zeros=zeros, telemetry_zeros=telemetry_zeros,
              step_summaries=v1.summary.merge(step_summaries),
              test_summary=test_summary, zeros_summary=zeros_summary)
