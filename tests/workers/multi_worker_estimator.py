"""One worker of Estimator training under MultiWorkerMirroredStrategy.

    TF_CONFIG=... multi_worker_estimator.py OUT_PATH MODEL_DIR MANAGER

Estimator's multi-worker route (TensorFlow <= 2.15): the strategy is built
from `TF_CONFIG` and passed as `train_distribute`; `train_and_evaluate` runs
the distribute coordinator. Worker i is replica i; batch k of every worker
carries the k-th entry of `replicated.SCHEDULE`, so the named replica
overflows at that run. Writes OUT_PATH (npz): the scale and global_step after
every run, and this worker's final value of every global variable.
"""

import sys

import numpy as np
import tensorflow as tf

import mp_optimizer
from tests.workers import estimator_model
from tests.workers import replicated

v1 = tf.compat.v1
APPLIED_STEPS = sum(replicated.APPLIED)


def main(out_path: str, model_dir: str, manager_name: str) -> None:
  strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
  manager = estimator_model.MANAGERS[manager_name]()
  model_fn = estimator_model.make_model_fn(
      lambda: mp_optimizer.LossScaleOptimizer(
          v1.train.MomentumOptimizer(0.05, 0.9), manager))
  estimator = tf.estimator.Estimator(
      model_fn, model_dir=model_dir,
      config=tf.estimator.RunConfig(train_distribute=strategy,
                                    save_checkpoints_steps=1000,
                                    log_step_count_steps=None))
  recorder = estimator_model.StateRecorder(lambda: manager)
  input_fn = estimator_model.make_input_fn(replicated.SCHEDULE)
  tf.estimator.train_and_evaluate(
      estimator,
      tf.estimator.TrainSpec(input_fn, max_steps=APPLIED_STEPS,
                             hooks=[recorder]),
      tf.estimator.EvalSpec(input_fn, steps=1))
  scale_name = estimator_model.SCALE_NAMES[manager_name]
  np.savez(out_path,
           scales=[row[scale_name] for row in recorder.rows],
           steps=[row["global_step"] for row in recorder.rows],
           **{name: values[0]
              for name, values in recorder.replica_values.items()})


if __name__ == "__main__":
  main(*sys.argv[1:])
