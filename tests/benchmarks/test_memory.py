"""A step that may be skipped holds its gradients in 16 bits, once.

Measured, not timed: the peak of live bytes a traced step allocated (the
allocation records of a FULL_TRACE `RunMetadata`, as `make bench` reads
step memory), with one executor thread, so that the executor runs ops in
one order and the peak is the same at every run (with two, a busy machine
can delay a stack).

Holding every update until the finite check has read the last gradient
keeps every gradient alive at the end of backprop. The float32 gradients of
float32 variables read through a cast to float16 are casts of 16-bit ones:
the step holds those (stacked), and casts and unscales them again behind
the gate; before the gate each stack's float32 product lives only until its
sum is taken, one stack at a time. On the chains of `benchmarks/scaling.py`
(N layers of 32x32) the peak therefore lies between half the float32
gradients' bytes (the 16-bit ones, all held) and their bytes once (holding
the float32 ones took 1.25x in four stacks, 2x in one). Against bare
training on the benchmark's shapes, the peak is within `LIMIT` of bare's
on many small variables; wide layers and the embedding shape (whose tables
share one gradient, which the unscale stacks once per table) have limits of
their own.
"""

from absl.testing import parameterized
import pytest
import tensorflow as tf

from benchmarks import floor
from benchmarks import graph_cost
from benchmarks import scaling
from benchmarks import shapes

v1 = tf.compat.v1

# float32 gradients, one 32x32 matrix per layer of the chain.
GRADIENT_BYTES = 32 * 32 * 4
# Ours' peak over bare's, at most, on the shapes below.
LIMIT = 1.01
EMBEDDING_LIMIT = 1.10
# Wide layers of 1024x1024: the 16-bit gradients and the one float32 product
# the check sums at a time, 14.7 MB against bare's 13.2 MB on TF 2.15 (bare
# holds more on TF 2.21, where the two are equal).
WIDE_LIMIT = 1.12
# With Adam, ours on many small variables: bare's peak moves with the order
# one thread happens to run its updates in (0.65 to 0.83 MB at N = 100),
# ours is 1.036x bare's lowest at N = 1,000.
ADAM_LIMIT = 1.05
INNER = {"sgd": lambda: v1.train.GradientDescentOptimizer(1e-4),
         "adam": lambda: v1.train.AdamOptimizer(1e-4)}


def _peak(build_loss, make_train_op, inner: str) -> int:
  graph = tf.Graph()
  with graph.as_default():
    train_op = make_train_op(build_loss(), v1.train.get_or_create_global_step(),
                             INNER[inner]())
    init = v1.global_variables_initializer()
  config = v1.ConfigProto(inter_op_parallelism_threads=1,
                          intra_op_parallelism_threads=1,
                          use_per_session_threads=True)
  with v1.Session(graph=graph, config=config) as session:
    session.run(init)
    session.run(train_op)  # The first step also sets things up.
    return graph_cost.step_peak_bytes(session, train_op)


@pytest.mark.long_run
class StepMemoryTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("sgd_10_dynamic", "sgd", 10, "ours"),
      ("sgd_100_dynamic", "sgd", 100, "ours"),
      ("sgd_100_fixed", "sgd", 100, "ours_fixed"),
      # Behind the gate Adam's updates could run after several float32
      # casts (1.07x the float32 gradients' bytes on 100 layers); the
      # casts are now paced (`_step.pacing`).
      ("adam_100_dynamic", "adam", 100, "ours"),
      ("adam_100_fixed", "adam", 100, "ours_fixed"))
  def test_a_chain_holds_its_16_bit_gradients_not_the_float32_ones(
      self, inner, size, name):
    peak = _peak(lambda: shapes.chain(size), scaling.CONTENDERS[name][1],
                 inner)
    gradients = size * GRADIENT_BYTES
    # The barrier holds every gradient, in 16 bits.
    self.assertGreaterEqual(peak, gradients // 2)
    self.assertLessEqual(peak, gradients,
                         f"peak {peak} bytes, gradients {gradients} bytes")

  @parameterized.named_parameters(
      ("many_small_10", "many_small", 10, "ours_contrib", LIMIT),
      ("many_small_100", "many_small", 100, "ours_contrib", LIMIT),
      ("many_small_100_tf2", "many_small", 100, "ours_tf2", LIMIT),
      ("many_small_100_fixed", "many_small", 100, "ours_fixed", LIMIT),
      ("wide_10", "wide", 10, "ours_contrib", WIDE_LIMIT),
      ("wide_100", "wide", 100, "ours_contrib", WIDE_LIMIT),
      ("embedding_10", "embedding", 10, "ours_contrib", EMBEDDING_LIMIT),
      ("embedding_100", "embedding", 100, "ours_contrib", LIMIT),
      ("many_small_100_adam", "many_small", 100, "ours_contrib", ADAM_LIMIT,
       "adam"),
      ("many_small_1000_adam", "many_small", 1000, "ours_tf2", ADAM_LIMIT,
       "adam"))
  def test_peak_is_within_limit_of_bare_on_every_shape(self, family, size,
                                                       name, limit,
                                                       inner="sgd"):
    build = lambda: shapes.with_variables(family, size)
    bare = _peak(build, floor.CONTENDERS["bare"][1], inner)
    ours = _peak(build, floor.CONTENDERS[name][1], inner)
    self.assertLessEqual(ours, limit * bare,
                         f"ours {ours} bytes, bare {bare} bytes")


if __name__ == "__main__":
  tf.test.main()
