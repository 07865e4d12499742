# Legacy fixture for tests/test_migrate_behaviour.py: Estimator model
# functions in the shapes of an object-detection zoo's `create_model_fn`
# and a segmentation zoo's `unet_fn`. They call a function they were given
# and cast to float32, but they are no variable getters: no notice.
"""Model functions of an fp16 segmentation and a detection model."""

import tensorflow as tf


def create_model_fn(detection_model_fn, configs, use_fp16=False):
  """Returns a model_fn that builds `detection_model_fn(...)` in fp16."""

  def model_fn(features, labels, mode, params=None):
    model = detection_model_fn(is_training=mode == "train", **configs)
    predictions = model(tf.cast(features, tf.float16 if use_fp16 else
                                tf.float32))
    return tf.cast(predictions, tf.float32)

  return model_fn


def unet_fn(features, labels, mode, params):
  """Model function for tf.Estimator.

  Args:
    features (tf.Tensor): Tensor samples
    labels (tf.Tensor): Tensor labels
    mode (str): train, eval or predict
    params (dict): hyper-parameters; params["model"](x) builds the network
  """
  features = tf.cast(features, tf.float16)
  logits = params["model"](features)
  loss = tf.reduce_mean(tf.square(tf.cast(logits, tf.float32) - labels))
  opt = tf.compat.v1.train.AdamOptimizer(1e-3)
  opt = tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(opt)
  return tf.cast(loss, tf.float32), opt.minimize(loss)
