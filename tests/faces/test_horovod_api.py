"""`mp_optimizer.horovod` in one process: its names, its refusals, one rank.

Started without a launcher, `hvd.init()` makes rank 0 of 1 and starts no
server; the collectives still run (groups of one). What needs a process that
has not called `hvd.init()` runs in a fresh interpreter.
"""

import subprocess
import sys

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
import mp_optimizer.horovod as hvd
from tests.workers import launch

v1 = tf.compat.v1


def run_fresh(code: str) -> subprocess.CompletedProcess:
  """Runs `code` in a new interpreter with no launcher's environment."""
  env = {k: v for k, v in launch.worker_env().items()
         if not k.startswith(("OMPI_", "PMIX_")) and k != "TF_CONFIG"}
  return subprocess.run([sys.executable, "-c", code], env=env, text=True,
                        capture_output=True, timeout=300, check=False)


class UnsupportedTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("adasum", "Adasum", "use hvd.Average or hvd.Sum"),
      ("gradient_tape", "DistributedGradientTape",
       "use hvd.DistributedOptimizer"),
      ("grouped_allreduce", "grouped_allreduce", "use hvd.allreduce"),
      ("process_set", "ProcessSet", "leave process_set out"),
      ("keras", "keras", "tf.compat.v1.train optimizer"),
  )
  def test_horovods_other_names_name_the_closest_spelling(self, name, hint):
    with self.assertRaisesRegex(NotImplementedError,
                                f"hvd.{name} is not supported.*{hint}"):
      getattr(hvd, name)

  def test_a_name_horovod_lacks_too_is_an_attribute_error(self):
    self.assertFalse(hasattr(hvd, "no_such_name"))

  @parameterized.named_parameters(
      ("backward_passes", {"backward_passes_per_step": 2},
       r"gradient_accumulation_steps=2\)"),
      ("predivide", {"gradient_predivide_factor": 2.0},
       "`gradient_predivide_factor`.*got 2.0"),
      ("groups", {"groups": 2}, "`groups`.*got 2"),
      ("process_set", {"process_set": "evens"}, "`process_set`"),
      ("aggregated", {"average_aggregated_gradients": True},
       "`average_aggregated_gradients`"),
  )
  def test_unsupported_options_are_refused_with_what_to_use(self, options,
                                                            message):
    with self.assertRaisesRegex(NotImplementedError, message):
      hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(0.1),
                               **options)

  @parameterized.named_parameters(
      ("op", {"op": "max"}, ValueError, "`op` must be hvd.Average or hvd.Sum"),
      ("compression", {"compression": "fp16"}, ValueError,
       "`compression` must be hvd.Compression.none or"),
      ("passes", {"backward_passes_per_step": 0}, ValueError,
       "`backward_passes_per_step` must be >= 1, got 0"),
      ("sparse_as_dense", {"sparse_as_dense": "yes"}, TypeError,
       "`sparse_as_dense`"),
  )
  def test_bad_values_name_the_argument(self, options, error, message):
    with self.assertRaisesRegex(error, message):
      hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(0.1),
                               **options)

  def test_a_keras_optimizer_is_refused(self):
    with self.assertRaisesRegex(TypeError, "tf.compat.v1.train.Optimizer"):
      hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1))

  def test_scale_factors_are_refused(self):
    hvd.init()
    with tf.Graph().as_default():
      with self.assertRaisesRegex(NotImplementedError, "`prescale_factor`"):
        hvd.allreduce(tf.constant([1.0]), prescale_factor=0.5)

  def test_eager_use_says_how_to_run_in_graph_mode(self):
    hvd.init()
    with self.assertRaisesRegex(RuntimeError, "disable_eager_execution"):
      hvd.allreduce(tf.constant([1.0]))


class BeforeInitTest(parameterized.TestCase):

  def test_size_before_init_raises_value_error(self):
    result = run_fresh(
        "import mp_optimizer.horovod as hvd\n"
        "try:\n  hvd.size()\nexcept ValueError as e:\n  print('refused:', e)\n")
    self.assertIn("refused: mp_optimizer.horovod has not been initialized; "
                  "call hvd.init() first.", result.stdout, result.stderr)


class OneRankTest(parameterized.TestCase):
  """Without a launcher: rank 0 of 1, and every collective is the identity."""

  def setUp(self):
    super().setUp()
    hvd.init()

  def test_one_process_is_rank_0_of_1(self):
    self.assertEqual((hvd.rank(), hvd.size(), hvd.local_rank(),
                      hvd.local_size()), (0, 1, 0, 1))

  def test_collectives_of_one_rank_return_its_values(self):
    values = np.float32([[1.5, -2.0], [3.0, 0.25]])
    with tf.Graph().as_default():
      fetches = [hvd.allreduce(tf.constant(values)),
                 hvd.allreduce(tf.constant(values), op=hvd.Sum),
                 hvd.allgather(tf.constant(values)),
                 hvd.broadcast(tf.constant(values), 0)]
      with v1.Session() as sess:
        for result in sess.run(fetches):
          np.testing.assert_array_equal(result, values)

  def test_root_rank_must_be_a_rank(self):
    with tf.Graph().as_default():
      with self.assertRaisesRegex(ValueError,
                                  r"`root_rank` must be < hvd.size\(\) = 1, "
                                  "got 1"):
        hvd.broadcast(tf.constant([1.0]), 1)

  @parameterized.named_parameters(("ours_outside", True),
                                  ("hvd_outside", False))
  def test_one_rank_trains_as_the_wrapped_optimizer(self, ours_outside):
    def train(distributed: bool) -> np.ndarray:
      with tf.Graph().as_default():
        w = v1.get_variable("w", initializer=np.float32([1.0, -2.0]))
        loss = tf.reduce_sum(tf.square(w - [0.5, 0.25]))
        inner = v1.train.MomentumOptimizer(0.1, 0.9)
        manager = managers.DynamicLossScale(2.0**10, 2)
        if not distributed:
          opt = mp_optimizer.LossScaleOptimizer(inner, manager)
        elif ours_outside:
          opt = mp_optimizer.LossScaleOptimizer(
              hvd.DistributedOptimizer(inner), manager)
        else:
          opt = hvd.DistributedOptimizer(
              mp_optimizer.LossScaleOptimizer(inner, manager))
        train_op = opt.minimize(loss)
        with v1.Session() as sess:
          sess.run(v1.global_variables_initializer())
          for _ in range(3):
            sess.run(train_op)
          return sess.run(w)
    np.testing.assert_array_equal(train(True), train(False))


if __name__ == "__main__":
  parameterized.absltest.main()
