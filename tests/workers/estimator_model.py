"""The Estimator model shared by the Estimator tests and their workers.

The input pipeline names, batch by batch, the replica whose loss becomes Inf
(`NO_REPLICA` for a clean batch), so which runs skip is known in advance.
"""

import numpy as np
import tensorflow as tf

from mp_optimizer import managers
from tests.workers import replicated

v1 = tf.compat.v1
NO_REPLICA = replicated.NO_REPLICA
BATCH = 4
# Both halve on every overflow and double after two clean steps in a row.
MANAGERS = {
    "contrib": lambda: managers.ExponentialUpdateLossScaleManager(
        1024, 2, decr_every_n_nan_or_inf=1, decr_ratio=0.5),
    "tf2": lambda: managers.DynamicLossScale(1024, 2),
}
SCALE_NAMES = {"contrib": "loss_scale", "tf2": "current_loss_scale"}


def make_input_fn(poisoned_replica_per_batch):
  """Batches of a linear problem; batch b names the replica it poisons."""
  def input_fn():
    rng = np.random.RandomState(0)
    count = BATCH * len(poisoned_replica_per_batch)
    x = rng.randn(count, 4).astype(np.float32)
    y = x @ np.array([[1.], [-2.], [0.5], [3.]], np.float32)
    poisoned = np.repeat(np.asarray(poisoned_replica_per_batch, np.int32),
                         BATCH)
    return tf.data.Dataset.from_tensor_slices(
        ({"x": x, "poisoned_replica": poisoned}, y)).batch(BATCH).repeat()
  return input_fn


def make_model_fn(get_optimizer):
  """A float16 linear model trained by `get_optimizer()` (called inside)."""
  def model_fn(features, labels, mode):
    w = v1.get_variable("w", [4, 1], initializer=v1.zeros_initializer())
    pred = tf.matmul(tf.cast(features["x"], tf.float16), tf.cast(w, tf.float16))
    loss = tf.reduce_mean(tf.square(tf.cast(pred, tf.float32) - labels))
    opt = get_optimizer()
    if mode == tf.estimator.ModeKeys.EVAL:
      return tf.estimator.EstimatorSpec(
          mode, loss=loss,
          eval_metric_ops={"loss_scale": v1.metrics.mean(opt.get_loss_scale())})
    replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
    poison = tf.where(
        tf.equal(features["poisoned_replica"][0], replica_id), np.inf, 1.0)
    train_op = opt.minimize(loss * poison,
                            global_step=v1.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
  return model_fn


class StateRecorder(v1.train.SessionRunHook):
  """Records training state through public hooks.

  `rows`: after every run, global_step and each of the manager's state
  variables, by name. `replica_values`: at the end, every global variable's
  value on each local replica.
  """

  def __init__(self, manager_of_graph):
    self._manager_of_graph = manager_of_graph
    self.rows = []
    self.replica_values = {}

  def begin(self):
    state = {v.op.name: v for v in self._manager_of_graph().variables()}
    state["global_step"] = v1.train.get_global_step()
    self._fetches = state
    self._variables = v1.global_variables()

  def after_run(self, run_context, run_values):
    self.rows.append({k: v.item() for k, v in
                      run_context.session.run(self._fetches).items()})

  def end(self, session):
    strategy = tf.distribute.get_strategy()
    self.replica_values = {
        v.op.name: session.run(list(strategy.experimental_local_results(v)))
        for v in self._variables}
