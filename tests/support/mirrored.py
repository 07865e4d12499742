"""A MirroredStrategy training graph on two CPU devices, for the tests.

Two replicas on two CPU devices of one session (`device_count`), built with
`strategy.run` in a v1 graph. Each replica sees different data
(`replicated.replica_data`); a fed replica id makes that replica's loss (and
so its gradients) NaN or Inf.
"""

import numpy as np
import tensorflow as tf

from tests.workers import replicated

v1 = tf.compat.v1
DEVICES = ["/cpu:0", "/cpu:1"]
# Two CPU devices in every session, without touching process-wide TF state.
SESSION_CONFIG = v1.ConfigProto(device_count={"CPU": len(DEVICES)})
NO_REPLICA = replicated.NO_REPLICA


class MirroredRun:
  """One mirrored training graph and its session."""

  def __init__(self, testcase, make_optimizer, per_replica: bool = False):
    """Builds the graph; `make_optimizer()` runs once, or with `per_replica`
    once on each replica (as an Estimator's model_fn does; `optimizer` is
    then the first replica's)."""
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.strategy = tf.distribute.MirroredStrategy(DEVICES)
      self.poisoned_replica = v1.placeholder_with_default(NO_REPLICA, [])
      self.poison = v1.placeholder_with_default(np.float32(np.nan), [])
      xs, ys = replicated.all_replica_data()
      with self.strategy.scope():
        self.w = v1.get_variable("w", initializer=replicated.INITIAL_W)
        self.global_step = v1.train.get_or_create_global_step()
        built = [] if per_replica else [make_optimizer()]

        def step():
          replica_id = (
              tf.distribute.get_replica_context().replica_id_in_sync_group)
          loss = replicated.loss(self.w, tf.gather(xs, replica_id),
                                 tf.gather(ys, replica_id))
          poison = tf.where(tf.equal(replica_id, self.poisoned_replica),
                            self.poison, 1.0)
          if per_replica:
            built.append(make_optimizer())
          return built[-1].minimize(loss * poison,
                                    global_step=self.global_step)

        self.train_op = self.strategy.group(self.strategy.run(step))
        self.optimizer = built[0]
      self.session = v1.Session(graph=self.graph, config=SESSION_CONFIG)
      testcase.addCleanup(self.session.close)
      self.session.run(v1.global_variables_initializer())

  def step(self, poisoned_replica: int, poison: float) -> None:
    self.session.run(self.train_op, {self.poisoned_replica: poisoned_replica,
                                     self.poison: poison})

  def replica_values(self, variable) -> list:
    """The value of `variable` on each replica, read from its own device."""
    return self.session.run(
        list(self.strategy.experimental_local_results(variable)))

  def read(self, name: str):
    # `.name`, not `.op.name`: on an ON_READ variable outside the graph,
    # `.op` would build a cross-replica sum.
    variable, = [v for v in self.graph.get_collection(
        v1.GraphKeys.GLOBAL_VARIABLES) if v.name == name + ":0"]
    return self.session.run(variable)
