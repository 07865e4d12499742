"""Loss scaling under MonitoredTrainingSession, stopped and restarted.

A float16 softmax classifier on scikit-learn's bundled digits trains with
checkpoint and summary hooks, stops, and a second session on the same
directory carries on: it restores the weights, `global_step`, the loss scale
and its counters from the checkpoint. The scale starts far too high (2**24),
so early steps overflow and are skipped; `global_step` counts applied steps
only, so session runs minus applied steps is the number of skipped steps.
`mp_optimizer.LossScaleHook` logs the scale and the share of skipped steps
every 50 steps; it logs at INFO, so the example raises TensorFlow's Python
log level from its default (WARN) to INFO.

Run: `python examples/monitored_session_example.py` (any supported TF), with
the `examples` extra installed (`pip install ".[examples]"`) for
scikit-learn.
"""

import tempfile

import numpy as np
from sklearn import datasets
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer

v1 = tf.compat.v1
STEPS_PER_SESSION = 150
BATCH = 64


def build_graph(manager: managers.LossScaleManager) -> dict:
  """Builds the model; returns the tensors the training loop runs."""
  digits = datasets.load_digits()
  data = tf.data.Dataset.from_tensor_slices(
      ((digits.data / 16.0).astype(np.float32), digits.target.astype(np.int32)))
  images, labels = v1.data.make_one_shot_iterator(
      data.shuffle(len(digits.target), seed=0).repeat().batch(BATCH)).get_next()
  w = v1.get_variable("w", [64, 10], initializer=v1.zeros_initializer())
  b = v1.get_variable("b", [10], initializer=v1.zeros_initializer())
  logits16 = (tf.matmul(tf.cast(images, tf.float16), tf.cast(w, tf.float16))
              + tf.cast(b, tf.float16))
  logits = tf.cast(logits16, tf.float32)
  loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
  opt = mp_optimizer.LossScaleOptimizer(v1.train.MomentumOptimizer(0.05, 0.9),
                                        manager)
  global_step = v1.train.get_or_create_global_step()
  train_op = opt.minimize(loss, global_step=global_step)
  v1.summary.scalar("scale", opt.get_loss_scale())
  v1.summary.scalar("loss", loss)
  return {"train_op": train_op, "loss": loss, "global_step": global_step,
          "scale": opt.get_loss_scale()}


def train_one_session(directory: str, label: str) -> None:
  """Opens a MonitoredTrainingSession on `directory` and trains in it."""
  with tf.Graph().as_default():
    manager = managers.ExponentialUpdateLossScaleManager(2**24, 50)
    tensors = build_graph(manager)
    stop = v1.train.StopAtStepHook(num_steps=STEPS_PER_SESSION)
    report = mp_optimizer.LossScaleHook(every_n_steps=50)
    with v1.train.MonitoredTrainingSession(
        checkpoint_dir=directory, hooks=[stop, report], save_checkpoint_steps=50,
        save_summaries_steps=25, log_step_count_steps=None) as sess:
      start = sess.run({"scale": tensors["scale"],
                        "global_step": tensors["global_step"],
                        **{v.op.name: v for v in manager.variables()}})
      runs = 0
      while not sess.should_stop():
        values = sess.run({"train": tensors["train_op"],
                           "loss": tensors["loss"]})
        runs += 1
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(directory))
    applied = int(reader.get_tensor("global_step")) - int(start["global_step"])
    print(f"{label}\n"
          f"  starts at global_step {start['global_step']}, loss scale "
          f"{start['scale']:,.0f}, good_steps {start['good_steps']}, "
          f"bad_steps {start['bad_steps']}\n"
          f"  {runs} runs: {applied} applied, {runs - applied} skipped; last "
          f"loss {values['loss']:.3f}\n"
          f"  last checkpoint: global_step {reader.get_tensor('global_step')}, "
          f"loss scale {reader.get_tensor('loss_scale'):,.0f}, good_steps "
          f"{reader.get_tensor('good_steps')}")


def main() -> None:
  with tempfile.TemporaryDirectory() as directory:
    train_one_session(directory, "session 1:")
    train_one_session(directory, "session 2, restored from that checkpoint:")


if __name__ == "__main__":
  v1.logging.set_verbosity(v1.logging.INFO)  # LossScaleHook's reports.
  main()
