"""`enable_mixed_precision_graph_rewrite`: an fp32 model trains in float16.

TensorFlow's `auto_mixed_precision` Grappler pass (what the switch turns on)
only rewrites nodes placed on a GPU, and skips itself when the machine has
none. On a CPU the same pass runs in emulation mode when a Session's config
sets `rewrite_options.auto_mixed_precision_cpu = ON`: float16-safe ops
(MatMul and its gradients here) get their inputs and outputs rounded through
float16 `Cast` nodes, so values overflow and lose precision exactly as in
float16, while the kernels themselves stay float32. With the environment
variable `TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_EMULATE_FP16=0` (read each time
a graph is optimized) that mode instead converts the ops themselves to float16
CPU kernels. These tests use both.

The model below is plain float32 code. At the default initial scale 2**15 its
weight gradient, scaled, exceeds float16's maximum 65504 only when the graph
is rewritten, so the dynamic loss scale must back off until float16 holds it.
The scale where that happens is computed here in float64 with numpy.
"""

import contextlib
import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer

v1 = tf.compat.v1
FLOAT16_MAX = 65504.0
INITIAL_SCALE = 2.0**15
ROWS, COLUMNS, OUTPUTS = 32, 8, 4
EMULATE_FP16 = "TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_EMULATE_FP16"


def _data():
  rng = np.random.RandomState(0)
  x = (16.0 * rng.randn(ROWS, COLUMNS)).astype(np.float32)
  y = rng.randn(ROWS, OUTPUTS).astype(np.float32)
  w = (0.1 * rng.randn(COLUMNS, OUTPUTS)).astype(np.float32)
  return x, y, w


def _largest_weight_gradient():
  """max |d loss / d w| at the initial weights, in float64."""
  x, y, w = (a.astype(np.float64) for a in _data())
  d_prediction = 2.0 / (ROWS * OUTPUTS) * (x @ w - y)
  return np.abs(x.T @ d_prediction).max()


@contextlib.contextmanager
def _environment(name, value):
  """Sets (or, for None, leaves unset) one variable, restoring it after."""
  old = os.environ.pop(name, None)
  if value is not None:
    os.environ[name] = value
  try:
    yield
  finally:
    os.environ.pop(name, None)
    if old is not None:
      os.environ[name] = old


def _session_config(cpu_emulation):
  config = v1.ConfigProto()
  rewrites = config.graph_options.rewrite_options
  rewrites.auto_mixed_precision_cpu = (rewrites.ON if cpu_emulation
                                       else rewrites.DEFAULT)
  return config


def _float16_nodes(run_metadata):
  half = tf.float16.as_datatype_enum
  return [node for graph in run_metadata.partition_graphs
          for node in graph.node
          if any(attr.type == half or half in attr.list.type
                 for attr in node.attr.values())]


class GraphRewriteTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.addCleanup(mp_optimizer.disable_mixed_precision_graph_rewrite)

  def _train(self, cpu_emulation, steps, emulate_fp16=None):
    """Trains the fp32 model; returns per-step (scale, global_step), losses,
    and the partition graphs of the first step."""
    with _environment(EMULATE_FP16, emulate_fp16), \
         tf.Graph().as_default() as graph:
      x, y, w_init = (tf.constant(a) for a in _data())
      w = v1.get_variable("w", initializer=w_init)
      loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
      global_step = v1.train.get_or_create_global_step()
      opt = mp_optimizer.enable_mixed_precision_graph_rewrite(
          v1.train.GradientDescentOptimizer(1e-3))
      train_op = opt.minimize(loss, global_step=global_step)
      with tf.control_dependencies([train_op]):
        after = (tf.identity(opt.loss_scale), global_step.read_value())
      with v1.Session(graph=graph,
                      config=_session_config(cpu_emulation)) as sess:
        sess.run(v1.global_variables_initializer())
        first_loss = sess.run(loss)
        metadata = v1.RunMetadata()
        history = [sess.run(after, options=v1.RunOptions(
            output_partition_graphs=True), run_metadata=metadata)]
        history += [sess.run(after) for _ in range(steps - 1)]
        return history, (first_loss, sess.run(loss)), metadata

  @parameterized.named_parameters(
      # Kernels stay float32; values are rounded through float16 Casts.
      ("cpu_emulation", True, None, {"Cast"}, {"MatMul"}),
      # The ops themselves become float16 CPU kernels.
      ("cpu_float16_kernels", True, "0", {"Cast", "MatMul"}, set()),
      ("no_cpu_option", False, None, set(), {"Cast", "MatMul"}),
  )
  def test_rewritten_graph_holds_float16_ops(self, cpu_emulation,
                                             emulate_fp16, present, absent):
    _, _, metadata = self._train(cpu_emulation, 1, emulate_fp16)
    float16 = _float16_nodes(metadata)
    ops = {node.op for node in float16}
    self.assertContainsSubset(present, ops)
    self.assertNoCommonElements(absent, ops)
    self.assertTrue(all("AutoMixedPrecision" in node.name
                        for node in float16 if node.op == "Cast"))

  def test_float16_kernels_train_with_a_backed_off_scale(self):
    history, (first_loss, last_loss), _ = self._train(True, 12, "0")
    self.assertLess(history[-1][0], INITIAL_SCALE)
    self.assertGreater(history[-1][1], 0)
    self.assertLess(last_loss, first_loss / 2)

  def test_loss_scale_backs_off_until_float16_holds_the_gradient(self):
    largest = _largest_weight_gradient()
    overflowing = 0
    while INITIAL_SCALE / 2**overflowing * largest >= FLOAT16_MAX:
      overflowing += 1
    self.assertGreaterEqual(overflowing, 2)  # The model is built for this.
    history, (first_loss, last_loss), _ = self._train(True, steps=12)
    scales = [scale for scale, _ in history]
    steps = [step for _, step in history]
    want_scales = [INITIAL_SCALE / 2**k for k in range(1, overflowing + 1)]
    self.assertEqual(scales[:overflowing], want_scales)
    self.assertEqual(steps[:overflowing], [0] * overflowing)
    # From there the float16 gradient fits and every step applies.
    self.assertEqual(scales[overflowing:],
                     [want_scales[-1]] * (12 - overflowing))
    self.assertEqual(steps[overflowing:], list(range(1, 13 - overflowing)))
    self.assertLess(last_loss, first_loss / 2)

  def test_float32_graph_without_emulation_never_overflows(self):
    history, (first_loss, last_loss), _ = self._train(False, steps=4)
    self.assertEqual(history, [(INITIAL_SCALE, k) for k in range(1, 5)])
    self.assertLess(last_loss, first_loss)

  def test_forward_pass_is_rounded_through_float16(self):
    x, y, w = (a.astype(np.float64) for a in _data())
    exact = np.mean(np.square(x @ w - y))
    (_, (emulated, _), _), (_, (plain, _), _) = (self._train(True, 1),
                                                 self._train(False, 1))
    self.assertNotEqual(emulated, plain)
    np.testing.assert_allclose(plain, exact, rtol=1e-5)
    np.testing.assert_allclose(emulated, exact, rtol=1e-2)
