"""The digits demo's graph: a deep ReLU MLP trained in float32 or float16.

`build` makes one run's graph in the current default graph. Variables are
float32 in every run; the forward and backward pass run in the run's dtype;
the cross-entropy is computed in float32 from float32 logits (as mixed
precision frameworks do). Every run trains through
`mp_optimizer.LossScaleOptimizer`: the fp32 and fp16 runs with a fixed scale
of 1 that applies every step (multiplying by 1 is exact, so this is plain
training), the third with the dynamic scale. So all three graphs carry the
same `mp_optimizer.add_summaries()` tags.

Underflow diagnostic: the run's gradient of the cross-entropy (times the
step's loss scale S) is compared with a float32 gradient at the same weights
and batch, through the same active ReLU units. An entry that is exactly zero
in the run but not in float32 underflowed.
"""

import argparse
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

import managers
import mp_optimizer

v1 = tf.compat.v1


def mlp(x: tf.Tensor, weights: List[Tuple[tf.Variable, tf.Variable]],
        dtype: tf.DType, masks: Optional[List[tf.Tensor]] = None
        ) -> Tuple[tf.Tensor, List[tf.Tensor]]:
  """Logits of a ReLU MLP computed in `dtype` from float32 `weights`.

  Returns the float32 logits and each hidden layer's ReLU mask (1 where
  active). With `masks` given, those masks replace the ReLUs, so a float32
  copy of the net follows exactly the units the float16 net kept alive.
  """
  h, active = tf.cast(x, dtype), []
  for i, (w, b) in enumerate(weights):
    h = tf.matmul(h, tf.cast(w, dtype)) + tf.cast(b, dtype)
    if i < len(weights) - 1:
      mask = (tf.cast(h > 0, dtype) if masks is None
              else tf.cast(masks[i], dtype))
      active.append(tf.stop_gradient(mask))
      h = h * active[-1]
  return tf.cast(h, tf.float32), active


def make_weights(sizes: List[int], init_std: float, seed: int
                 ) -> List[Tuple[tf.Variable, tf.Variable]]:
  """Float32 weights, N(0, init_std**2), and zero biases; same for every run."""
  rng = np.random.RandomState(seed)
  return [(v1.get_variable(f"w{i}", initializer=(
      init_std * rng.randn(n_in, n_out)).astype(np.float32)),
           v1.get_variable(f"b{i}", initializer=np.zeros(n_out, np.float32)))
          for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:]))]


def _underflow_share(x, y, weights, cross_entropy, masks, scale):
  """Share of float32-non-zero gradient entries that are zero in the run."""
  variables = [v for pair in weights for v in pair]
  grads = tf.gradients(cross_entropy * scale, variables)
  logits32 = mlp(x, weights, tf.float32, masks)[0]
  grads32 = tf.gradients(
      tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=y, logits=logits32)), variables)
  lost = tf.add_n([tf.reduce_sum(tf.cast(
      tf.logical_and(tf.equal(g, 0.0), tf.not_equal(g32, 0.0)), tf.float32))
                   for g, g32 in zip(grads, grads32)])
  nonzero = tf.add_n([tf.reduce_sum(tf.cast(tf.not_equal(g32, 0.0),
                                            tf.float32)) for g32 in grads32])
  return lost / tf.maximum(nonzero, 1.0)


def build(dtype: tf.DType, scaled: bool,
          args: argparse.Namespace) -> Dict[str, tf.Tensor]:
  """Builds one run's graph in the default graph.

  Args:
    dtype: tf.float32 or tf.float16, the dtype of the forward/backward pass.
    scaled: True for dynamic loss scaling, False for a fixed scale of 1.
    args: The demo's parsed flags (depth, width, init_std, learning_rate,
      momentum, weight_decay, seed).

  Returns:
    A dict of the placeholders, ops and tensors the training loop fetches.
  """
  x = v1.placeholder(tf.float32, [None, 64], name="x")
  y = v1.placeholder(tf.int64, [None], name="y")
  weights = make_weights([64] + [args.width] * args.depth + [10],
                         args.init_std, args.seed)
  logits, masks = mlp(x, weights, dtype)
  cross_entropy = tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
  # L2 weight decay in the loss, on the float32 weights (as TF's official
  # ResNet models write it).
  loss = cross_entropy + args.weight_decay * tf.add_n(
      [tf.nn.l2_loss(w) for w, _ in weights])
  global_step = v1.train.get_or_create_global_step()
  manager = (managers.ExponentialUpdateLossScaleManager(
      init_loss_scale=2**15, incr_every_n_steps=200) if scaled else
             managers.FixedLossScaleManager(1, skip_nonfinite_steps=False))
  opt = mp_optimizer.LossScaleOptimizer(
      v1.train.MomentumOptimizer(args.learning_rate, args.momentum), manager)
  train_op = opt.minimize(loss, global_step=global_step)

  scale = mp_optimizer.signals.loss_scale()
  accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y),
                                    tf.float32))
  underflow = _underflow_share(x, y, weights, cross_entropy, masks, scale)
  # Fixed, absolute scopes in a fresh graph: the same tags in every run.
  step_summaries = [mp_optimizer.add_summaries()]
  with v1.name_scope("digits/"):
    step_summaries.append(v1.summary.scalar("train_loss", cross_entropy))
    test_summary = v1.summary.scalar("test_accuracy", accuracy)
    underflow_summary = v1.summary.scalar("underflow_share", underflow)
  return dict(x=x, y=y, train_op=train_op, loss=cross_entropy, scale=scale,
              applied=mp_optimizer.step_applied(),
              skipped=mp_optimizer.skipped_steps(), accuracy=accuracy,
              underflow=underflow,
              step_summaries=v1.summary.merge(step_summaries),
              test_summary=test_summary, underflow_summary=underflow_summary)
