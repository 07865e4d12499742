"""One training step in cross-replica context: check, gate, apply, update.

`LossScaleOptimizer.apply_gradients` reaches this through `merge_call`, so it
runs once per step however many replicas there are:

```
scale   = manager.get_loss_scale()          # the S this step used
finite  = all_finite_in_sync(grads)         # one verdict for every replica
applied = tf.cond(finite, inner.apply_gradients on each replica,
                  skipped_steps += 1)
after applied: manager.update_loss_scale(finite)
return tf.group(...)                        # also the only TRAIN_OP entry
```

A manager that applies every step (`skips_nonfinite_steps` False) gets no
finite check and no `tf.cond`.
"""

import tensorflow as tf

import managers
from mp_optimizer import signals


def gated_step(strategy: tf.distribute.Strategy,
               inner: tf.compat.v1.train.Optimizer,
               manager: managers.LossScaleManager,
               skip_counter: signals.SkipCounter,
               grads_and_vars: tuple, global_step, name: str) -> tf.Operation:
  """Builds the step described in the module docstring; returns its op."""
  train_ops = tf.compat.v1.get_collection_ref(tf.compat.v1.GraphKeys.TRAIN_OP)
  train_ops_before = list(train_ops)

  def apply_on_replicas():
    updates = strategy.extended.call_for_each_replica(
        inner.apply_gradients,
        args=(grads_and_vars, global_step, name + "-wrapped"))
    return strategy.group(updates)

  scale = manager.get_loss_scale()
  if manager.skips_nonfinite_steps:
    finite = managers.all_finite_in_sync(g for g, _ in grads_and_vars)
    applied = tf.cond(finite, apply_on_replicas, skip_counter.add_one)
    skipped = skip_counter.total()
  else:
    finite = tf.constant(True)
    applied = apply_on_replicas()
    skipped = tf.constant(0, tf.int64)
  with tf.control_dependencies([applied, scale]):
    update = manager.update_loss_scale(finite)
  train_op = tf.group(applied, update, name=name)
  # The inner apply sits inside the cond; only the gated step is a train op.
  train_ops[:] = train_ops_before + [train_op]
  signals.record(finite, skipped, scale)
  return train_op
