"""Fault injection: NaN/±Inf written into one gradient entry at random steps.

`run` trains a model with a dense and a sparse (embedding) variable under
Adam for many steps. On a poisoned step one entry of the chosen gradient
(dense, or the values of the sparse one) is replaced by NaN, +Inf or -Inf
after `compute_gradients`, so the fault reaches `apply_gradients` exactly as
a real overflow would. After every step all variables (weights, Adam slots,
beta powers, global_step) are read back and compared with the step before.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import models

v1 = tf.compat.v1
POISONS = (np.nan, np.inf, -np.inf)


@dataclasses.dataclass
class Report:
  steps: int
  injected: int = 0
  skipped: int = 0  # Steps whose step_applied flag was False.
  counted: int = 0  # The optimizer's skipped_steps counter at the end.
  applied_clean: int = 0
  corrupted: int = 0  # Poisoned steps that changed anything, or clean
                      # steps that did not apply.

  def line(self, name: str) -> str:
    return (f"fault injection [{name}]: {self.steps} steps, injected "
            f"{self.injected}, skipped {self.skipped} (counter "
            f"{self.counted}), clean applied {self.applied_clean}, "
            f"corrupted {self.corrupted}")


def _poison(grad, value, position):
  """Replaces one entry of `grad` (or of its sparse values) with `value`."""
  values = grad.values if isinstance(grad, tf.IndexedSlices) else grad
  flat = tf.reshape(values, [-1])
  mask = tf.equal(tf.range(tf.size(flat)), position)
  poisoned = tf.reshape(tf.where(mask, tf.fill(tf.shape(flat), value), flat),
                        tf.shape(values))
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(poisoned, grad.indices, grad.dense_shape)
  return poisoned


def run(target: str, steps: int, seed: int, rate: float = 0.1) -> Report:
  """Trains with faults in the `target` ("dense" or "sparse") gradient."""
  rng = np.random.RandomState(seed)
  with tf.Graph().as_default() as graph:
    value = v1.placeholder_with_default(np.float32(0), [])
    position = v1.placeholder_with_default(-1, [])  # -1: no entry poisoned.
    loss = (models.dense_loss(models.poison_input()) +
            tf.cast(models.embedding_loss(models.poison_input()), tf.float32))
    manager = managers.ExponentialUpdateLossScaleManager(
        2**8, 20, max_loss_scale=2**10)
    opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["adam"](), manager)
    name = "dense/w" if target == "dense" else "table"
    grads_and_vars = [(_poison(g, value, position) if v.op.name == name else g,
                       v) for g, v in opt.compute_gradients(loss)]
    global_step = v1.train.get_or_create_global_step()
    train_op = opt.apply_gradients(grads_and_vars, global_step=global_step)
    applied = mp_optimizer.step_applied()
    state = {v.ref() for v in manager.variables()}
    watched = [v for v in v1.global_variables() if v.ref() not in state]
    skipped_total = mp_optimizer.skipped_steps()
    init = v1.global_variables_initializer()
    graph.finalize()  # Nothing below may add an op.
    report = Report(steps)
    with v1.Session(graph=graph) as sess:
      sess.run(init)
      before = sess.run(watched)
      for _ in range(steps):
        poisoned = rng.rand() < rate
        feed = ({value: POISONS[rng.randint(3)], position: rng.randint(6)}
                if poisoned else {})
        was_applied = sess.run([train_op, applied], feed)[1]
        after = sess.run(watched)
        unchanged = all(a.tobytes() == b.tobytes()
                        for a, b in zip(before, after))
        report.injected += poisoned
        report.skipped += not was_applied
        if poisoned:
          report.corrupted += not unchanged or was_applied
        else:
          report.applied_clean += was_applied and not unchanged
          report.corrupted += not was_applied or unchanged
        before = after
      report.counted = int(sess.run(skipped_total))
      report.corrupted += sum(not np.all(np.isfinite(a)) for a in before)
  return report
