"""A step that may be skipped holds its gradients about once, not twice.

Measured, not timed: the peak of live bytes a traced step allocated (the
allocation records of a FULL_TRACE `RunMetadata`, as `make bench` reads
step memory), on the chains of `benchmarks/scaling.py` (N layers of 32x32,
float32 variables, float16 compute), against the bytes of the float32
gradients. Holding every update until the finite check has read the last
gradient keeps every gradient alive at the end of backprop (1x); the
unscale's stacks are copies, each made as soon as its part of the
gradients exists, so at most a quarter of them is held twice. One stack per
shape held all of them twice (2x).
"""

from absl.testing import parameterized
import tensorflow as tf

from benchmarks import graph_cost
from benchmarks import scaling
from benchmarks import shapes

v1 = tf.compat.v1

# float32 gradients, one 32x32 matrix per layer.
GRADIENT_BYTES = 32 * 32 * 4
# Every gradient once, a quarter twice, and a little for the check's sums.
LIMIT = 1.3
INNER = {"sgd": lambda: v1.train.GradientDescentOptimizer(1e-4),
         "adam": lambda: v1.train.AdamOptimizer(1e-4)}


class StepMemoryTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("sgd_10_dynamic", "sgd", 10, "ours"),
      ("sgd_100_dynamic", "sgd", 100, "ours"),
      ("adam_100_dynamic", "adam", 100, "ours"),
      ("sgd_100_fixed", "sgd", 100, "ours_fixed"))
  def test_peak_holds_the_gradients_at_most_one_and_a_quarter_times(
      self, inner, size, name):
    graph = tf.Graph()
    with graph.as_default():
      train_op = scaling.CONTENDERS[name][1](
          shapes.chain(size), v1.train.get_or_create_global_step(),
          INNER[inner]())
      init = v1.global_variables_initializer()
    # One thread: the executor runs ops in one order, so the peak is the
    # same at every run (with two, a busy machine can delay a stack).
    config = v1.ConfigProto(inter_op_parallelism_threads=1,
                            intra_op_parallelism_threads=1,
                            use_per_session_threads=True)
    with v1.Session(graph=graph, config=config) as session:
      session.run(init)
      session.run(train_op)  # The first step also sets things up.
      peak = graph_cost.step_peak_bytes(session, train_op)
    gradients = size * GRADIENT_BYTES
    self.assertGreaterEqual(peak, gradients)  # The barrier holds them all.
    self.assertLessEqual(peak, LIMIT * gradients,
                         f"peak {peak} bytes, gradients {gradients} bytes")


if __name__ == "__main__":
  tf.test.main()
