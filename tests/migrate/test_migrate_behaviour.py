"""Legacy model code converted by mp-optimizer-migrate, then run.

The fixtures in tests/migrate/fixtures/ are written in the shape of public
model zoos. `python -m mp_optimizer.migrate --in-place` converts copies of
them; each test then checks what the converted code does on tiny data, next
to TensorFlow running the original where TensorFlow still can, or the exact
`file:line: reason` lines for what must not be converted silently.
"""

import os
import pathlib
import shutil
import sys
import tempfile

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

import mp_optimizer
from tests.support import converted_files
from tests.support import harness

v1 = tf.compat.v1
FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
_SKIPS = ("now skips steps with NaN/Inf gradients where TensorFlow applied "
          "them; to keep TensorFlow's behaviour write ")
_SUBCLASS = (
    "private attributes of the legacy class, which the replacement does not "
    "use as it did (it fails, or ignores them, when the graph is built); "
    "subclass `managers.LossScaleManager` and implement `get_loss_scale()` and "
    "`update_loss_scale(finite_grads)` with variables of your own, or drop the "
    "class and pass its values to `managers.ExponentialUpdateLossScaleManager("
    "init_loss_scale, incr_every_n_steps, decr_every_n_nan_or_inf, incr_ratio, "
    "decr_ratio)`")
_KERAS_REWRITE = (
    "`{}` is a Keras optimizer: TensorFlow 2.x's "
    "enable_mixed_precision_graph_rewrite (and the replacement, which does the "
    "same) accepts only Keras 2's legacy optimizers "
    "(tf.keras.optimizers.legacy, up to TensorFlow 2.15) and raises ValueError "
    "for any other; for Keras use "
    "tf.keras.mixed_precision.set_global_policy('mixed_float16'), and "
    "model.compile wraps the optimizer in Keras's LossScaleOptimizer")
_REWRITE = "`mp_optimizer.enable_mixed_precision_graph_rewrite(opt, \"dynamic\")`"
_NVIDIA = ("`TF_ENABLE_AUTO_MIXED_PRECISION_{}` made NVIDIA's TF1 containers {}; "
           "stock TensorFlow ignores it, so this does nothing: {}, or run the "
           "script unchanged with `python -m mp_optimizer.nvidia_environment "
           "SCRIPT ARGS...`")
# What the rewrite alone is, on stock TensorFlow, and the lines of
# nvidia_runner.py that test_nvidia_findings_spell_what_the_container_did
# changes.
_REWRITE_ALONE = ("tf.config.optimizer.set_experimental_options("
                  "{\"auto_mixed_precision\": True})")
_SET = 'os.environ["TF_ENABLE_AUTO_MIXED_PRECISION_{}"] = "{}"'
_OPTIMIZER = "      opt = v1.train.MomentumOptimizer(learning_rate, momentum=0.9)\n"
_GETTER = (
    "`bfloat16_variable_getter` looks like a hand-written float32 "
    "master-weight getter: `mp_optimizer.float32_variable_getter` stores "
    "trainable float16/bfloat16 variables in float32 and casts them on read, "
    "creates every other variable as requested, and also handles float16 "
    "initial values, partitioned variables and an enclosing scope's getter; "
    "`bfloat16_variable_getter` does not look at `trainable`, so it stores "
    "non-trainable variables (moving averages, counters) in float32 too, and "
    "checkpoints written with it hold them in float32; pass it as "
    "`custom_getter=`, or build the model under `with "
    "mp_optimizer.float32_master_weights():`. Checkpoint names stay the "
    "same. Not rewritten: such getters differ in detail")
# Fixture -> the exact stderr lines of the conversion ({} is the file).
MESSAGES = {
    "bfloat16_getter.py": ["{}:11: notice: " + _GETTER],
    "environment_first.py": [],
    "estimator_model_fns.py": [],
    "fixed_scale.py": [
        "{}:20: notice: `FixedLossScale(128)` " + _SKIPS +
        "`managers.FixedLossScale(128, skip_nonfinite_steps=False)`"],
    "keras_fixed_scale.py": ["{}:14: " + _KERAS_REWRITE.format("optimizer")],
    "keras_rewrite.py": [
        "{}:14: `opt` is a Keras optimizer: TensorFlow 2.x's "
        "enable_mixed_precision_graph_rewrite (and the replacement, which "
        "does the same) accepts only Keras 2's legacy optimizers "
        "(tf.keras.optimizers.legacy, up to TensorFlow 2.15) and raises "
        "ValueError for any other; for Keras use "
        "tf.keras.mixed_precision.set_global_policy('mixed_float16'), and "
        "model.compile wraps the optimizer in Keras's LossScaleOptimizer"],
    "manager_subclass.py": [
        "{}:10: class `ScopedLossScaleManager` extends "
        "`ExponentialUpdateLossScaleManager` and assigns "
        "`_decr_every_n_nan_or_inf`, `_decr_ratio`, `_incr_every_n_steps`, "
        "`_incr_ratio`, `_loss_scale`, `_num_bad_steps`, `_num_good_steps`: "
        + _SUBCLASS,
        "{}:30: class `LoggedLossScaleManager` extends "
        "`ExponentialUpdateLossScaleManager` and reads `_loss_scale`: " +
        _SUBCLASS],
    "needs_a_human.py": [
        "{}:12: `opt` is already wrapped for loss scaling (line 11) and is "
        "wrapped again here by `LossScaleOptimizer`: the replacement refuses "
        "to wrap twice (TensorFlow scaled the loss twice); keep one wrapper",
        "{}:17: `incr_every_n_steps=1000.5` is not a whole number of steps "
        "(the counters are integers): write the int you mean"],
    "nvidia_runner.py": [
        "{}:25: " + _NVIDIA.format(
            "GRAPH_REWRITE", "run the float16 graph rewrite, which does not "
            "scale the loss (`TF_ENABLE_AUTO_MIXED_PRECISION` and "
            "`TF_ENABLE_AUTO_MIXED_PRECISION_LOSS_SCALING` decided that)",
            "for the rewrite alone call `" + _REWRITE_ALONE.replace(
                "{", "{{").replace("}", "}}") + "` before the "
            "Session is created (with loss scaling on too, wrap the "
            f"optimizer with {_REWRITE} instead)"),
        "{}:36: " + _NVIDIA.format(
            "LOSS_SCALING", "apply dynamic loss scaling to every "
            "tf.compat.v1 optimizer, which does not rewrite the graph "
            "(`TF_ENABLE_AUTO_MIXED_PRECISION` and "
            "`TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE` decided that)",
            "wrap the optimizer with `mp_optimizer."
            "MixedPrecisionLossScaleOptimizer(opt, \"dynamic\")` (" + _REWRITE +
            " with the rewrite on too)")],
    "private_members.py": [
        "{}:13: `opt._loss_scale_manager` is private to the legacy class and "
        "the replacement has no such attribute; use `.loss_scale_manager`"],
    "scale_reset.py": [],
    "scoped_manager.py": [],
    "step_counts.py": [],
}


def _regression(seed=0):
  rng = np.random.RandomState(seed)
  features = rng.normal(size=(32, 4)).astype(np.float32)
  return features, features @ rng.normal(size=(4, 1)).astype(np.float32)


@pytest.mark.long_run
class ConvertedBehaviourTest(converted_files.ConvertedFilesTest):

  SOURCE = FIXTURES
  NAMES = tuple(MESSAGES)

  def test_command_prints_exactly_the_notices_and_findings(self):
    status, _, err = self.migrate
    expected = [line.format(self.dir / name)
                for name, lines in sorted(MESSAGES.items()) for line in lines]
    self.assertEqual((status, err.splitlines()), (1, expected))

  def test_scale_reset_and_inner_optimizer_work_as_with_contrib(self):
    # Not reported: the replacement's get_loss_scale() returns the scale
    # variable (as contrib's did), and its optimizer keeps contrib's `_opt`.
    scale_reset = self.converted("scale_reset.py")
    features, targets = _regression()
    with tf.Graph().as_default() as graph:
      train_op, reset, halve, momentum, opt = scale_reset.build(features,
                                                                 targets)
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        scales = [sess.run(opt.get_loss_scale())]
        for op in (reset, train_op, halve):
          sess.run(op)
          scales.append(sess.run(opt.get_loss_scale()))
        slot = sess.run(momentum)
    self.assertEqual(scales, [2.0**15, 1024.0, 1024.0, 512.0])
    self.assertEqual(slot.shape, (4, 1))
    self.assertTrue(np.all(slot != 0))  # The step reached the inner slots.

  def test_private_member_reported_is_missing_and_its_hint_works(self):
    private = self.converted("private_members.py")
    inner = v1.train.GradientDescentOptimizer(0.5)
    manager = mp_optimizer.managers.FixedLossScaleManager(64)
    with tf.Graph().as_default():
      with self.assertRaisesRegex(AttributeError, "_loss_scale_manager"):
        private.scale_and_learning_rate(inner, manager)
    opt = mp_optimizer.LossScaleOptimizer(inner, manager)
    self.assertIs(opt.loss_scale_manager, manager)  # The finding's hint.

  @parameterized.named_parameters(
      # The notice: the hand-written getter stores the non-trainable
      # variable in float32 too; the library's leaves it as requested.
      ("hand_written", None, tf.float32),
      ("float32_variable_getter", mp_optimizer.float32_variable_getter,
       tf.bfloat16))
  def test_getters_store_what_the_notice_says(self, getter, moving_mean):
    module = self.converted("bfloat16_getter.py")
    with tf.Graph().as_default():
      kernel, moving = module.build(getter or module.bfloat16_variable_getter)
      stored = {v.op.name: v.dtype.base_dtype for v in v1.global_variables()}
    self.assertEqual(stored, {"layer/kernel": tf.float32,
                              "layer/moving_mean": moving_mean})
    self.assertEqual((kernel.dtype.base_dtype, moving.dtype.base_dtype),
                     (tf.bfloat16, tf.bfloat16))

  @parameterized.named_parameters(
      # `..._GRAPH_REWRITE=1`, loss scaling off (--static-loss-scale): the
      # rewrite on, no loss scaling.
      ("rewrite_alone", ["--amp", "--static-loss-scale"], {}, {
          _SET.format("GRAPH_REWRITE", 1): _REWRITE_ALONE},
       ["auto_mixed_precision 1", "scale variables []"]),
      # `..._LOSS_SCALING=1`, the rewrite off: loss scaling, no rewrite.
      ("loss_scaling_alone", ["--amp"], {
          _SET.format("GRAPH_REWRITE", 1): _SET.format("GRAPH_REWRITE", 0)}, {
              _SET.format("LOSS_SCALING", 1): "pass",
              _OPTIMIZER: _OPTIMIZER + "      opt = mp_optimizer."
                          "MixedPrecisionLossScaleOptimizer(opt, \"dynamic\")\n",
              "import tensorflow as tf\n": "import tensorflow as tf\n"
                                           "import mp_optimizer\n"},
       ["auto_mixed_precision 0",
        "scale variables ['current_loss_scale', 'good_steps']"]))
  def test_nvidia_findings_spell_what_the_container_did(self, flags, setting,
                                                        spelling, tail):
    # What a finding spells does what mp_optimizer.nvidia_environment does
    # for the container's variable (docs: NVIDIA's containers).
    text = (FIXTURES / "nvidia_runner.py").read_text()
    for old, new in setting.items():
      self.assertIn(old, text)
      text = text.replace(old, new)
    container = self.dir / "container.py"
    container.write_text(text)
    spelled = self.dir / "spelled.py"
    for old, new in spelling.items():
      self.assertIn(old, text)
      text = text.replace(old, new)
    spelled.write_text(text)
    honoured = converted_files.run([sys.executable, "-m",
                                    "mp_optimizer.nvidia_environment",
                                    str(container), *flags])
    ours = converted_files.run([sys.executable, str(spelled), *flags])
    self.assertEqual((honoured[0], ours[0]), (0, 0), honoured[2] + ours[2])
    self.assertEqual(ours[1], honoured[1])
    self.assertEqual(ours[1].splitlines()[-2:], tail)

  def test_imports_land_after_the_environment_is_set(self):
    status, out, err = converted_files.run([sys.executable,
                             str(self.dir / "environment_first.py")])
    self.assertEqual(status, 0, err)
    first, final = (float(v) for v in out.split()[2::3])
    self.assertLess(final, first / 10)

  @parameterized.named_parameters(
      # Whether the weights stay finite after an initial read, a finite
      # step, a NaN step and a finite step: the NaN step is skipped (ours as
      # converted) or applied (TensorFlow's FixedLossScale, and ours with the
      # notice's spelling).
      ("as_converted", "", [True, True, True, True]),
      ("notice_spelling_applied", ", skip_nonfinite_steps=False",
       [True, True, False, False]))
  def test_fixed_scale_as_tensorflow_with_the_notice(self, extra, finite):
    text = (self.dir / "fixed_scale.py").read_text()
    path = self.dir / f"fixed_scale_{len(extra)}.py"
    path.write_text(text.replace("FixedLossScale(128)",
                                 f"FixedLossScale(128{extra})"))
    ours = self._fixed_scale_weights(converted_files.load(path, path.stem))
    theirs = self._fixed_scale_weights(converted_files.load(FIXTURES / "fixed_scale.py",
                                             "legacy_fixed_scale"))
    self.assertEqual([bool(np.all(np.isfinite(w))) for w in ours], finite)
    np.testing.assert_array_equal(ours[1], theirs[1])  # The finite step.
    if extra:  # TensorFlow's weights, NaN for NaN.
      np.testing.assert_array_equal(np.stack(ours), np.stack(theirs))
    else:
      np.testing.assert_array_equal(ours[2], ours[1])  # Skipped: unchanged.

  def _fixed_scale_weights(self, module):
    """Weights at start, after a finite, a NaN and another finite step."""
    features, targets = _regression()
    with tf.Graph().as_default() as graph:
      x = v1.placeholder(tf.float32, features.shape)
      _, train_op, weights = module.build(x, targets)
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        seen = [sess.run(weights)]
        for batch in (features, features * np.nan, features):
          sess.run(train_op, {x: batch})
          seen.append(sess.run(weights))
    return seen

  @parameterized.named_parameters(
      # Scale doubles after every 2 finite steps; on a non-finite step
      # (decr_every_n_nan_or_inf=1) contrib multiplies by decr_ratio=0.8,
      # TF's DynamicLossScale divides by its multiplier, 2.
      ("contrib", "contrib_manager", [4.0, 8.0, 8.0, 16.0, 16.0 * 0.8]),
      ("tf", "tf_loss_scale", [4.0, 8.0, 8.0, 16.0, 8.0]))
  def test_float_step_counts_run_as_ints(self, make, expected):
    converted = self.converted("step_counts.py")
    states = harness.run_manager(lambda: getattr(converted, make)(4.0),
                                 [True, True, True, True, False])
    self.assertEqual([s["scale"] for s in states],
                     [np.float32(v) for v in expected])

  def test_scoped_manager_saves_contrib_keys(self):
    scoped = self.converted("scoped_manager.py")
    model_dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, model_dir)
    rng = np.random.RandomState(0)
    features = rng.normal(size=(64, 5)).astype(np.float32)
    labels = (features[:, 0] > 0).astype(np.int64)
    with tf.Graph().as_default() as graph:
      loss, train_op = scoped.build(features, labels)
      saver = v1.train.Saver()
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        first = sess.run(loss)
        for _ in range(30):
          sess.run(train_op)
        last = sess.run(loss)
        saver.save(sess, os.path.join(model_dir, "model"))
    self.assertLess(last, first / 2)
    keys = tf.train.load_checkpoint(model_dir).get_variable_to_dtype_map()
    self.assertContainsSubset(
        {"fp16/loss_scale", "fp16/good_steps", "fp16/bad_steps"}, keys)

  def test_keras_optimizer_through_names_fails_as_with_tf(self):
    # The fixture's `SGD` is not one of Keras 2's legacy optimizers, the only
    # ones TensorFlow's own rewrite wraps: TF raises ValueError, and so does
    # the converted call (which is why the codemod reports it).
    self.addCleanup(mp_optimizer.disable_mixed_precision_graph_rewrite)
    keras_rewrite = self.converted("keras_rewrite.py")
    with self.assertRaises(ValueError) as ours:
      keras_rewrite.make_model(4)
    with self.assertRaises(ValueError):
      v1.mixed_precision.enable_mixed_precision_graph_rewrite(
          tf.keras.optimizers.SGD(learning_rate=0.05))
    self.assertIn("tf.keras.optimizers.legacy", str(ours.exception))
