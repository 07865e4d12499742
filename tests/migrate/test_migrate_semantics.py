"""mp-optimizer-migrate: shapes of real legacy code whose meaning could shift.

Each row is a small file in the shape model zoos wrote it, the converted text
expected (written by hand from the rules in the codemod's docstrings), and
the exact findings: `(line, reason, needs_human)`. A notice
(`needs_human=False`) says out loud what behaves differently and the spelling
that keeps the old behaviour; a finding needs a human. What the converted
code then does is run in tests/test_migrate_behaviour.py.
"""

from absl.testing import parameterized

from mp_optimizer import migrate

TF = "import tensorflow as tf\n"
TF_MP = TF + "from mp_optimizer import managers\nimport mp_optimizer\n"
_SKIPS = ("now skips steps with NaN/Inf gradients where TensorFlow applied "
          "them; to keep TensorFlow's behaviour write ")


def _keras(line, name):
  """The finding for a Keras optimizer given to the graph rewrite."""
  return (line, f"`{name}` is a Keras optimizer: TensorFlow 2.x's "
          "enable_mixed_precision_graph_rewrite (and the replacement, which "
          "does the same) accepts only Keras 2's legacy optimizers "
          "(tf.keras.optimizers.legacy, up to TensorFlow 2.15) and raises "
          "ValueError for any other; for Keras use "
          "tf.keras.mixed_precision.set_global_policy('mixed_float16'), and "
          "model.compile wraps the optimizer in Keras's LossScaleOptimizer",
          True)


def _notice(line, shown, maybe=False, value=None, opt=None):
  """The fixed-scale notice; `opt`: an optimizer of unknown kind given to
  the graph rewrite, where it holds for a tf.compat.v1 one only."""
  value = shown if value is None else value
  conditions = ([f"`{opt}` is a tf.compat.v1 optimizer (a Keras one goes to "
                 "Keras's LossScaleOptimizer, unchanged)"] if opt else []) + (
                     [f"`{value}` is a number"] if maybe else [])
  return (line, (f"if {' and '.join(conditions)}, " if conditions else "") +
          f"the fixed scale `loss_scale={shown}` " + _SKIPS +
          f"`loss_scale=managers.FixedLossScale({value}, "
          "skip_nonfinite_steps=False)`", False)


_TWICE = ("`opt` is already wrapped for loss scaling (line {}) and is wrapped "
          "again here by `{}`: the replacement refuses to wrap twice "
          "(TensorFlow scaled the loss twice); keep one wrapper")

# name, legacy, converted, findings.
CASES = [
    # Point 3: TF's fixed scales applied NaN/Inf steps; ours skip them.
    ("fixed_loss_scale",
     TF + "s = tf.train.experimental.FixedLossScale(128)\n",
     TF + "from mp_optimizer import managers\ns = managers.FixedLossScale(128)\n",
     [(2, "`FixedLossScale(128)` " + _SKIPS + "`managers.FixedLossScale(128, "
       "skip_nonfinite_steps=False)`", False)]),
    ("number_to_the_graph_rewrite",
     TF + "opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(\n"
     "    opt, loss_scale=128)\n",
     TF + "import mp_optimizer\n"
     "opt = mp_optimizer.enable_mixed_precision_graph_rewrite(\n"
     "    opt, loss_scale=128)\n",
     [_notice(2, "128", opt="opt")]),
    ("number_to_the_graph_rewrite_with_a_v1_optimizer",
     TF + "sgd = tf.compat.v1.train.GradientDescentOptimizer(0.1)\n"
     "opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(\n"
     "    sgd, loss_scale=128)\n",
     TF + "import mp_optimizer\n"
     "sgd = tf.compat.v1.train.GradientDescentOptimizer(0.1)\n"
     "opt = mp_optimizer.enable_mixed_precision_graph_rewrite(\n"
     "    sgd, loss_scale=128)\n",
     [_notice(3, "128")]),
    ("number_to_the_graph_rewrite_with_tf_optimizers",  # Keras, in TF 2.x.
     TF + "sgd = tf.optimizers.SGD(0.1)\n"
     "opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(\n"
     "    sgd, loss_scale=128)\n",
     TF + "import mp_optimizer\nsgd = tf.optimizers.SGD(0.1)\n"
     "opt = mp_optimizer.enable_mixed_precision_graph_rewrite(\n"
     "    sgd, loss_scale=128)\n", [_keras(3, "sgd")]),
    ("number_to_the_graph_rewrite_with_keras_scale_optimizer",
     TF + "opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)\n"
     "opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(\n"
     "    opt, loss_scale=128)\n",
     TF + "import mp_optimizer\n"
     "opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)\n"
     "opt = mp_optimizer.enable_mixed_precision_graph_rewrite(\n"
     "    opt, loss_scale=128)\n",
     [(2, "this file also uses Keras mixed precision: the loss scales "
       "converted here work with tf.compat.v1 optimizers only; check that none "
       "of them reaches a Keras optimizer", True), _keras(3, "opt")]),
    ("number_to_the_optimizer",
     TF + "opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer("
     "opt, 2**15)\n",
     TF + "import mp_optimizer\n"
     "opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, 2**15)\n",
     [_notice(2, "2**15")]),
    ("flag_that_may_be_a_number",
     TF + "opt = tf.train.experimental.MixedPrecisionLossScaleOptimizer(\n"
     "    opt, FLAGS.loss_scale)\n",
     TF + "import mp_optimizer\n"
     "opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(\n"
     "    opt, FLAGS.loss_scale)\n",
     [_notice(2, "FLAGS.loss_scale", maybe=True)]),
    ("scale_from_a_helper",  # flags_core.get_loss_scale: "dynamic" or 128.
     TF + "opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(\n"
     "    opt, loss_scale=get_loss_scale(FLAGS))\n",
     TF + "import mp_optimizer\n"
     "opt = mp_optimizer.enable_mixed_precision_graph_rewrite(\n"
     "    opt, loss_scale=get_loss_scale(FLAGS))\n",
     [_notice(2, "get_loss_scale(FLAGS)", maybe=True, opt="opt")]),
    ("code_quoted_on_one_line",
     TF + "opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(\n"
     "    opt, loss_scale=get_loss_scale(FLAGS,\n"
     "                                   default='dynamic'))\n",
     TF + "import mp_optimizer\n"
     "opt = mp_optimizer.enable_mixed_precision_graph_rewrite(\n"
     "    opt, loss_scale=get_loss_scale(FLAGS,\n"
     "                                   default='dynamic'))\n",
     [_notice(2, "get_loss_scale(FLAGS, default='dynamic')", maybe=True,
              opt="opt")]),
    ("keras_optimizer_reported_without_fixed_scale_notice",
     TF + "opt = tf.keras.optimizers.Adam()\n"
     "opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(\n"
     "    opt, loss_scale=get_loss_scale(FLAGS))\n",
     TF + "import mp_optimizer\nopt = tf.keras.optimizers.Adam()\n"
     "opt = mp_optimizer.enable_mixed_precision_graph_rewrite(\n"
     "    opt, loss_scale=get_loss_scale(FLAGS))\n", [_keras(3, "opt")]),
    ("dynamic_by_name_no_notice",
     TF + "s = tf.train.experimental.DynamicLossScale()\n"
     "opt = tf.train.experimental.MixedPrecisionLossScaleOptimizer(opt, s)\n"
     "rw = tf.train.experimental.enable_mixed_precision_graph_rewrite(\n"
     "    sgd, 'dynamic')\n",
     TF_MP + "s = managers.DynamicLossScale()\n"
     "opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, s)\n"
     "rw = mp_optimizer.enable_mixed_precision_graph_rewrite(\n"
     "    sgd, 'dynamic')\n", []),
    ("contrib_fixed_manager_skipped_already",
     TF + "m = tf.contrib.mixed_precision.FixedLossScaleManager(128)\n",
     TF + "from mp_optimizer import managers\nm = managers.FixedLossScaleManager(128)\n", []),
    # Point 4: float step counts.
    ("whole_float_step_counts",
     TF + "m = tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(\n"
     "    2**15, 1000.0, decr_every_n_nan_or_inf=2.)\n"
     "s = tf.train.experimental.DynamicLossScale(increment_period=1e3)\n"
     "t = tf.train.experimental.DynamicLossScale(2**15, 2_000.0, 2.0)\n",
     TF + "from mp_optimizer import managers\n"
     "m = managers.ExponentialUpdateLossScaleManager(\n"
     "    2**15, 1000, decr_every_n_nan_or_inf=2)\n"
     "s = managers.DynamicLossScale(increment_period=1000)\n"
     "t = managers.DynamicLossScale(2**15, 2000, 2.0)\n", []),
    ("fractional_step_count",
     TF + "m = tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(\n"
     "    init_loss_scale=2**15, incr_every_n_steps=1e3 / 3)\n"
     "s = tf.train.experimental.DynamicLossScale(increment_period=2.5)\n",
     TF + "from mp_optimizer import managers\n"
     "m = managers.ExponentialUpdateLossScaleManager(\n"
     "    init_loss_scale=2**15, incr_every_n_steps=1e3 / 3)\n"
     "s = managers.DynamicLossScale(increment_period=2.5)\n",
     [(4, "`increment_period=2.5` is not a whole number of steps (the "
       "counters are integers): write the int you mean", True)]),
    # Point 2: one optimizer wrapped twice in the same function.
    ("wrapped_twice",
     TF + "def build(opt, manager):\n"
     "  opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(opt)\n"
     "  opt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, manager)\n"
     "  return opt\n",
     TF + "import mp_optimizer\ndef build(opt, manager):\n"
     "  opt = mp_optimizer.enable_mixed_precision_graph_rewrite(opt)\n"
     "  opt = mp_optimizer.LossScaleOptimizer(opt, manager)\n"
     "  return opt\n",
     [(4, _TWICE.format(3, "LossScaleOptimizer"), True)]),
    ("wrapped_twice_nested",
     TF + "opt = tf.contrib.mixed_precision.LossScaleOptimizer(\n"
     "    tf.train.experimental.enable_mixed_precision_graph_rewrite(opt), m)\n",
     TF + "import mp_optimizer\nopt = mp_optimizer.LossScaleOptimizer(\n"
     "    mp_optimizer.enable_mixed_precision_graph_rewrite(opt), m)\n",
     [(2, _TWICE.format(3, "LossScaleOptimizer").replace(
         "`opt` is", "`tf.train.experimental.enable_mixed_precision_graph_"
         "rewrite(opt)` is"), True)]),
    ("exclusive_flags_not_reported",  # BERT's use_fp16 / manual_fp16.
     TF + "def build(opt, manager, use_fp16, manual_fp16):\n"
     "  if use_fp16:\n"
     "    opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(opt)\n"
     "  if manual_fp16:\n"
     "    opt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, manager)\n"
     "  return opt\n",
     TF + "import mp_optimizer\n"
     "def build(opt, manager, use_fp16, manual_fp16):\n"
     "  if use_fp16:\n"
     "    opt = mp_optimizer.enable_mixed_precision_graph_rewrite(opt)\n"
     "  if manual_fp16:\n"
     "    opt = mp_optimizer.LossScaleOptimizer(opt, manager)\n"
     "  return opt\n", []),
    # Point 1: Keras optimizers reached through a name are converted (the
    # replacement does what TF did) and reported, since TF 2.x's rewrite
    # takes only Keras 2's legacy optimizers; with a loss-scale object,
    # reported as such.
    ("keras_optimizer_through_names",
     TF + "from tensorflow.keras.optimizers import Adam\ntfk = tf.keras\n"
     "def build(model):\n  opt = Adam(1e-3)\n"
     "  opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(opt)\n"
     "  other = tfk.optimizers.SGD()\n"
     "  other = tf.train.experimental.enable_mixed_precision_graph_rewrite(\n"
     "      other, tf.train.experimental.DynamicLossScale())\n"
     "  model.compile(optimizer=opt, loss='mse')\n",
     TF + "from tensorflow.keras.optimizers import Adam\n"
     "from mp_optimizer import managers\nimport mp_optimizer\ntfk = tf.keras\n"
     "def build(model):\n  opt = Adam(1e-3)\n"
     "  opt = mp_optimizer.enable_mixed_precision_graph_rewrite(opt)\n"
     "  other = tfk.optimizers.SGD()\n"
     "  other = mp_optimizer.enable_mixed_precision_graph_rewrite(\n"
     "      other, managers.DynamicLossScale())\n"
     "  model.compile(optimizer=opt, loss='mse')\n",
     [_keras(6, "opt"),
      (8, "`other` is a Keras optimizer and `tf.train.experimental."
       "DynamicLossScale()` a loss-scale object: Keras's LossScaleOptimizer "
       "takes \"dynamic\" or a number here; use "
       "tf.keras.mixed_precision.LossScaleOptimizer(opt, initial_scale=..., "
       "dynamic_growth_steps=...)", True)]),
    # Point 5: forms not recognised before.
    ("tensorflow_core_imports",
     "import tensorflow_core as tf\n"
     "from tensorflow_core.contrib.mixed_precision import LossScaleOptimizer\n"
     "m = tf.contrib.mixed_precision.FixedLossScaleManager(8)\n"
     "s = tf.compat.v1.mixed_precision.DynamicLossScale()\n",
     "import tensorflow_core as tf\nfrom mp_optimizer import LossScaleOptimizer\n"
     "from mp_optimizer import managers\nm = managers.FixedLossScaleManager(8)\n"
     "s = managers.DynamicLossScale()\n", []),
    ("tensorflow_core_plain_import",
     "import tensorflow_core.contrib.mixed_precision\n"
     "m = tensorflow_core.contrib.mixed_precision.FixedLossScaleManager(8)\n"
     "n = tensorflow_core.constant(1)\n",
     "import tensorflow_core\nfrom mp_optimizer import managers\n"
     "m = managers.FixedLossScaleManager(8)\n"
     "n = tensorflow_core.constant(1)\n", []),
    ("assign_function_forms",
     TF + "m = tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(8, 2)\n"
     "a = tf.assign(m.get_loss_scale(), 8.0)\n"
     "b = tf.compat.v1.assign_add(m.get_loss_scale(), 1.0)\n"
     "c = tf.assign(other, 8.0)\n",
     TF + "from mp_optimizer import managers\n"
     "m = managers.ExponentialUpdateLossScaleManager(8, 2)\n"
     "a = tf.assign(m.get_loss_scale(), 8.0)\n"
     "b = tf.compat.v1.assign_add(m.get_loss_scale(), 1.0)\n"
     "c = tf.assign(other, 8.0)\n",
     []),  # get_loss_scale() returns the scale variable, as contrib's did.
    # Point 6: where imports go; layout.
    ("imports_after_environment_setup",
     "import os\nos.environ['TF_CPP_MIN_LOG_LEVEL'] = '2'\n"
     "import tensorflow as tf\n\n"
     "m = tf.contrib.mixed_precision.FixedLossScaleManager(8)\n",
     "import os\nos.environ['TF_CPP_MIN_LOG_LEVEL'] = '2'\n"
     "import tensorflow as tf\nfrom mp_optimizer import managers\n\n"
     "m = managers.FixedLossScaleManager(8)\n", []),
    ("no_blank_line_added",
     '"""Doc."""\nfrom __future__ import print_function\n' + TF +
     "def f():\n  return tf.train.experimental.DynamicLossScale()\n",
     '"""Doc."""\nfrom __future__ import print_function\n' + TF +
     "from mp_optimizer import managers\ndef f():\n  return managers.DynamicLossScale()\n", []),
    ("imports_before_first_use_at_import_time",
     TF + "M = tf.contrib.mixed_precision.FixedLossScaleManager(8)\n"
     "import numpy as np\n",
     TF + "from mp_optimizer import managers\nM = managers.FixedLossScaleManager(8)\n"
     "import numpy as np\n", []),
    ("no_import_in_the_file",
     '"""Doc."""\ndef f(tf1):\n  pass\n'
     "M = getattr(tf_module.contrib, 'mixed_precision')\n",
     '"""Doc."""\ndef f(tf1):\n  pass\n'
     "M = getattr(tf_module.contrib, 'mixed_precision')\n", []),
    ("aligned_arguments_follow_the_callee",
     TF + "def build(opt):\n"
     "  manager = tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager("
     "init_loss_scale=2**32,\n"
     + " " * 73 + "# contrib's\n"
     + " " * 73 + "incr_every_n_steps=1000)\n"
     "  return tf.contrib.mixed_precision.LossScaleOptimizer(opt,\n"
     + " " * 55 + "manager)\n",
     TF + "from mp_optimizer import managers\nimport mp_optimizer\ndef build(opt):\n"
     "  manager = managers.ExponentialUpdateLossScaleManager("
     "init_loss_scale=2**32,\n"
     + " " * 55 + "# contrib's\n"
     + " " * 55 + "incr_every_n_steps=1000)\n"
     "  return mp_optimizer.LossScaleOptimizer(opt,\n"
     + " " * 41 + "manager)\n", []),
    ("hanging_indent_kept",
     TF + "m = tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(\n"
     "    init_loss_scale=2**32,\n    incr_every_n_steps=1000)\n",
     TF + "from mp_optimizer import managers\nm = managers.ExponentialUpdateLossScaleManager(\n"
     "    init_loss_scale=2**32,\n    incr_every_n_steps=1000)\n", []),
]


class SemanticsTest(parameterized.TestCase):

  @parameterized.named_parameters(*CASES)
  def test_converts_and_says_what_changed(self, legacy, expected, found):
    converted, findings = migrate.convert(legacy)
    self.assertEqual(converted, expected)
    self.assertEqual([(f.line, f.reason, f.needs_human) for f in findings],
                     found)

  @parameterized.named_parameters(*CASES)
  def test_second_run_changes_nothing(self, legacy, expected, found):
    del legacy, found
    self.assertEqual(migrate.convert(expected)[0], expected)
