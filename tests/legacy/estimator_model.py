# Legacy fixture for tests/test_migrate.py: an Estimator classifier of the TF
# 1.14/1.15 era that trains in float16 with contrib's loss scaling or with
# TensorFlow's own MixedPrecisionLossScaleOptimizer. Keep it legacy: the
# tests convert it.
"""A float16 MLP classifier for tf.estimator.Estimator.

params:
  hidden_units: width of the hidden layer.
  n_classes: number of classes.
  learning_rate: momentum SGD learning rate.
  loss_scale_api: "contrib" (contrib managers) or "tf" (TF's optimizer).
  loss_scale: "dynamic" or a number (a fixed loss scale).
"""

import tensorflow.compat.v1 as tf
from tensorflow.contrib import mixed_precision as contrib_mixed_precision


def _float32_master_weights(getter, name, shape=None, dtype=None, *args,
                            **kwargs):
  """Custom getter: stores float16 variables as float32, returns a cast."""
  storage_dtype = tf.float32 if dtype == tf.float16 else dtype
  variable = getter(name, shape, storage_dtype, *args, **kwargs)
  if dtype == tf.float16 and variable.dtype.base_dtype != tf.float16:
    variable = tf.cast(variable, tf.float16)
  return variable


def _dense(inputs, units, name, activation=None):
  with tf.variable_scope(name):
    kernel = tf.get_variable(
        "kernel", [inputs.shape[-1], units], dtype=tf.float16,
        initializer=tf.glorot_uniform_initializer())
    bias = tf.get_variable("bias", [units], dtype=tf.float16,
                           initializer=tf.zeros_initializer())
    outputs = tf.matmul(inputs, kernel) + bias
    return activation(outputs) if activation else outputs


def network_fn(features, params):
  """The model in float16; returns float32 logits."""
  with tf.variable_scope("mlp", custom_getter=_float32_master_weights):
    inputs = tf.cast(features["x"], tf.float16)
    hidden = _dense(inputs, params["hidden_units"], "hidden",
                    activation=tf.nn.relu)
    logits = _dense(hidden, params["n_classes"], "logits")
  return tf.cast(logits, tf.float32)


def make_train_op(loss, params):
  """Momentum SGD wrapped for loss scaling, as `params` asks."""
  optimizer = tf.train.MomentumOptimizer(params["learning_rate"],
                                         momentum=0.9)
  loss_scale = params.get("loss_scale", "dynamic")
  if params.get("loss_scale_api", "contrib") == "tf":
    # TF 1.14's built-in takes "dynamic" or a number directly.
    optimizer = tf.train.experimental.MixedPrecisionLossScaleOptimizer(
        optimizer, loss_scale)
  else:
    if loss_scale == "dynamic":
      manager = contrib_mixed_precision.ExponentialUpdateLossScaleManager(
          init_loss_scale=2**15, incr_every_n_steps=200,
          decr_every_n_nan_or_inf=2, decr_ratio=0.5)
    else:
      manager = contrib_mixed_precision.FixedLossScaleManager(
          float(loss_scale))
    optimizer = contrib_mixed_precision.LossScaleOptimizer(optimizer, manager)
    tf.summary.scalar("loss_scale", manager.get_loss_scale())
  return optimizer.minimize(loss,
                            global_step=tf.train.get_or_create_global_step())


def model_fn(features, labels, mode, params):
  """The Estimator model_fn."""
  logits = network_fn(features, params)
  predicted = tf.argmax(logits, axis=1)
  if mode == tf.estimator.ModeKeys.PREDICT:
    return tf.estimator.EstimatorSpec(mode, predictions={"class": predicted})
  loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
  if mode == tf.estimator.ModeKeys.EVAL:
    return tf.estimator.EstimatorSpec(
        mode, loss=loss,
        eval_metric_ops={"accuracy": tf.metrics.accuracy(labels, predicted)})
  return tf.estimator.EstimatorSpec(mode, loss=loss,
                                    train_op=make_train_op(loss, params))


def input_fn(x, y, batch_size, shuffle):
  """Returns an input_fn over in-memory arrays."""
  def _input_fn():
    dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, y))
    if shuffle:
      dataset = dataset.shuffle(len(x), seed=0).repeat()
    return dataset.batch(batch_size)
  return _input_fn
