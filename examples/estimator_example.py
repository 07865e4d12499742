"""Loss scaling in an Estimator: train, evaluate, train again from a checkpoint.

A float16 softmax classifier on scikit-learn's bundled digits, trained with
both managers. Each manager is built once, outside `model_fn`, and starts far
too high (2**24), so the first steps overflow in float16 and are skipped
until the scale has come down. `global_step` counts applied steps only; a hook
counts session runs, so runs minus steps is the number of skipped steps.
The second `train` resumes the loss scale from the checkpoint.
`mp_optimizer.LossScaleHook` logs the scale and the skipped share every 50
runs at INFO, so the example raises TensorFlow's Python log level to INFO.

Needs `tf.estimator`: TensorFlow 2.15 with tensorflow-estimator (2.16 removed
it), and the `examples` extra (`pip install ".[examples]"`) for
scikit-learn. Run: `python examples/estimator_example.py`.
"""

import sys
import tempfile

import numpy as np
from sklearn import datasets
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer

v1 = tf.compat.v1
STEPS = 150
BATCH = 64


def digits_input_fn(images: np.ndarray, labels: np.ndarray, train: bool):
  def input_fn():
    data = tf.data.Dataset.from_tensor_slices(({"x": images}, labels))
    if train:
      data = data.shuffle(len(labels), seed=0).repeat()
    return data.batch(BATCH)
  return input_fn


def make_model_fn(manager: managers.LossScaleManager):
  """A model_fn whose optimizer wraps `manager`, built outside it."""
  def model_fn(features, labels, mode):
    w = v1.get_variable("w", [64, 10], initializer=v1.zeros_initializer())
    b = v1.get_variable("b", [10], initializer=v1.zeros_initializer())
    logits16 = (tf.matmul(tf.cast(features["x"], tf.float16),
                          tf.cast(w, tf.float16)) + tf.cast(b, tf.float16))
    logits = tf.cast(logits16, tf.float32)
    loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
    opt = mp_optimizer.LossScaleOptimizer(
        v1.train.MomentumOptimizer(0.05, 0.9), manager)
    if mode == tf.estimator.ModeKeys.EVAL:
      return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={
          "accuracy": v1.metrics.accuracy(labels, tf.argmax(logits, 1)),
          "loss_scale": v1.metrics.mean(opt.get_loss_scale())})
    train_op = opt.minimize(loss,
                            global_step=v1.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
  return model_fn


class RunCounter(v1.train.SessionRunHook):
  """Counts session runs, and notes the scale before the first one."""

  def __init__(self, manager: managers.LossScaleManager):
    self._manager = manager
    self.runs = 0
    self.first_scale = None

  def begin(self):
    self._scale = self._manager.get_loss_scale()

  def after_create_session(self, session, coord):
    self.first_scale = session.run(self._scale)

  def after_run(self, run_context, run_values):
    self.runs += 1


def train(estimator, manager, input_fn, label: str) -> float:
  """Trains STEPS applied steps; prints and returns the scale it started at."""
  before = (estimator.get_variable_value("global_step")
            if estimator.latest_checkpoint() else 0)
  counter = RunCounter(manager)
  estimator.train(input_fn, steps=STEPS,
                  hooks=[counter, mp_optimizer.LossScaleHook(every_n_steps=50)])
  applied = estimator.get_variable_value("global_step") - before
  print(f"  {label}: loss scale at start {counter.first_scale:,.0f}; "
        f"{counter.runs} runs, {applied} applied, "
        f"{counter.runs - applied} skipped; global_step now "
        f"{estimator.get_variable_value('global_step')}")
  return counter.first_scale


def main() -> None:
  if not hasattr(tf, "estimator"):
    sys.exit(f"TensorFlow {tf.__version__} has no tf.estimator (removed in "
             "2.16). Run this example with TensorFlow 2.15 and "
             "tensorflow-estimator.")
  digits = datasets.load_digits()
  images = (digits.data / 16.0).astype(np.float32)
  labels = digits.target.astype(np.int32)
  train_input = digits_input_fn(images[:1500], labels[:1500], train=True)
  eval_input = digits_input_fn(images[1500:], labels[1500:], train=False)
  runs = {
      "ExponentialUpdateLossScaleManager": (
          managers.ExponentialUpdateLossScaleManager(2**24, 50), "loss_scale"),
      "DynamicLossScale": (managers.DynamicLossScale(2**24, 50),
                           "current_loss_scale"),
  }
  for name, (manager, scale_variable) in runs.items():
    with tempfile.TemporaryDirectory() as model_dir:
      estimator = tf.estimator.Estimator(
          make_model_fn(manager), model_dir=model_dir,
          config=tf.estimator.RunConfig(save_checkpoints_steps=STEPS,
                                        log_step_count_steps=None))
      print(f"{name}:")
      train(estimator, manager, train_input, "train 1")
      saved = estimator.get_variable_value(scale_variable)
      metrics = estimator.evaluate(eval_input)
      print(f"  evaluate: accuracy {metrics['accuracy']:.3f}, loss scale "
            f"{metrics['loss_scale']:,.0f}")
      resumed = train(estimator, manager, train_input, "train 2")
      print(f"  train 2 resumed loss scale {resumed:,.0f}: the value train 1 "
            f"saved was {saved:,.0f}")


if __name__ == "__main__":
  v1.logging.set_verbosity(v1.logging.INFO)  # LossScaleHook's reports.
  main()
