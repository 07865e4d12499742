"""`mp-optimizer-migrate --precision bfloat16`: a float16 script to the mode.

Each form is converted through the command line on a file in a fresh
folder; the expected text is the rule of `mp_optimizer.migrate.precision`'s
table applied by hand. One legacy float16 script is converted and then run:
it must build the bfloat16 mode (bfloat16 compute, `NoLossScale`) and train.
"""

import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
from tests.migrate import one_file

TF = "import tensorflow as tf\n"
CONTRIB = "tf.contrib.mixed_precision."
BFLOAT16 = ("--precision", "bfloat16")


class PrecisionOptionTest(one_file.OneFileTest):

  @parameterized.named_parameters(
      ("tf_dtype", "x = tf.cast(y, tf.float16)\n",
       "x = tf.cast(y, tf.bfloat16)\n", "1: notice: `tf.float16` -> "),
      ("tf_half", "x = tf.zeros([2], tf.half)\n",
       "x = tf.zeros([2], tf.bfloat16)\n", "1: notice: `tf.half` -> "),
      ("dtypes_path", "x = tf.dtypes.float16\n", "x = tf.dtypes.bfloat16\n",
       "1: notice: `tf.dtypes.float16` -> `tf.dtypes.bfloat16`"),
      ("dtype_keyword", "w = tf.get_variable('w', [2], dtype='float16')\n",
       "w = tf.get_variable('w', [2], dtype='bfloat16')\n",
       "1: notice: dtype 'float16' -> 'bfloat16'"),
      ("cast_string", 'x = tf.cast(y, "half")\n', 'x = tf.cast(y, "bfloat16")\n',
       '1: notice: dtype "half" -> "bfloat16"'),
  )
  def test_dtypes_become_bfloat16(self, line, expected, notice):
    status, converted, lines = self._migrate(TF + line, *BFLOAT16)
    self.assertEqual(converted, TF + expected)
    self.assertEqual(status, 0)
    self.assertLen(lines, 1)
    self.assertStartsWith(lines[0], str(int(notice[0]) + 1) + notice[1:])

  def test_without_the_option_nothing_changes(self):
    text = TF + "x = tf.cast(y, tf.float16)\n"
    self.assertEqual(self._migrate(text), (0, text, []))

  @parameterized.named_parameters(
      ("contrib_manager",
       f"m = {CONTRIB}ExponentialUpdateLossScaleManager(2**15, 2000)\n",
       "m = managers.NoLossScale(keep_state_of=managers."
       "ExponentialUpdateLossScaleManager(2**15, 2000))\n"),
      ("contrib_optimizer",
       f"o = {CONTRIB}LossScaleOptimizer(opt, {CONTRIB}"
       "ExponentialUpdateLossScaleManager(8, 2))\n",
       "o = mp_optimizer.LossScaleOptimizer(opt, managers.NoLossScale("
       "keep_state_of=managers.ExponentialUpdateLossScaleManager(8, 2)))\n"),
      ("contrib_fixed", f"m = {CONTRIB}FixedLossScaleManager(128)\n",
       "m = managers.NoLossScale()\n"),
      ("tf2_optimizer",
       "o = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer("
       "opt, 'dynamic')\n",
       "o = mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, "
       "mp_optimizer.managers.NoLossScale(keep_state_of=mp_optimizer."
       "managers.DynamicLossScale()))\n"),
      ("tf2_default",
       "o = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer("
       "opt)\n",
       "o = mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, "
       "mp_optimizer.managers.NoLossScale(keep_state_of=mp_optimizer."
       "managers.DynamicLossScale()))\n"),
      ("tf2_aliases",
       "o = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer("
       "opt, 'dynamic', initial_scale=8)\n",
       "o = mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, "
       "mp_optimizer.managers.NoLossScale(keep_state_of=mp_optimizer."
       "managers.DynamicLossScale(initial_scale=8)))\n"),
      ("tf2_expression",
       "o = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer("
       "opt, loss_scale=scale)\n",
       "o = mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, loss_scale="
       "mp_optimizer.managers.NoLossScale(keep_state_of=mp_optimizer."
       "managers.get(scale)))\n"),
      ("tf2_number",
       "o = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer("
       "opt, 128)\n",
       "o = mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, "
       "mp_optimizer.managers.NoLossScale())\n"),
      ("graph_rewrite",
       "o = tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite("
       "opt, loss_scale=128)\n",
       "o = mp_optimizer.enable_bfloat16_graph_rewrite(opt)\n"),
  )
  def test_loss_scaling_becomes_the_bfloat16_mode(self, line, expected):
    status, converted, lines = self._migrate(TF + line, *BFLOAT16)
    self.assertTrue(converted.endswith("\n" + expected), converted)
    self.assertEqual(status, 0)
    self.assertTrue(any("notice:" in found and ("NoLossScale" in found or
                                                "bfloat16" in found)
                        for found in lines), lines)

  @parameterized.named_parameters(
      ("numpy", "import numpy as np\nx = np.zeros([2], np.float16)\n",
       "`np.float16`: NumPy has no bfloat16"),
      ("other_string", "kind = 'float16'\n",
       "the string 'float16' is left as it is"),
      ("float16_max", "limit = 65504\n", "65504 is float16's largest value"),
      ("bare_manager",
       "from tensorflow.contrib.mixed_precision import FixedLossScaleManager\n"
       "m = FixedLossScaleManager(128)\n",
       "`FixedLossScaleManager(...)`: replace it with managers.NoLossScale()"),
      ("bare_stateful_manager",
       "from tensorflow.contrib.mixed_precision import "
       "ExponentialUpdateLossScaleManager\n"
       "m = ExponentialUpdateLossScaleManager(8, 2)\n",
       "`ExponentialUpdateLossScaleManager(...)`: replace it with "
       "managers.NoLossScale(keep_state_of="
       "ExponentialUpdateLossScaleManager(...))"),
  )
  def test_what_cannot_change_is_a_finding(self, text, reason):
    status, converted, lines = self._migrate(TF + text, *BFLOAT16)
    self.assertEqual(status, 1)
    last = len((TF + text).splitlines())
    self.assertIn(f"{last}: {reason}", [line[:len(f"{last}: {reason}")]
                                         for line in lines])
    self.assertNotIn("bfloat16", converted.splitlines()[-1])

  def test_the_notice_says_the_scale_state_is_kept(self):
    _, _, lines = self._migrate(
        TF + f"m = {CONTRIB}ExponentialUpdateLossScaleManager(8, 2)\n",
        *BFLOAT16)
    self.assertIn(
        "2: notice: `managers.ExponentialUpdateLossScaleManager(...)` -> "
        "`managers.NoLossScale(keep_state_of=managers."
        "ExponentialUpdateLossScaleManager(...))`: bfloat16 needs no loss "
        "scale; a step with NaN/Inf gradients is still skipped; the "
        "manager's scale state is kept, never read nor updated, so the "
        "float16 run's checkpoints restore here and this run's restore in "
        "float16 with the scale it had", lines)

  @parameterized.named_parameters(
      ("contrib", f"m = {CONTRIB}ExponentialUpdateLossScaleManager(8, 2)\n"),
      ("tf2", "o = tf.compat.v1.mixed_precision."
       "MixedPrecisionLossScaleOptimizer(opt, 'dynamic')\n"))
  def test_a_converted_file_converts_to_itself(self, line):
    _, once, _ = self._migrate(TF + line, *BFLOAT16)
    status, twice, lines = self._migrate(once, *BFLOAT16)
    self.assertEqual((status, twice, lines), (0, once, []))

  def test_converted_script_reads_the_float16_checkpoints(self):
    """The float16 script and its bfloat16 conversion share every key."""
    script = TF + (
        "def build(features):\n"
        "  x = tf.cast(features, tf.float16)\n"
        "  w = tf.compat.v1.get_variable(\n"
        "      'w', [4, 2], initializer=tf.compat.v1.constant_initializer(0.1))\n"
        "  y = tf.matmul(x, tf.cast(w, tf.float16))\n"
        "  loss = tf.reduce_mean(tf.cast(y, tf.float32) ** 2)\n"
        "  opt = tf.contrib.mixed_precision.LossScaleOptimizer(\n"
        "      tf.compat.v1.train.AdamOptimizer(0.1),\n"
        "      tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(\n"
        "          2**15, 1))\n"
        "  step = tf.compat.v1.train.get_or_create_global_step()\n"
        "  return opt.minimize(loss, global_step=step)\n")
    folder = self.create_tempdir().full_path
    values = {}
    for precision, restore in (("float16", False), ("bfloat16", True),
                               ("float16", True)):
      _, converted, _ = self._migrate(script, "--precision", precision)
      namespace = {}
      exec(compile(converted, "model.py", "exec"), namespace)  # pylint: disable=exec-used
      with tf.Graph().as_default() as graph:
        train_op = namespace["build"](tf.constant(np.ones([3, 4], np.float32)))
        saver = tf.compat.v1.train.Saver()
        found = {v.op.name: v for v in tf.compat.v1.global_variables()}
        names, scale = set(found), found["loss_scale"]
        with tf.compat.v1.Session(graph=graph) as session:
          session.run(tf.compat.v1.global_variables_initializer())
          if restore:
            saved = {name for name, _ in tf.train.list_variables(folder)}
            self.assertEqual((names - saved, saved - names), (set(), set()))
            saver.restore(session, tf.train.latest_checkpoint(folder))
            self.assertEqual(session.run(scale), values["loss_scale"])
          session.run(train_op)
          if precision == "float16" and not restore:
            values["loss_scale"] = session.run(scale)
            # It moved: the gradient of w, 0.4 * S, stays finite in float16.
            self.assertEqual(values["loss_scale"], 2.0**16)
          saver.save(session, os.path.join(folder, "model"))

  def test_converted_script_trains_in_the_bfloat16_mode(self):
    script = TF + (
        "def build(features):\n"
        "  x = tf.cast(features, tf.float16)\n"
        "  w = tf.compat.v1.get_variable('w', [4, 2], dtype=tf.float16)\n"
        "  loss = tf.reduce_mean(tf.cast(tf.matmul(x, w), tf.float32) ** 2)\n"
        "  opt = tf.contrib.mixed_precision.LossScaleOptimizer(\n"
        "      tf.compat.v1.train.GradientDescentOptimizer(0.1),\n"
        "      tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(\n"
        "          2**15, 2000))\n"
        "  return w, opt, opt.minimize(loss)\n")
    status, converted, _ = self._migrate(script, *BFLOAT16)
    self.assertEqual(status, 0)
    namespace = {}
    exec(compile(converted, "model.py", "exec"), namespace)  # pylint: disable=exec-used
    with tf.Graph().as_default() as graph:
      weight, opt, train_op = namespace["build"](
          tf.constant(np.ones([3, 4], np.float32)))
      self.assertEqual(weight.dtype.base_dtype, tf.bfloat16)
      self.assertIsInstance(opt.loss_scale_manager, managers.NoLossScale)
      self.assertIsInstance(opt.loss_scale_manager.keep_state_of,
                            managers.ExponentialUpdateLossScaleManager)
      with tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        before = session.run(weight)
        session.run(train_op)
        self.assertFalse(np.array_equal(session.run(weight), before))


if __name__ == "__main__":
  tf.test.main()
