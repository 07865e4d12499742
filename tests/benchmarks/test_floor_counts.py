"""Kernels and step memory of the floor benchmark's contenders, counted.

The contenders of `benchmarks/floor.py` on `many_small` at two sizes, each
in a fresh graph and Session. Kernels are the nodes a traced step ran;
step memory is the peak of live bytes a traced step allocated
(`benchmarks.graph_cost.trace_step`). No timing is read.

Memory bounds are written from the designs, not copied from a run: let G be
the bytes of the float32 gradients of one step. An exact skip that
unscales before its check holds every float32 gradient until the finite
flag exists, so its peak is at least G. The chunked
prototype (`benchmarks.exact_skips`) holds at most one chunk twice (its
stack and its product) besides G; the hold16 prototype holds 16-bit
gradients only, so less than G, and so does the library, which holds the
16-bit gradients the float32 ones are cast from and casts them behind its
gate (its bounds against bare are in `tests/benchmarks/test_memory.py`).
The library therefore runs fewer kernels than bare as N grows (backprop's
casts of the gradients never run): the kernels it adds do not grow.
"""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import pytest
import tensorflow as tf

import mp_optimizer
from benchmarks import exact_skips
from benchmarks import floor
from benchmarks import scaling
from benchmarks import shapes

v1 = tf.compat.v1
# Layers of 64x64 (kernel and bias each): groups of 32 and 64 like
# gradients, which the prototype cuts into exactly `CHUNKS` stacks.
SIZES = (64, 128)
# One executor thread: ops run in one order, so a peak is the same at every
# run (with two, a busy machine can run two chunks' stacks at once).
ONE_THREAD = v1.ConfigProto(inter_op_parallelism_threads=1,
                            intra_op_parallelism_threads=1,
                            use_per_session_threads=True)
OURS = ("ours_fixed", "ours_contrib", "ours_tf2_fixed", "ours_tf2")


@functools.lru_cache(maxsize=None)  # Each graph is built and traced once.
def _built(name: str, size: int, inner: str = "sgd") -> scaling.Built:
  built = scaling.Built(size, inner, floor.CONTENDERS[name][1],
                        lambda n: shapes.with_variables("many_small", n),
                        config=ONE_THREAD)
  built.session.close()
  return built


def _gradient_bytes(size: int) -> int:
  layers = size // 2
  return 4 * layers * (64 * 64 + 64)


@pytest.mark.long_run
class KernelsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      *[(f"{name}_{inner}", name, inner) for name in OURS + ("chunked",)
        for inner in ("sgd", "adam")])
  def test_kernels_added_to_bare_do_not_grow_with_variables(self, name,
                                                            inner):
    added = [_built(name, size, inner).kernels -
             _built("bare", size, inner).kernels for size in SIZES]
    self.assertLessEqual(added[1], added[0], f"kernels added at N={SIZES}")

  def test_chunked_prototype_adds_the_same_kernels_at_every_size(self):
    added = [_built("chunked", size).kernels - _built("bare", size).kernels
             for size in SIZES]
    self.assertEqual(added[0], added[1], f"kernels added at N={SIZES}")

  def test_least_dynamic_prototype_adds_the_same_kernels_at_every_size(self):
    added = [_built("scaled", size).kernels - _built("switch", size).kernels
             for size in SIZES]
    self.assertEqual(added[0], added[1], f"kernels over the floor at {SIZES}")

  def test_least_dynamic_manager_runs_between_fixed_and_contrib(self):
    size = SIZES[0]
    fixed, least, contrib = (_built(name, size).kernels for name in
                             ("ours_fixed", "ours_least", "ours_contrib"))
    self.assertLess(fixed, least)
    self.assertLess(least, contrib)

  def test_floor_adds_one_multiply_per_gradient(self):
    added = [_built("switch", size).kernels - _built("bare", size).kernels
             for size in SIZES]
    self.assertEqual(added[1] - added[0], SIZES[1] - SIZES[0])


class MemoryTest(parameterized.TestCase):

  @parameterized.named_parameters(("floor", "switch"), ("chunked", "chunked"))
  def test_a_skip_unscaling_before_its_check_holds_every_gradient(self,
                                                                  name):
    size = SIZES[0]
    self.assertGreaterEqual(_built(name, size).trace.peak_bytes,
                            _gradient_bytes(size))

  @parameterized.named_parameters(("hold16", "hold16"),
                                  ("ours_fixed", "ours_fixed"),
                                  ("ours_tf2", "ours_tf2"))
  def test_holding_16_bit_gradients_stays_below_the_float32_ones(self, name):
    size = SIZES[0]
    self.assertLess(_built(name, size).trace.peak_bytes,
                    _gradient_bytes(size))

  def test_chunked_prototype_holds_at_most_one_chunk_twice(self):
    size = SIZES[0]
    gradients = _gradient_bytes(size)
    chunked = _built("chunked", size).trace.peak_bytes
    # One chunk of kernels and one of biases, rounded up.
    one_chunk = -(-gradients // exact_skips.CHUNKS)
    self.assertLess(chunked, gradients + 2 * one_chunk)


class ExactTest(parameterized.TestCase):

  @parameterized.named_parameters(("chunked", "chunked"), ("hold16", "hold16"),
                                  ("scaled", "scaled"),
                                  ("ours_least", "ours_least"))
  def test_prototype_applies_the_floors_values_bit_for_bit(self, design):
    after = []
    for name in ("switch", design):
      built = scaling.Built(8, "adam", floor.CONTENDERS[name][1],
                            lambda n: shapes.with_variables("many_small", n))
      with built.graph.as_default():
        variables = v1.trainable_variables()
      after.append(built.session.run(variables))
      built.session.close()
    for floor_value, value in zip(*after):
      self.assertEqual(floor_value.tobytes(), value.tobytes())


class LeastDynamicManagerTest(absltest.TestCase):

  def _run(self, loss_value: float, steps: int):
    with tf.Graph().as_default():
      weight = v1.get_variable("w", initializer=2.0, use_resource=True)
      loss = tf.cast(weight, tf.float16) * tf.constant(loss_value, tf.float16)
      manager = exact_skips.LeastDynamicManager()
      train_op = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.5), manager).minimize(
              tf.cast(loss, tf.float32))
      with v1.Session() as session:
        session.run(v1.global_variables_initializer())
        for _ in range(steps):
          session.run(train_op)
        return session.run(manager.variables() + [weight])

  def test_counts_clean_steps_and_keeps_its_scale(self):
    scale, clean, weight = self._run(3.0, steps=3)
    self.assertEqual((scale, clean), (exact_skips.INITIAL_SCALE, 3))
    self.assertEqual(weight, 2.0 - 3 * 0.5 * 3.0)

  def test_its_variables_initialize_without_the_callers_dependencies(self):
    with tf.Graph().as_default():
      weight = v1.get_variable("w", initializer=2.0, use_resource=True)
      with tf.control_dependencies([weight.read_value()]):
        manager = exact_skips.LeastDynamicManager()
      for variable in manager.variables():
        self.assertEqual(variable.initializer.control_inputs, [])
        self.assertEqual(variable.initial_value.op.control_inputs, [])

  def test_a_skipped_step_is_not_counted_and_moves_nothing(self):
    scale, clean, weight = self._run(float("inf"), steps=2)
    self.assertEqual((scale, clean, weight),
                     (exact_skips.INITIAL_SCALE, 0, 2.0))


if __name__ == "__main__":
  absltest.main()
