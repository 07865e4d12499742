# Legacy fixture for tests/test_migrate.py: a BERT-style pre-training
# optimizer module as TF 1.14/1.15 code had it after `tf_upgrade_v2` (hence
# `tensorflow.compat.v1`), still on tf.contrib.mixed_precision and the
# tf.train.experimental loss-scale API. Keep it legacy: the tests convert it.
"""Optimizer, learning-rate schedule and train op for pre-training."""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import re

import tensorflow.compat.v1 as tf


def create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps,
                     manual_fp16=False, use_fp16=False,
                     num_accumulation_steps=1, init_loss_scale=2**15):
  """Builds the train op: AdamW, global-norm clipping, optional accumulation.

  Args:
    loss: Scalar float32 loss.
    init_lr: Peak learning rate, reached after the warmup.
    num_train_steps: Steps over which the rate decays linearly to zero.
    num_warmup_steps: Steps of linear warmup (0 for none).
    manual_fp16: The model computes in float16 itself; wrap the optimizer in
      contrib's loss-scale optimizer.
    use_fp16: Let TensorFlow's graph rewrite choose float16 ops (GPU only) and
      scale the loss dynamically.
    num_accumulation_steps: Sum gradients over this many calls, then apply.
    init_loss_scale: First loss scale of either fp16 mode.

  Returns:
    The train op. `global_step` moves once per applied, finite update.
  """
  global_step = tf.train.get_or_create_global_step()
  learning_rate = _learning_rate(init_lr, global_step, num_train_steps,
                                 num_warmup_steps)
  optimizer = AdamWeightDecayOptimizer(
      learning_rate=learning_rate,
      weight_decay_rate=0.01,
      exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])

  if use_fp16:
    # TF 1.14+: float16 graph rewrite plus dynamic loss scaling in one call.
    loss_scaler = tf.train.experimental.DynamicLossScale(
        initial_loss_scale=init_loss_scale, increment_period=1000,
        multiplier=2.0)
    optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(
        optimizer, loss_scaler)
    tf.summary.scalar("loss_scale", tf.identity(loss_scaler(),
                                                name="loss_scale"))
  if manual_fp16:
    loss_scale_manager = tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(
        init_loss_scale=init_loss_scale,
        incr_every_n_steps=1000,
        decr_every_n_nan_or_inf=2,
        decr_ratio=0.5)
    optimizer = tf.contrib.mixed_precision.LossScaleOptimizer(
        optimizer, loss_scale_manager)
    tf.summary.scalar("loss_scale", loss_scale_manager.get_loss_scale())

  check_finite = manual_fp16 or use_fp16
  tvars = tf.trainable_variables()
  # With accumulation each call sees 1/n of the loss, so the sum of n calls
  # has the scale of one full batch.
  grads_and_vars = optimizer.compute_gradients(
      loss / float(num_accumulation_steps), tvars)
  grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]

  if num_accumulation_steps > 1:
    return _accumulating_train_op(optimizer, grads_and_vars, global_step,
                                  num_accumulation_steps, check_finite)
  grads, tvars = zip(*grads_and_vars)
  finite = _all_finite(grads) if check_finite else tf.constant(True)
  apply_op = optimizer.apply_gradients(
      list(zip(_clip(grads, finite), tvars)), global_step=global_step)
  # AdamWeightDecayOptimizer leaves global_step alone: count finite steps here.
  with tf.control_dependencies([apply_op]):
    next_step = tf.where(finite, global_step + 1, global_step)
    return tf.group(apply_op, global_step.assign(next_step))


def _learning_rate(init_lr, global_step, num_train_steps, num_warmup_steps):
  """Linear warmup from 0 to `init_lr`, then linear decay to 0."""
  decayed = tf.train.polynomial_decay(
      tf.constant(init_lr, dtype=tf.float32), global_step, num_train_steps,
      end_learning_rate=0.0, power=1.0, cycle=False)
  if not num_warmup_steps:
    return decayed
  step = tf.cast(global_step, tf.float32)
  warmup = init_lr * step / float(num_warmup_steps)
  return tf.where(step < num_warmup_steps, warmup, decayed)


def _all_finite(grads):
  return tf.reduce_all([tf.reduce_all(tf.is_finite(g)) for g in grads])


def _clip(grads, finite):
  # Clip with the real norm only when it is finite: an Inf norm would turn
  # every clipped gradient into NaN, and the step is skipped anyway.
  norm = tf.cond(finite, lambda: tf.global_norm(grads),
                 lambda: tf.constant(1.0))
  clipped, _ = tf.clip_by_global_norm(grads, clip_norm=1.0, use_norm=norm)
  return clipped


def _accumulating_train_op(optimizer, grads_and_vars, global_step, n,
                           check_finite):
  """Sums clipped gradients over `n` calls and applies the sum on the n-th."""
  grads, tvars = zip(*grads_and_vars)
  calls = tf.get_variable("accum_calls", shape=[], dtype=tf.int32,
                          trainable=False, initializer=tf.zeros_initializer())
  window_finite = tf.get_variable("accum_finite", shape=[], dtype=tf.bool,
                                  trainable=False,
                                  initializer=tf.ones_initializer())
  sums = [tf.get_variable(v.op.name + "/accum", shape=v.shape.as_list(),
                          dtype=tf.float32, trainable=False,
                          initializer=tf.zeros_initializer())
          for v in tvars]

  # One read-modify-write of the counter per call; everything else derives
  # from its result, so no op races with the increment.
  count = calls.assign_add(1)
  first = tf.equal(tf.mod(count, n), 1 % n)
  last = tf.equal(tf.mod(count, n), 0)
  finite = _all_finite(grads) if check_finite else tf.constant(True)
  clipped = _clip(grads, finite)
  # The first call of a window overwrites the sums, later calls add to them.
  summed = tf.cond(first,
                   lambda: [s.assign(g) for s, g in zip(sums, clipped)],
                   lambda: [s.assign_add(g) for s, g in zip(sums, clipped)])
  window_ok = window_finite.assign(
      tf.logical_and(tf.logical_or(first, window_finite), finite))

  def apply_sums():
    return optimizer.apply_gradients(list(zip(summed, tvars)),
                                     global_step=global_step)

  apply_op = tf.cond(last, apply_sums, tf.no_op)
  with tf.control_dependencies([apply_op]):
    next_step = tf.where(tf.logical_and(last, window_ok), global_step + 1,
                         global_step)
    return tf.group(apply_op, global_step.assign(next_step))


class AdamWeightDecayOptimizer(tf.train.Optimizer):
  """Adam with weight decay applied to the weights, not to the gradients.

  Decay added to the loss would pass through Adam's moment estimates and be
  rescaled by them; here it is added to the Adam update instead. Variables
  whose names match `exclude_from_weight_decay` are not decayed.
  """

  def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9,
               beta_2=0.999, epsilon=1e-6, exclude_from_weight_decay=None,
               name="AdamWeightDecayOptimizer"):
    super(AdamWeightDecayOptimizer, self).__init__(False, name)
    self.learning_rate = learning_rate
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay = exclude_from_weight_decay or []

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    """Applies one AdamW step. `global_step` is not incremented."""
    del global_step  # create_optimizer counts steps itself.
    updates = []
    for grad, param in grads_and_vars:
      if grad is None:
        continue
      param_name = param.op.name
      m = self._moment(param, "adam_m")
      v = self._moment(param, "adam_v")
      next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
      next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
      step = next_m / (tf.sqrt(next_v) + self.epsilon)
      if self._decays(param_name):
        step += self.weight_decay_rate * param
      updates.extend([param.assign(param - self.learning_rate * step),
                      m.assign(next_m), v.assign(next_v)])
    return tf.group(*updates, name=name)

  def _moment(self, param, suffix):
    return tf.get_variable(param.op.name + "/" + suffix,
                           shape=param.shape.as_list(), dtype=tf.float32,
                           trainable=False, initializer=tf.zeros_initializer())

  def _decays(self, param_name):
    if not self.weight_decay_rate:
      return False
    return not any(re.search(pattern, param_name)
                   for pattern in self.exclude_from_weight_decay)
