# Legacy fixture for tests/test_migrate_behaviour.py: TF 2.x Keras code that
# turned on the graph rewrite for a Keras optimizer reached through names.
"""A Keras regression model trained with the mixed-precision graph rewrite."""

import tensorflow as tf
from tensorflow.keras.optimizers import SGD

tfk = tf.keras


def make_model(num_features):
  model = tfk.Sequential([tfk.Input((num_features,)), tfk.layers.Dense(1)])
  opt = SGD(learning_rate=0.05)
  opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(opt)
  model.compile(optimizer=opt, loss="mse")
  return model, opt
