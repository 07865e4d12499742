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
import json
import os
import re
import subprocess
import sys

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


# --- What the switch accepts, side by side with TF's built-in. ---------------

TF_ENABLE = v1.mixed_precision.enable_mixed_precision_graph_rewrite


def _keras2_sgd():
  """Keras 2's OptimizerV2 SGD; raises ImportError under Keras 3 (TF >= 2.16)."""
  return tf.keras.optimizers.legacy.SGD()


def _frozen_keras_sgd():
  """SGD of TF's frozen Keras copy, which TF's own mixed-precision tests use."""
  from tensorflow.python.keras.optimizer_v2 import gradient_descent  # pylint: disable=g-direct-tensorflow-import,import-outside-toplevel
  return gradient_descent.SGD()


def _frozen_keras_wrapped(version: str = ""):
  """The frozen Keras copy's LossScaleOptimizer (or its V1) around its SGD."""
  from tensorflow.python.keras.mixed_precision import loss_scale_optimizer  # pylint: disable=g-direct-tensorflow-import,import-outside-toplevel
  wrapper = getattr(loss_scale_optimizer, "LossScaleOptimizer" + version)
  return wrapper(_frozen_keras_sgd(), *(["dynamic"] if version else []))


def _tfs_words(message: str) -> str:
  """TF's first sentence, up to "but got": what TF's own tests match."""
  return re.split(r"(?<=but got)|(?<=\.) ", message, maxsplit=1)[0]


def _rewrite_enabled():
  return tf.config.optimizer.get_experimental_options().get(
      "auto_mixed_precision", False)


def _outcome(enable, make_opt, make_loss_scale):
  """Calls `enable`; returns what a user can observe of the result."""
  opt = make_opt()
  try:
    wrapped = enable(opt, make_loss_scale())
  except Exception as error:  # pylint: disable=broad-except
    return {"raised": type(error), "rewrite": _rewrite_enabled(),
            "message": str(error)}
  finally:
    rewrite = _rewrite_enabled()
    v1.mixed_precision.disable_mixed_precision_graph_rewrite()
  return {"type": type(wrapped), "rewrite": rewrite,
          "inner_is_opt": wrapped.inner_optimizer is opt,
          "settings": (wrapped.dynamic, wrapped.initial_scale,
                       wrapped.dynamic_growth_steps)}


KERAS2_ROWS = (
    ("keras2_dynamic", _keras2_sgd, lambda: "dynamic"),
    ("keras2_number", _keras2_sgd, lambda: 128),
    ("keras2_tf_fixed", _keras2_sgd,
     lambda: v1.mixed_precision.FixedLossScale(64)),
    ("keras2_tf_dynamic", _keras2_sgd,
     lambda: v1.mixed_precision.DynamicLossScale(16, 3)),
    ("keras2_tf_dynamic_multiplier_3", _keras2_sgd,
     lambda: v1.mixed_precision.DynamicLossScale(16, 3, multiplier=3)),
    ("keras2_our_manager", _keras2_sgd,
     lambda: mp_optimizer.managers.DynamicLossScale()),
    ("keras2_already_wrapped",
     lambda: tf.keras.mixed_precision.LossScaleOptimizer(_keras2_sgd()),
     lambda: "dynamic"),
)
FROZEN_KERAS_ROWS = (
    ("frozen_keras_dynamic", _frozen_keras_sgd, lambda: "dynamic"),
    ("frozen_keras_number", _frozen_keras_sgd, lambda: 128),
    ("frozen_keras_tf_dynamic", _frozen_keras_sgd,
     lambda: v1.mixed_precision.DynamicLossScale(16, 3)),
)
REFUSED_ROWS = (
    # Keras 3's optimizers on TF >= 2.16, Keras 2's newer ones on TF 2.15.
    ("keras_optimizer", lambda: tf.keras.optimizers.SGD(), lambda: "dynamic"),
    ("keras_already_wrapped",
     lambda: tf.keras.mixed_precision.LossScaleOptimizer(
         tf.keras.optimizers.SGD()), lambda: "dynamic"),
    ("tf_already_wrapped",
     lambda: v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
         v1.train.GradientDescentOptimizer(1.0), 8), lambda: "dynamic"),
    ("frozen_keras_already_wrapped", _frozen_keras_wrapped,
     lambda: "dynamic"),
    ("frozen_keras_v1_already_wrapped", lambda: _frozen_keras_wrapped("V1"),
     lambda: "dynamic"),
    ("int", lambda: 1, lambda: "dynamic"),
    ("string", lambda: "sgd", lambda: "dynamic"),
    ("none", lambda: None, lambda: "dynamic"),
)
# TF's own `test_optimizer_errors` (mixed_precision_test.py, 2020 and
# 2.15-era, and the frozen Keras copy's graph-rewrite test): what it passes,
# and the pattern it expects a ValueError's message to match.
TF_OPTIMIZER_ERRORS = (
    ("not_an_optimizer", lambda: 1,
     '"opt" must be an instance of a tf.train.Optimizer or '
     "a tf.keras.optimizers.Optimizer, but got"),
    ("tf_wrapper", lambda: v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
        v1.train.GradientDescentOptimizer(1.0), "dynamic"),
     '"opt" must not already be an instance of a '
     "MixedPrecisionLossScaleOptimizer."),
    ("our_tf2_wrapper", lambda: mp_optimizer.MixedPrecisionLossScaleOptimizer(
        v1.train.GradientDescentOptimizer(1.0), "dynamic"),
     '"opt" must not already be an instance of a '
     "MixedPrecisionLossScaleOptimizer."),
    ("our_contrib_wrapper", lambda: mp_optimizer.LossScaleOptimizer(
        v1.train.GradientDescentOptimizer(1.0),
        mp_optimizer.managers.FixedLossScaleManager(8)),
     '"opt" must not already be an instance of a LossScaleOptimizer.'),
    ("frozen_keras_wrapper", lambda: _frozen_keras_wrapped("V1"),
     '"opt" must not already be an instance of a LossScaleOptimizer.'),
    ("keras2_wrapper",
     lambda: tf.keras.mixed_precision.LossScaleOptimizer(_keras2_sgd()),
     '"opt" must not already be an instance of a LossScaleOptimizer.'),
)


class WhatTheSwitchAcceptsTest(parameterized.TestCase):

  @parameterized.named_parameters(*KERAS2_ROWS, *FROZEN_KERAS_ROWS,
                                  *REFUSED_ROWS)
  def test_same_as_tensorflows_switch(self, make_opt, make_loss_scale):
    try:
      theirs = _outcome(TF_ENABLE, make_opt, make_loss_scale)
    except ImportError as error:
      self.skipTest(f"no Keras 2 optimizers with this TensorFlow: {error}")
    ours = _outcome(mp_optimizer.enable_mixed_precision_graph_rewrite,
                    make_opt, make_loss_scale)
    if "raised" in theirs:
      self.assertIn("raised", ours, ours)
      self.assertTrue(issubclass(ours["raised"], theirs["raised"]),
                      (ours["raised"], theirs["raised"]))
      self.assertIn(_tfs_words(theirs["message"]), ours["message"])
      self.assertFalse(ours["rewrite"])
    else:
      self.assertEqual(ours, theirs)
      self.assertTrue(ours["rewrite"] and ours["inner_is_opt"])

  @parameterized.named_parameters(
      ("int", lambda: 1, ['"opt" must be an instance', "got 1 (type int)"]),
      ("keras_optimizer", lambda: tf.keras.optimizers.SGD(),
       ["refuses this optimizer too", "registered", "set_global_policy"]),
      ("keras_already_wrapped",
       lambda: tf.keras.mixed_precision.LossScaleOptimizer(
           tf.keras.optimizers.SGD()), ["already", "opt.inner_optimizer"]),
      ("ours_already_wrapped",
       lambda: mp_optimizer.MixedPrecisionLossScaleOptimizer(
           v1.train.GradientDescentOptimizer(1.0), 8),
       ["already", "inner_optimizer"]),
  )
  def test_refusals_are_value_errors_that_say_why(self, make_opt, words):
    with self.assertRaises(ValueError) as caught:
      mp_optimizer.enable_mixed_precision_graph_rewrite(make_opt())
    for word in words:
      self.assertIn(word, str(caught.exception))
    self.assertFalse(_rewrite_enabled())

  @parameterized.named_parameters(*TF_OPTIMIZER_ERRORS)
  def test_tensorflows_own_optimizer_errors_pass(self, make_opt, pattern):
    try:
      opt = make_opt()
    except ImportError as error:
      self.skipTest(f"no Keras 2 optimizers with this TensorFlow: {error}")
    with self.assertRaisesRegex(ValueError, pattern):
      mp_optimizer.enable_mixed_precision_graph_rewrite(opt)
    self.assertFalse(_rewrite_enabled())


_SESSION_SCRIPT = """
import json, logging, sys
import tensorflow as tf
import mp_optimizer

messages = []
handler = logging.Handler()
handler.emit = lambda record: messages.append(record.getMessage())
logging.getLogger("tensorflow").addHandler(handler)
if sys.argv[1] == "session_first":
  tf.compat.v1.Session().close()
kinds = {"v1": lambda: tf.compat.v1.train.GradientDescentOptimizer(1.0)}
try:
  tf.keras.optimizers.legacy.SGD()
  kinds["keras2"] = lambda: tf.keras.optimizers.legacy.SGD()
except ImportError:  # Keras 3 has no OptimizerV2.
  pass
counts = {}
for kind, make in kinds.items():
  for name, enable in (
      ("ours", mp_optimizer.enable_mixed_precision_graph_rewrite),
      ("tf", tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite)):
    del messages[:]
    enable(make())
    counts[kind + "_" + name] = sum("existing Sessions" in m for m in messages)
    tf.compat.v1.mixed_precision.disable_mixed_precision_graph_rewrite()
print(json.dumps(counts))
"""


class SessionWarningTest(parameterized.TestCase):
  """TF warns once when a Session already exists; so must we (fresh process)."""

  @parameterized.named_parameters(("session_first", "session_first", 1),
                                  ("no_session", "no_session", 0))
  def test_warning_as_tensorflows(self, order, want):
    result = subprocess.run([sys.executable, "-c", _SESSION_SCRIPT, order],
                            capture_output=True, text=True, check=True)
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    keras2 = "keras2_tf" in counts  # The script finds out, as a user would.
    kinds = ["v1"] + (["keras2"] if keras2 else [])
    self.assertEqual(counts, {f"{kind}_{name}": want for kind in kinds
                              for name in ("ours", "tf")})
