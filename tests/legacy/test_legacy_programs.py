"""The three legacy programs, converted by the command line, then trained.

`python -m mp_optimizer.migrate --in-place` converts copies of
optimization.py (BERT-style: AdamW, global-norm clipping, hand-written
gradient accumulation), estimator_model.py (an Estimator model_fn) and
train_fp16.py (a plain tf.Session script). The expected conversions are
written out by hand below; the converted code then trains for real: the plain
script as a program, the rest in a fresh graph of this process.
"""

import pathlib
import shutil
import sys
import tempfile
import unittest

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from tests.support import converted_files

v1 = tf.compat.v1
LEGACY = pathlib.Path(__file__).resolve().parent
CONTRIB_STATE = {"loss_scale": tf.float32, "good_steps": tf.int32,
                 "bad_steps": tf.int32}
TF2_STATE = {"current_loss_scale": tf.float32, "good_steps": tf.int64}

# What the codemod must do to each file, line for line; nothing else changes.
CONVERSIONS = {
    "optimization.py": [
        ("import tensorflow.compat.v1 as tf\n",
         "import tensorflow.compat.v1 as tf\nfrom mp_optimizer import managers\n"
         "import mp_optimizer\n"),
        ("loss_scaler = tf.train.experimental.DynamicLossScale(",
         "loss_scaler = managers.DynamicLossScale("),
        ("= tf.train.experimental.enable_mixed_precision_graph_rewrite(",
         "= mp_optimizer.enable_mixed_precision_graph_rewrite("),
        ("= tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(",
         "= managers.ExponentialUpdateLossScaleManager("),
        ("optimizer = tf.contrib.mixed_precision.LossScaleOptimizer(",
         "optimizer = mp_optimizer.LossScaleOptimizer("),
    ],
    "estimator_model.py": [
        ("from tensorflow.contrib import mixed_precision as "
         "contrib_mixed_precision\n",
         "from mp_optimizer import contrib as contrib_mixed_precision\n"
         "import mp_optimizer\n"),
        ("optimizer = tf.train.experimental.MixedPrecisionLossScaleOptimizer(",
         "optimizer = mp_optimizer.MixedPrecisionLossScaleOptimizer("),
    ],
    "train_fp16.py": [
        ("from tensorflow.contrib.mixed_precision import "
         "ExponentialUpdateLossScaleManager\n",
         "from mp_optimizer.managers import ExponentialUpdateLossScaleManager\n"),
        ("from tensorflow.contrib.mixed_precision import "
         "FixedLossScaleManager\n",
         "from mp_optimizer.managers import FixedLossScaleManager\n"),
        ("from tensorflow.contrib.mixed_precision import (\n"
         "    LossScaleOptimizer as ContribLossScaleOptimizer)\n",
         "from mp_optimizer import (\n"
         "    LossScaleOptimizer as ContribLossScaleOptimizer)\n"
         "from mp_optimizer import managers\nimport mp_optimizer\n"),
        ("tf.compat.v1.mixed_precision.DynamicLossScale(",
         "managers.DynamicLossScale("),
        ("tf.compat.v1.mixed_precision.FixedLossScale(",
         "managers.FixedLossScale("),
        ("tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(",
         "mp_optimizer.MixedPrecisionLossScaleOptimizer("),
        ("saver = v1.train.Saver()", "saver = mp_optimizer.Saver()"),
    ],
}


def _scale_state(dtypes=None):
  """Loss-scale state variables by name -> dtype (of the graph, or a map)."""
  if dtypes is None:
    dtypes = {v.op.name: v.dtype.base_dtype for v in v1.global_variables()}
  return {name: dtype for name, dtype in dtypes.items()
          if name in CONTRIB_STATE or name in TF2_STATE}


def _blobs(num_examples, num_features, num_classes, seed=0):
  rng = np.random.RandomState(seed)
  centers = rng.normal(scale=3.0, size=(num_classes, num_features))
  labels = rng.randint(num_classes, size=num_examples)
  features = centers[labels] + rng.normal(size=(num_examples, num_features))
  return features.astype(np.float32), labels.astype(np.int64)


# api, loss_scale, the loss-scale state it must make.
ESTIMATOR_CASES = [("contrib_dynamic", "contrib", "dynamic", CONTRIB_STATE),
                   ("contrib_fixed", "contrib", 256, {}),
                   ("tf_dynamic", "tf", "dynamic", TF2_STATE),
                   ("tf_fixed", "tf", 256, {})]


def _params(api, loss_scale):
  return dict(hidden_units=16, n_classes=3, learning_rate=0.05,
              loss_scale_api=api, loss_scale=loss_scale)


try:
  ESTIMATOR = v1.estimator.Estimator
except AttributeError:  # TensorFlow >= 2.16 has no tf.estimator.
  ESTIMATOR = None


class LegacyProgramsTest(converted_files.ConvertedFilesTest):

  SOURCE = LEGACY
  NAMES = tuple(CONVERSIONS)

  def tempdir(self):
    path = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, path)
    return path

  def test_command_converts_all_three_with_nothing_left(self):
    status, out, err = self.migrate
    self.assertEqual(status, 0, err)
    self.assertEqual(out.splitlines(),
                     [f"rewrote {self.dir / name}" for name in sorted(CONVERSIONS)])
    # No finding; a notice where TF's fixed scale (which applied NaN/Inf
    # steps) is converted, one for the hand-written float32 getter, one for
    # the Saver rewritten, and one for the training EstimatorSpec (its
    # PREDICT and EVAL specs build no scale state: no notice).
    skips = ("now skips steps with NaN/Inf gradients where TensorFlow "
             "applied them; to keep TensorFlow's behaviour write ")
    self.assertEqual(err.splitlines(), [
        f"{self.dir / 'estimator_model.py'}:19: notice: "
        "`_float32_master_weights` looks like a hand-written float32 "
        "master-weight getter: `mp_optimizer.float32_variable_getter` stores "
        "trainable float16/bfloat16 variables in float32 and casts them on "
        "read, creates every other variable as requested, and also handles "
        "float16 initial values, partitioned variables and an enclosing "
        "scope's getter; `_float32_master_weights` does not look at "
        "`trainable`, so it stores non-trainable variables (moving averages, "
        "counters) in float32 too, and checkpoints written with it hold them "
        "in float32; pass it as `custom_getter=`, or build the model under "
        "`with mp_optimizer.float32_master_weights():`. "
        "Checkpoint names stay the same. Not rewritten: such getters differ "
        "in detail",
        f"{self.dir / 'estimator_model.py'}:57: notice: if `loss_scale` is a "
        "number, the fixed scale `loss_scale=loss_scale` " + skips +
        "`loss_scale=managers.FixedLossScale(loss_scale, "
        "skip_nonfinite_steps=False)`",
        f"{self.dir / 'estimator_model.py'}:84: notice: "
        "`tf.estimator.EstimatorSpec(...)` has no `scaffold=`: the Saver it "
        "builds cannot restore a checkpoint without loss-scale state (a "
        "float32 run's); to continue one, pass `scaffold=tf.compat.v1.train."
        "Scaffold(saver=mp_optimizer.Saver(sharded=True, defer_build=True, "
        "save_relative_paths=True))` (docs: Checkpoints)",
        f"{self.dir / 'train_fp16.py'}:51: notice: "
        "`FixedLossScale(float(loss_scale))` " + skips +
        "`managers.FixedLossScale(float(loss_scale), "
        "skip_nonfinite_steps=False)`",
        f"{self.dir / 'train_fp16.py'}:96: notice: `v1.train.Saver(...)` -> "
        "`mp_optimizer.Saver(...)`: mp_optimizer.Saver saves the same keys "
        "and also restores a checkpoint without loss-scale state (a float32 "
        "run's), starting the scale from the manager's initial values with "
        "one warning line, where TensorFlow's Saver stops with NotFoundError "
        "(docs: Checkpoints)"])

  @parameterized.named_parameters(*[(n.split(".")[0], n) for n in CONVERSIONS])
  def test_conversion_changes_exactly_the_legacy_lines(self, name):
    expected = (LEGACY / name).read_text()
    for old, new in CONVERSIONS[name]:
      self.assertEqual(expected.count(old), 1, old)
      expected = expected.replace(old, new)
    self.assertEqual((self.dir / name).read_text(), expected)

  @parameterized.named_parameters(
      ("contrib", dict(manual_fp16=True), 1, CONTRIB_STATE),
      ("contrib_accumulating", dict(manual_fp16=True), 2, CONTRIB_STATE),
      ("graph_rewrite_accumulating", dict(use_fp16=True), 2, TF2_STATE))
  def test_bert_style_optimizer_trains(self, fp16, accumulation, state):
    optimization = self.converted("optimization.py")
    self.addCleanup(mp_optimizer.disable_mixed_precision_graph_rewrite)
    rng = np.random.RandomState(0)
    features = rng.normal(size=(64, 8)).astype(np.float32)
    targets = features @ rng.normal(size=(8, 1)).astype(np.float32)
    with tf.Graph().as_default() as graph:
      w = v1.get_variable("w", [8, 1], initializer=v1.zeros_initializer())
      with v1.variable_scope("LayerNorm"):
        bias = v1.get_variable("bias", [1], initializer=v1.zeros_initializer())
      prediction = tf.matmul(tf.cast(features, tf.float16),
                             tf.cast(w, tf.float16)) + tf.cast(bias, tf.float16)
      loss = tf.reduce_mean(tf.square(tf.cast(prediction, tf.float32) -
                                      targets))
      # 2**15 makes the float16 gradients of this loss overflow at first.
      train_op = optimization.create_optimizer(
          loss, init_lr=0.05, num_train_steps=200, num_warmup_steps=0,
          num_accumulation_steps=accumulation, init_loss_scale=2**15, **fp16)
      global_step = v1.train.get_global_step()
      self.assertEqual(_scale_state(), state)
      scale = [v for v in v1.global_variables() if v.op.name == list(state)[0]]
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        losses, steps, weights = [sess.run(loss)], [0], [sess.run(w)]
        for _ in range(60):
          sess.run(train_op)
          losses.append(sess.run(loss))
          steps.append(sess.run(global_step))
          weights.append(sess.run(w))
        final_scale = sess.run(scale[0])
    self.assertTrue(np.all(np.isfinite(losses)), losses)
    self.assertLess(losses[-1], losses[0] / 10)
    self.assertLess(final_scale, 2**15)  # Overflow was seen and handled.
    self.assertBetween(steps[-1], 1, 60 // accumulation - 1)
    # global_step moves exactly when the weights do: skipped steps and
    # accumulation-only calls leave them bit-identical.
    for i in range(60):
      moved = not np.array_equal(weights[i], weights[i + 1])
      self.assertEqual(moved, steps[i + 1] == steps[i] + 1, f"call {i}")

  def test_plain_script_runs_as_a_program(self):
    model_dir = self.tempdir()
    status, out, err = converted_files.run(
        [sys.executable, str(self.dir / "train_fp16.py"), "--steps", "120",
         "--log_every", "20", "--model_dir", model_dir])
    self.assertEqual(status, 0, err)
    logged = [line.split() for line in out.splitlines()
              if line.startswith("step ")]
    losses = [float(fields[3]) for fields in logged]
    self.assertLen(losses, 7)
    self.assertTrue(np.all(np.isfinite(losses)), losses)
    self.assertLess(losses[-1], losses[0] / 10)
    reader = tf.train.load_checkpoint(model_dir)
    self.assertEqual(_scale_state(reader.get_variable_to_dtype_map()),
                     CONTRIB_STATE)

  @parameterized.named_parameters(
      ("dynamic", "dynamic", TF2_STATE), ("fixed", "1024", {}))
  def test_plain_script_tf_api_trains_in_a_graph(self, loss_scale, state):
    script = self.converted("train_fp16.py")
    args = script.parse_args(["--api", "tf", "--loss_scale", loss_scale])
    features, labels = script.make_blobs(1024, seed=0)
    with tf.Graph().as_default() as graph:
      model = script.build_graph(args)
      self.assertEqual(_scale_state(), state)
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        feed = {model["x"]: features, model["y"]: labels}
        first = sess.run(model["loss"], feed)
        for _ in range(60):
          sess.run(model["train_op"], feed)
        last = sess.run(model["loss"], feed)
    self.assertLess(last, first / 10)

  @parameterized.named_parameters(*ESTIMATOR_CASES)
  def test_estimator_model_trains_in_a_session(self, api, loss_scale, state):
    estimator_model = self.converted("estimator_model.py")
    params = _params(api, loss_scale)
    features, labels = _blobs(256, 10, 3)
    with tf.Graph().as_default() as graph:
      logits = estimator_model.network_fn({"x": tf.constant(features)}, params)
      loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
      train_op = estimator_model.make_train_op(loss, params)
      self.assertEqual(_scale_state(), state)
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        first = sess.run(loss)
        for _ in range(40):
          sess.run(train_op)
        last = sess.run(loss)
    self.assertLess(last, first / 10)

  @unittest.skipIf(ESTIMATOR is None, "tf.estimator was removed in TensorFlow "
                   f"2.16; this is {tf.__version__}")
  @parameterized.named_parameters(*ESTIMATOR_CASES)
  def test_estimator_trains(self, api, loss_scale, state):
    estimator_model = self.converted("estimator_model.py")
    params = _params(api, loss_scale)
    features, labels = _blobs(512, 10, 3)
    estimator = ESTIMATOR(estimator_model.model_fn, model_dir=self.tempdir(),
                          params=params)
    train = estimator_model.input_fn(features, labels, 32, shuffle=True)
    evaluate = estimator_model.input_fn(features, labels, 128, shuffle=False)
    estimator.train(train, steps=1)
    before = estimator.evaluate(evaluate, steps=4)
    estimator.train(train, steps=60)
    after = estimator.evaluate(evaluate, steps=4)
    self.assertEqual(after["global_step"], 61)
    self.assertLess(after["loss"], before["loss"] / 10)
    self.assertGreaterEqual(after["accuracy"], 0.95)
    reader = tf.train.load_checkpoint(estimator.model_dir)
    self.assertEqual(_scale_state(reader.get_variable_to_dtype_map()), state)
