"""The train op under XLA: `jit_scope`, and auto-clustering set in a config.

Both routes must compile part of the step (checked in the graphs the Session
runs), train like the plain inner optimizer, and still skip a poisoned step.

On CPU, TensorFlow auto-clusters only when `TF_XLA_FLAGS` holds
`--tf_xla_cpu_global_jit` before its first Session reads the flags, which in a
pytest run has long happened. `AutoClusteringTest` therefore runs in a fresh
interpreter started by `AutoClusteringProcessTest`; in the main run it is
reported as skipped, with that reason.
"""

import contextlib
import os
import signal
import subprocess
import sys
import unittest

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import harness
from tests.support import models

v1 = tf.compat.v1
CPU_JIT_FLAG = "--tf_xla_cpu_global_jit"
IN_AUTO_JIT_PROCESS = CPU_JIT_FLAG in os.environ.get("TF_XLA_FLAGS", "")
XLA_OPS = ("_XlaRun", "XlaLaunch", "_XlaCompile")
CHILD_TIMEOUT_SECONDS = 900

FACES = {
    "contrib": lambda: mp_optimizer.LossScaleOptimizer(
        models.OPTIMIZERS["adam"](),
        managers.ExponentialUpdateLossScaleManager(
            2**10, 1000, decr_every_n_nan_or_inf=1, decr_ratio=0.5)),
    "tf2": lambda: mp_optimizer.MixedPrecisionLossScaleOptimizer(
        models.OPTIMIZERS["adam"](), managers.DynamicLossScale(2**10, 1000)),
    "fixed": lambda: mp_optimizer.LossScaleOptimizer(
        models.OPTIMIZERS["adam"](), managers.FixedLossScaleManager(2**10)),
}
# The scale after one poisoned step, worked by hand from 2**10.
SCALE_AFTER_POISON = {"contrib": 2**9, "tf2": 2**9, "fixed": 2**10}
LOSSES = {
    "dense": models.dense_loss,
    "embedding": models.embedding_loss,
}


def _compiled_op_count(sess, fetch, feed=None) -> int:
  """Runs `fetch` once; returns how many XLA launch ops the Session ran."""
  metadata = v1.RunMetadata()
  sess.run(fetch, feed, options=v1.RunOptions(output_partition_graphs=True),
           run_metadata=metadata)
  return sum(node.op in XLA_OPS for graph in metadata.partition_graphs
             for node in graph.node)


class _Cases:
  """Holds shared test bodies; pytest collects only module-level classes."""

  class XlaTrainingTest(parameterized.TestCase):
    """Subclasses say how XLA is switched on: `build_scope` and `config`."""

    def build_scope(self):
      raise NotImplementedError

    def config(self) -> v1.ConfigProto:
      raise NotImplementedError

    def _train(self, make_opt, loss_name, poisons, xla):
      """Runs one step per poison value in a fresh graph.

      Returns:
        Per step: a snapshot of every variable but the loss-scale state, the
        number of XLA launch ops run, and the loss scale (NaN without one).
      """
      with tf.Graph().as_default() as graph:
        with self.build_scope() if xla else contextlib.nullcontext():
          poison = models.poison_input()
          loss = LOSSES[loss_name](poison)
          opt = make_opt()
          train_op = opt.minimize(
              loss, global_step=v1.train.get_or_create_global_step())
        scaled = isinstance(opt, mp_optimizer.LossScaleOptimizer)
        scale = opt.get_loss_scale() if scaled else tf.constant(np.nan)
        scale_state = ({v.op.name for v in opt.loss_scale_manager.variables()}
                       if scaled else set())
        watched = [v for v in v1.global_variables()
                   if v.op.name not in scale_state]
        config = self.config() if xla else None
        with v1.Session(graph=graph, config=config) as s:
          s.run(v1.global_variables_initializer())
          steps = []
          for value in poisons:
            compiled = _compiled_op_count(s, train_op, {poison: value})
            steps.append((harness.snapshot(s, watched), compiled, s.run(scale)))
      return steps

    @parameterized.named_parameters(harness.named_product(face=sorted(FACES), loss=sorted(LOSSES)))
    def test_trains_like_the_inner_optimizer(self, face, loss):
      ours = self._train(FACES[face], loss, [1.0] * 3, xla=True)
      self.assertGreater(min(compiled for _, compiled, _ in ours), 0,
                         "XLA compiled nothing")
      reference = self._train(models.OPTIMIZERS["adam"], loss, [1.0] * 3,
                              xla=False)
      state, reference_state = ours[-1][0], reference[-1][0]
      self.assertEqual(state["global_step"], 3)
      self.assertEqual(sorted(state), sorted(reference_state))
      for name, value in reference_state.items():
        np.testing.assert_allclose(state[name], value, rtol=2e-3, atol=1e-6,
                                   err_msg=name)

    @parameterized.named_parameters(
        ("contrib_dense_nan", "contrib", "dense", np.nan, False),
        ("contrib_embedding_inf", "contrib", "embedding", np.inf, False),
        ("tf2_dense_inf", "tf2", "dense", np.inf, False),
        ("tf2_embedding_nan", "tf2", "embedding", np.nan, False),
        ("fixed_dense_nan", "fixed", "dense", np.nan, False),
        ("fixed_embedding_inf", "fixed", "embedding", np.inf, False),
        # TF1's control flow (Switch/Merge) and reference variables.
        ("legacy_contrib_embedding_nan", "contrib", "embedding", np.nan, True),
        ("legacy_tf2_dense_inf", "tf2", "dense", np.inf, True))
    def test_poisoned_step_is_skipped(self, face, loss, poison, legacy):
      with models.legacy_graph_behavior(legacy):
        steps = self._train(FACES[face], loss, [1.0, 1.0, poison, 1.0],
                            xla=True)
      (clean, _, scale_before), (skipped, compiled, scale_after) = steps[1:3]
      self.assertGreater(compiled, 0, "XLA compiled nothing")
      harness.assert_bit_identical(self, clean, skipped)
      self.assertEqual(scale_before, 2**10)
      self.assertEqual(scale_after, SCALE_AFTER_POISON[face])
      self.assertEqual(steps[-1][0]["global_step"], 3)

    @parameterized.named_parameters(
        ("nan", [[1.0, np.nan]], [[1.0, 2.0]], False),
        ("inf", [[np.inf, 1.0]], [[1.0, 2.0]], False),
        ("inf_minus_inf_same_place", [[np.inf, 1.0]], [[-np.inf, 1.0]],
         False),
        ("largest_float32", [[3.4e38, -3.4e38]], [[1.0, 2.0]], True),
        ("finite", [[1.0, 2.0]], [[3.0, 4.0]], True))
    def test_finite_check_compiled(self, first, second, expected):
      with tf.Graph().as_default() as graph:
        with self.build_scope():
          inputs = [v1.placeholder(tf.float32, [1, 2]) for _ in range(2)]
          values = v1.placeholder(tf.float32, [None, 2])
          grads = [inputs[0] * 1.0, inputs[1] * 1.0,
                   tf.IndexedSlices(values * 1.0, tf.constant([0]),
                                    tf.constant([3, 2]))]
          flag = managers.all_finite(grads)
        feed = {inputs[0]: first, inputs[1]: second, values: first}
        with v1.Session(graph=graph, config=self.config()) as sess:
          self.assertGreater(_compiled_op_count(sess, flag, feed), 0)
          self.assertIs(bool(sess.run(flag, feed)), expected)


class JitScopeTest(_Cases.XlaTrainingTest):

  def build_scope(self):
    return tf.xla.experimental.jit_scope()

  def config(self) -> v1.ConfigProto:
    return v1.ConfigProto()


@unittest.skipUnless(
    IN_AUTO_JIT_PROCESS,
    f"CPU auto-clustering needs TF_XLA_FLAGS={CPU_JIT_FLAG} before TensorFlow "
    "reads its flags; AutoClusteringProcessTest runs these in a fresh process")
class AutoClusteringTest(_Cases.XlaTrainingTest):

  def build_scope(self):
    return contextlib.nullcontext()

  def config(self) -> v1.ConfigProto:
    config = v1.ConfigProto()
    config.graph_options.optimizer_options.global_jit_level = (
        v1.OptimizerOptions.ON_1)
    return config


@unittest.skipIf(IN_AUTO_JIT_PROCESS, "this is the auto-clustering process")
class AutoClusteringProcessTest(parameterized.TestCase):

  def test_auto_clustering_tests_pass_in_a_fresh_process(self):
    expected = len(unittest.defaultTestLoader.getTestCaseNames(
        AutoClusteringTest))
    root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL="2",
               TF_XLA_FLAGS=f"{os.environ.get('TF_XLA_FLAGS', '')} "
                            f"{CPU_JIT_FLAG}".strip())
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"{os.path.abspath(__file__)}::AutoClusteringTest"]
    child = subprocess.Popen(command, cwd=root, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
      output, _ = child.communicate(timeout=CHILD_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
      os.killpg(child.pid, signal.SIGKILL)
      output, _ = child.communicate()
      self.fail(f"auto-clustering tests took over {CHILD_TIMEOUT_SECONDS}s:\n"
                f"{output[-3000:]}")
    self.assertEqual(child.returncode, 0, output[-3000:])
    self.assertRegex(output, rf"\b{expected} passed\b")
    self.assertNotIn("skipped", output)


if __name__ == "__main__":
  tf.test.main()
