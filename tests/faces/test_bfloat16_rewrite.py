"""`enable_bfloat16_graph_rewrite`: oneDNN's bfloat16 rewrite with our step.

TensorFlow's `auto_mixed_precision_onednn_bfloat16` pass runs only on CPUs
with AVX512-BF16 or AMX; elsewhere it leaves the graph float32. The dtype
tests read the partition graphs the Session actually ran (RunMetadata) and
skip, saying why, on a CPU without either flag in /proc/cpuinfo.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer

v1 = tf.compat.v1
FLAGS = mp_optimizer.bfloat16_cpu_flags()
NEEDS_BF16 = (
    "this CPU reports neither avx512_bf16 nor amx_bf16 in /proc/cpuinfo, "
    "so TensorFlow skips the oneDNN bfloat16 rewrite" if not FLAGS else "")
_MATMULS = ("MatMul", "_MklMatMul", "_MklNativeMatMul", "_FusedMatMul",
            "_MklFusedMatMul", "_MklNativeFusedMatMul")


class _Model:
  """A float32 two-layer net; `poison` multiplies the input."""

  def __init__(self, opt_builder):
    self.graph = tf.Graph()
    with self.graph.as_default():
      rng = np.random.RandomState(0)
      self.poison = v1.placeholder_with_default(np.float32(1), [])
      x = tf.constant(rng.randn(64, 32).astype(np.float32)) * self.poison
      w = v1.get_variable("w", initializer=0.1 * rng.randn(32, 32).astype(
          np.float32))
      loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, w)),
                                                w)))
      self.opt = opt_builder()
      self.train_op = self.opt.minimize(loss)
      self.weight = w
      self.skipped = mp_optimizer.skipped_steps()

  def run(self, config=None, feed=None):
    """One step; returns the dtypes of the MatMuls the Session ran."""
    with v1.Session(graph=self.graph, config=config) as session:
      session.run(v1.global_variables_initializer())
      metadata = v1.RunMetadata()
      session.run(self.train_op, feed,
                  options=v1.RunOptions(output_partition_graphs=True),
                  run_metadata=metadata)
      skipped = session.run(self.skipped)
    dtypes = {tf.as_dtype(node.attr["T"].type)
              for graph in metadata.partition_graphs for node in graph.node
              if node.op in _MATMULS}
    return dtypes, skipped


class Bfloat16RewriteTest(parameterized.TestCase):

  def tearDown(self):
    mp_optimizer.disable_bfloat16_graph_rewrite()
    super().tearDown()

  def test_wraps_in_the_bfloat16_mode(self):
    with tf.Graph().as_default():
      opt = mp_optimizer.enable_bfloat16_graph_rewrite(
          v1.train.AdamOptimizer(1e-3))
    self.assertIsInstance(opt, mp_optimizer.MixedPrecisionLossScaleOptimizer)
    self.assertIsInstance(opt.loss_scale_manager, managers.NoLossScale)
    self.assertTrue(tf.config.optimizer.get_experimental_options()[
        "auto_mixed_precision_onednn_bfloat16"])
    mp_optimizer.disable_bfloat16_graph_rewrite()
    self.assertFalse(tf.config.optimizer.get_experimental_options().get(
        "auto_mixed_precision_onednn_bfloat16", False))

  def test_without_the_switch_the_graph_stays_float32(self):
    model = _Model(lambda: mp_optimizer.LossScaleOptimizer(
        v1.train.GradientDescentOptimizer(0.1), managers.NoLossScale()))
    dtypes, _ = model.run()
    self.assertEqual(dtypes, {tf.float32})

  @parameterized.named_parameters(("global_switch", False),
                                  ("session_config", True))
  def test_matmuls_run_in_bfloat16(self, own_config):
    if NEEDS_BF16:
      self.skipTest(NEEDS_BF16)
    model = _Model(lambda: mp_optimizer.enable_bfloat16_graph_rewrite(
        v1.train.GradientDescentOptimizer(0.1)))
    if own_config:  # A Session with a config of its own needs the option.
      mp_optimizer.disable_bfloat16_graph_rewrite()
    config = mp_optimizer.bfloat16_session_config(
        v1.ConfigProto(allow_soft_placement=True)) if own_config else None
    dtypes, skipped = model.run(config)
    self.assertEqual(dtypes, {tf.bfloat16})
    self.assertEqual(skipped, 0)

  def test_own_config_without_the_option_is_not_rewritten(self):
    model = _Model(lambda: mp_optimizer.enable_bfloat16_graph_rewrite(
        v1.train.GradientDescentOptimizer(0.1)))
    dtypes, _ = model.run(v1.ConfigProto())
    self.assertEqual(dtypes, {tf.float32})

  def test_nonfinite_step_skipped_under_the_rewrite(self):
    if NEEDS_BF16:
      self.skipTest(NEEDS_BF16)
    model = _Model(lambda: mp_optimizer.enable_bfloat16_graph_rewrite(
        v1.train.GradientDescentOptimizer(0.1)))
    with v1.Session(graph=model.graph) as session:
      session.run(v1.global_variables_initializer())
      before = session.run(model.weight)
      session.run(model.train_op, {model.poison: np.inf})
      self.assertEqual(session.run(model.skipped), 1)
      np.testing.assert_array_equal(session.run(model.weight), before)

  def test_session_config_is_a_copy(self):
    original = v1.ConfigProto(allow_soft_placement=True)
    config = mp_optimizer.bfloat16_session_config(original)
    self.assertTrue(config.allow_soft_placement)
    self.assertEqual(
        config.graph_options.rewrite_options
        .auto_mixed_precision_onednn_bfloat16, 1)
    self.assertEqual(
        original.graph_options.rewrite_options
        .auto_mixed_precision_onednn_bfloat16, 0)
    with self.assertRaisesRegex(TypeError, "`config` must be a"):
      mp_optimizer.bfloat16_session_config({"allow_soft_placement": True})

  def test_cpu_flags_read_from_cpuinfo(self):
    path = self.create_tempfile(content=(
        "processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16\n"
        "processor\t: 1\nflags\t\t: fpu sse avx512f avx512_bf16\n")).full_path
    self.assertEqual(mp_optimizer.bfloat16_cpu_flags(path),
                     frozenset({"avx512_bf16"}))
    plain = self.create_tempfile(content="flags\t\t: fpu sse\n").full_path
    self.assertEqual(mp_optimizer.bfloat16_cpu_flags(plain), frozenset())
    self.assertIsNone(mp_optimizer.bfloat16_cpu_flags(plain + ".missing"))


if __name__ == "__main__":
  tf.test.main()
