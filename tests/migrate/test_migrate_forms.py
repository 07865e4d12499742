"""mp-optimizer-migrate: each legacy form, and what it reports.

`convert()` on one-line shapes of every legacy form. Expected outputs are written by hand from the rewrite rules: a dotted legacy
name becomes `managers.X`/`mp_optimizer.X` with the import added after the
file's last top-level import; a from-import is rewritten in place; a contrib
module imported under a name becomes `mp_optimizer.contrib` under that name.
Fixed scales of TF's API, which also print a notice, are in
tests/test_migrate_semantics.py; the command line in tests/test_migrate_cli.py;
the three legacy programs are converted and trained in
tests/legacy/test_legacy_programs.py.
"""

import re

from absl.testing import parameterized

from mp_optimizer import migrate
from mp_optimizer.migrate import names

# The legacy names whose replacement lives in `mp_optimizer.managers`.
MANAGER_NAMES = {target.name for target in names.LEGACY_NAMES.values()
                 if target.package == "managers"}
TF = "import tensorflow as tf\n"
TF_MP = "import tensorflow as tf\nfrom mp_optimizer import managers\nimport mp_optimizer\n"

# name, legacy source, converted source. Every row converts with no finding.
FORMS = [
    # It implements what the optimizer calls: nothing to report.
    ("tf_loss_scale_subclass_with_the_manager_methods",
     TF + "\nclass Constant(tf.train.experimental.LossScale):\n"
     "  def get_loss_scale(self):\n    return tf.constant(8.0)\n"
     "  def update_loss_scale(self, finite_grads):\n    return tf.no_op()\n",
     "import tensorflow as tf\nfrom mp_optimizer import managers\n"
     "\nclass Constant(managers.LossScale):\n"
     "  def get_loss_scale(self):\n    return tf.constant(8.0)\n"
     "  def update_loss_scale(self, finite_grads):\n    return tf.no_op()\n"),
    # The replacement's get_loss_scale() returns its scale variable, as
    # contrib's did; its optimizer keeps contrib's `_opt`.
    ("variable_uses_of_get_loss_scale_and_opt",
     TF + "\nm = tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(8, 2)\n"
     "opt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, m)\n"
     "reset = m.get_loss_scale().assign(8.0)\n"
     "again = tf.compat.v1.assign(m.get_loss_scale(), 1024.0)\n"
     "inner = opt._opt\n",
     TF_MP + "\nm = managers.ExponentialUpdateLossScaleManager(8, 2)\n"
     "opt = mp_optimizer.LossScaleOptimizer(opt, m)\n"
     "reset = m.get_loss_scale().assign(8.0)\n"
     "again = tf.compat.v1.assign(m.get_loss_scale(), 1024.0)\n"
     "inner = opt._opt\n"),
    ("private_members_the_replacement_keeps",
     TF + "\nopt = tf.train.experimental.enable_mixed_precision_graph_rewrite(\n"
     "    opt, 'dynamic')\ninner = opt._opt\n"
     "m = tf.contrib.mixed_precision.FixedLossScaleManager(8)\n"
     "value = m._loss_scale\n",
     TF + "from mp_optimizer import managers\nimport mp_optimizer\n"
     "\nopt = mp_optimizer.enable_mixed_precision_graph_rewrite(\n"
     "    opt, 'dynamic')\ninner = opt._opt\n"
     "m = managers.FixedLossScaleManager(8)\nvalue = m._loss_scale\n"),
    ("contrib_attribute",
     TF + "\nm = tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager("
     "2**15, 2000)\nopt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, m)\n",
     TF_MP + "\nm = managers.ExponentialUpdateLossScaleManager(2**15, 2000)\n"
     "opt = mp_optimizer.LossScaleOptimizer(opt, m)\n"),
    ("contrib_under_compat_v1",
     "import tensorflow.compat.v1 as tf\n\n"
     "m = tf.contrib.mixed_precision.FixedLossScaleManager(128)\n",
     "import tensorflow.compat.v1 as tf\nfrom mp_optimizer import managers\n\n"
     "m = managers.FixedLossScaleManager(128)\n"),
    ("contrib_from_import_names",
     "from tensorflow.contrib.mixed_precision import LossScaleOptimizer, "
     "FixedLossScaleManager as Fixed\n\nopt = LossScaleOptimizer(opt, Fixed(8))\n",
     "from mp_optimizer import LossScaleOptimizer\n"
     "from mp_optimizer.managers import FixedLossScaleManager as Fixed\n\n"
     "opt = LossScaleOptimizer(opt, Fixed(8))\n"),
    ("contrib_from_import_parenthesized",
     "from tensorflow.contrib.mixed_precision import (  # fp16\n"
     "    ExponentialUpdateLossScaleManager,\n    FixedLossScaleManager,\n)\n",
     "from mp_optimizer.managers import (  # fp16\n"
     "    ExponentialUpdateLossScaleManager,\n    FixedLossScaleManager,\n)\n"),
    ("contrib_module_alias",
     "import tensorflow.contrib.mixed_precision as mp\n\n"
     "opt = mp.LossScaleOptimizer(opt, mp.FixedLossScaleManager(8))\n",
     "from mp_optimizer import contrib as mp\n\n"
     "opt = mp.LossScaleOptimizer(opt, mp.FixedLossScaleManager(8))\n"),
    ("contrib_from_tf_contrib",
     "from tensorflow.contrib import mixed_precision\n\n"
     "m = mixed_precision.FixedLossScaleManager(8)\n",
     "from mp_optimizer import contrib as mixed_precision\n\n"
     "m = mixed_precision.FixedLossScaleManager(8)\n"),
    ("contrib_next_to_other_contrib_modules",
     "from tensorflow.contrib import layers, mixed_precision as contrib_mp\n",
     "from tensorflow.contrib import layers\n"
     "from mp_optimizer import contrib as contrib_mp\n"),
    ("contrib_plain_import",
     "import tensorflow.contrib.mixed_precision\n\n"
     "m = tensorflow.contrib.mixed_precision.FixedLossScaleManager(8)\n",
     "from mp_optimizer import managers\n\nm = managers.FixedLossScaleManager(8)\n"),
    ("contrib_private_module",
     "from tensorflow.contrib.mixed_precision.python import "
     "loss_scale_manager as lsm_lib\n\nm = lsm_lib.FixedLossScaleManager(8)\n",
     "from mp_optimizer import contrib as lsm_lib\n\n"
     "m = lsm_lib.FixedLossScaleManager(8)\n"),
    ("contrib_star_import",
     "from tensorflow.contrib.mixed_precision import *\n",
     "from mp_optimizer.contrib import *\n"),
    ("contrib_namespace_as_value",
     TF + "\nmixed_precision = tf.contrib.mixed_precision\n"
     "opt = mixed_precision.LossScaleOptimizer(opt, m)\n",
     TF + "import mp_optimizer\n\nmixed_precision = mp_optimizer.contrib\n"
     "opt = mixed_precision.LossScaleOptimizer(opt, m)\n"),
    ("contrib_getattr",
     TF + "\ncls = getattr(tf.contrib.mixed_precision, name)\n",
     TF + "import mp_optimizer\n\ncls = getattr(mp_optimizer.contrib, name)\n"),
    ("contrib_type_check",
     TF + "\nok = isinstance(opt, tf.contrib.mixed_precision.LossScaleOptimizer)\n",
     TF + "import mp_optimizer\n\n"
     "ok = isinstance(opt, mp_optimizer.LossScaleOptimizer)\n"),
    ("tf_train_experimental",
     TF + "\ns = tf.train.experimental.DynamicLossScale(2**15, 1000)\n"
     "base = tf.train.experimental.LossScale\n"
     "o = tf.train.experimental.MixedPrecisionLossScaleOptimizer(opt, s)\n"
     "o = tf.train.experimental.enable_mixed_precision_graph_rewrite(opt)\n"
     "tf.train.experimental.disable_mixed_precision_graph_rewrite()\n",
     TF_MP + "\ns = managers.DynamicLossScale(2**15, 1000)\n"
     "base = managers.LossScale\n"
     "o = mp_optimizer.MixedPrecisionLossScaleOptimizer(opt, s)\n"
     "o = mp_optimizer.enable_mixed_precision_graph_rewrite(opt)\n"
     "mp_optimizer.disable_mixed_precision_graph_rewrite()\n"),
    ("tf_compat_v1_namespaces",
     TF + "\na = tf.compat.v1.mixed_precision.DynamicLossScale()\n"
     "b = tf.compat.v1.mixed_precision.experimental.DynamicLossScale(8)\n"
     "c = tf.compat.v1.train.experimental.LossScale\n"
     "d = tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite\n",
     TF_MP + "\na = managers.DynamicLossScale()\n"
     "b = managers.DynamicLossScale(8)\nc = managers.LossScale\n"
     "d = mp_optimizer.enable_mixed_precision_graph_rewrite\n"),
    ("tf_under_compat_v1_alias",
     "import tensorflow.compat.v1 as tf\n\n"
     "o = tf.mixed_precision.MixedPrecisionLossScaleOptimizer(\n"
     "    opt, tf.mixed_precision.experimental.DynamicLossScale(8))\n",
     "import tensorflow.compat.v1 as tf\nfrom mp_optimizer import managers\nimport mp_optimizer\n\n"
     "o = mp_optimizer.MixedPrecisionLossScaleOptimizer(\n"
     "    opt, managers.DynamicLossScale(8))\n"),
    ("tf_from_compat_import_v1",
     "from tensorflow.compat import v1 as tf1\n\n"
     "o = tf1.train.experimental.enable_mixed_precision_graph_rewrite(opt)\n",
     "from tensorflow.compat import v1 as tf1\nimport mp_optimizer\n\n"
     "o = mp_optimizer.enable_mixed_precision_graph_rewrite(opt)\n"),
    ("tf2_mixed_precision_experimental",
     TF + "\ns = tf.mixed_precision.experimental.DynamicLossScale()\n",
     TF + "from mp_optimizer import managers\n\ns = managers.DynamicLossScale()\n"),
    ("tf_from_import_names",
     "from tensorflow.compat.v1.mixed_precision import DynamicLossScale, "
     "MixedPrecisionLossScaleOptimizer as MPLSO\n\n"
     "opt = MPLSO(opt, DynamicLossScale())\n",
     "from mp_optimizer.managers import DynamicLossScale\n"
     "from mp_optimizer import MixedPrecisionLossScaleOptimizer as MPLSO\n\n"
     "opt = MPLSO(opt, DynamicLossScale())\n"),
    ("own_top_level_managers_module_is_left_alone",
     TF + "import managers\n\nm = tf.contrib.mixed_precision."
     "FixedLossScaleManager(8)\nx = managers.build()\n",
     TF + "import managers\nfrom mp_optimizer import managers as managers_lib\n"
     "\nm = managers_lib.FixedLossScaleManager(8)\nx = managers.build()\n"),
    ("tf_module_alias_no_longer_used",
     "from tensorflow.compat.v1 import mixed_precision as tf_mp\n\n"
     "s = tf_mp.DynamicLossScale()\n",
     "from mp_optimizer import managers\n\ns = managers.DynamicLossScale()\n"),
    ("tf_module_alias_still_used",
     "from tensorflow.compat.v1.train import experimental\n\n"
     "state = experimental.PythonState\ns = experimental.DynamicLossScale()\n",
     "from tensorflow.compat.v1.train import experimental\nfrom mp_optimizer import managers\n\n"
     "state = experimental.PythonState\ns = managers.DynamicLossScale()\n"),
    ("module_level_alias",
     TF + "\nv1 = tf.compat.v1\ns = v1.mixed_precision.DynamicLossScale(64)\n",
     TF + "from mp_optimizer import managers\n\nv1 = tf.compat.v1\n"
     "s = managers.DynamicLossScale(64)\n"),
    ("tf_private_modules",
     "from tensorflow.python.training.experimental import loss_scale as ls\n"
     "from tensorflow.python.training.experimental.mixed_precision import "
     "enable_mixed_precision_graph_rewrite_v1\n\n"
     "opt = enable_mixed_precision_graph_rewrite_v1(opt, ls.DynamicLossScale())\n",
     "from mp_optimizer import enable_mixed_precision_graph_rewrite as "
     "enable_mixed_precision_graph_rewrite_v1\nfrom mp_optimizer import managers\n\n"
     "opt = enable_mixed_precision_graph_rewrite_v1(opt, "
     "managers.DynamicLossScale())\n"),
    ("getattr_with_a_literal",
     TF + "\ns = getattr(tf.train.experimental, 'DynamicLossScale')(2**10)\n"
     "mp = getattr(tf.contrib, 'mixed_precision')\n",
     TF_MP + "\ns = managers.DynamicLossScale(2**10)\n"
     "mp = mp_optimizer.contrib\n"),
    ("package_name_taken",
     TF + "\nmanagers = []\nmanagers.append(tf.train.experimental.DynamicLossScale(8))\n",
     TF + "from mp_optimizer import managers as managers_lib\n\nmanagers = []\n"
     "managers.append(managers_lib.DynamicLossScale(8))\n"),
    ("layout_and_comments_kept",
     TF + "\nopt = tf.contrib.mixed_precision.LossScaleOptimizer(  # wrap\n"
     "    opt,\n    # contrib defaults\n"
     "    tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(\n"
     "        init_loss_scale=2**15,   # large\n"
     "        incr_every_n_steps=2000))\n",
     TF_MP + "\nopt = mp_optimizer.LossScaleOptimizer(  # wrap\n"
     "    opt,\n    # contrib defaults\n"
     "    managers.ExponentialUpdateLossScaleManager(\n"
     "        init_loss_scale=2**15,   # large\n"
     "        incr_every_n_steps=2000))\n"),
    ("existing_import_reused",
     TF + "from mp_optimizer import managers\n\nm = tf.contrib.mixed_precision.FixedLossScaleManager(8)\n",
     TF + "from mp_optimizer import managers\n\nm = managers.FixedLossScaleManager(8)\n"),
    ("unchanged_shadowed_tf",
     "def build(tf):\n  return tf.train.experimental.DynamicLossScale()\n",
     "def build(tf):\n  return tf.train.experimental.DynamicLossScale()\n"),
    ("unchanged_other_names",
     TF + "\nstate = tf.train.experimental.PythonState\n"
     "policy = tf.keras.mixed_precision.Policy('mixed_float16')\n"
     "opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)\n"
     "cls = getattr(tf.train, name + 'Optimizer')\n",
     TF + "\nstate = tf.train.experimental.PythonState\n"
     "policy = tf.keras.mixed_precision.Policy('mixed_float16')\n"
     "opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)\n"
     "cls = getattr(tf.train, name + 'Optimizer')\n"),
]

_SCALE_OPT = ("opt = tf.contrib.mixed_precision.LossScaleOptimizer("
              "opt, manager)\n")
# name, legacy source, [(line, part of the reason)], text left as it was.
FINDINGS = [
    ("dynamic_getattr", TF + "\ncls = getattr(tf.train.experimental, name)\n",
     [(3, "dynamic getattr on `tensorflow.train.experimental`")],
     "getattr(tf.train.experimental, name)"),
    ("getattr_reaching_a_namespace",
     TF + "\nmp = getattr(tf.compat.v1, 'mixed_precision')\n",
     [(3, "getattr reaches `tensorflow.compat.v1.mixed_precision`")],
     "getattr(tf.compat.v1, 'mixed_precision')"),
    ("namespace_as_value",
     TF + "\ndef module():\n  return tf.compat.v1.mixed_precision\n",
     [(4, "is used as a value")], "return tf.compat.v1.mixed_precision"),
    ("star_import_of_tf_namespace",
     "from tensorflow.compat.v1.mixed_precision import *\n",
     [(1, "star import from `tensorflow.compat.v1.mixed_precision`")],
     "import *"),
    ("star_import_of_tensorflow", "from tensorflow import *\n",
     [(1, "star import from `tensorflow`")], "import *"),
    ("contrib_private_members",
     TF + "\n" + _SCALE_OPT + "s = opt._loss_scale_manager.get_loss_scale()\n"
     "inner = opt._opt\n",
     [(4, "`opt._loss_scale_manager` is private")],  # The replacement has _opt.
     "opt._loss_scale_manager"),
    ("tf_loss_scale_private_members",
     TF + "\ns = tf.train.experimental.DynamicLossScale()\n"
     "v = s._current_loss_scale\nw = s._weights\n",
     [(4, "`s._current_loss_scale` is private"), (5, "`s._weights` is private")],
     "s._weights"),
    ("tf_loss_scale_subclass",
     TF + "\nclass Halving(tf.train.experimental.LossScale):\n"
     "  def __call__(self):\n    return 1.0\n",
     [(3, "subclass of `tf.train.experimental.LossScale`")],
     "class Halving(managers.LossScale)"),
    ("private_method_override",
     TF + "\nclass Quiet(tf.contrib.mixed_precision.LossScaleOptimizer):\n\n"
     "  def _down_scale(self, grads_and_vars, loss_scale):\n"
     "    return grads_and_vars\n",
     [(5, "`_down_scale` overrides a private method")], "def _down_scale"),
    ("manager_subclass_assigning_contrib_attributes",
     TF + "\nclass M(tf.contrib.mixed_precision.FixedLossScaleManager):\n"
     "  def __init__(self, scale):\n    self._loss_scale = tf.constant(scale)\n",
     [(3, "class `M` extends `FixedLossScaleManager` and assigns "
       "`_loss_scale`: private")], "class M(managers.FixedLossScaleManager)"),
    ("manager_subclass_updating_contrib_counters",
     TF + "\nclass M(tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager):\n"
     "  def step(self):\n    self._num_good_steps += 1\n"
     "    self._incr_ratio, self._decr_ratio = 4, self._decr_ratio\n",
     [(3, "assigns `_decr_ratio`, `_incr_ratio`, `_num_good_steps` and reads "
       "`_decr_ratio`: private")], "self._num_good_steps += 1"),
    ("optimizer_subclass_reading_contrib_attributes",
     "from tensorflow.contrib.mixed_precision import LossScaleOptimizer\n\n"
     "class Logged(LossScaleOptimizer):\n"
     "  def minimize(self, loss):\n    print(self._loss_scale_manager)\n"
     "    return self._opt.minimize(loss)\n",
     [(3, "reads `_loss_scale_manager`: private attributes of the legacy "
       "class, which the replacement does not use as it did (it fails, or "
       "ignores them, when the graph is built); use the replacement's "
       "public properties")], "class Logged(LossScaleOptimizer)"),
    ("nvidia_variables_set_every_way",
     "import os\nfrom os import environ\n"
     "os.environ.setdefault('TF_ENABLE_AUTO_MIXED_PRECISION', '1')\n"
     "os.putenv('TF_ENABLE_AUTO_MIXED_PRECISION_LOSS_SCALING', '1')\n"
     "environ['TF_ENABLE_AUTO_MIXED_PRECISION'] = '1' if amp else '0'\n"
     "os.environ.update({'TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE': '1'})\n"
     "os.environ.update(TF_ENABLE_AUTO_MIXED_PRECISION='0')\n"
     "os.environ['TF_ENABLE_AUTO_MIXED_PRECISION'] = '0'\n",
     [(3, "`TF_ENABLE_AUTO_MIXED_PRECISION` made NVIDIA's TF1 containers "
       "apply the float16 graph rewrite and dynamic loss scaling"),
      (4, "`TF_ENABLE_AUTO_MIXED_PRECISION_LOSS_SCALING` made"),
      (5, "run the script unchanged with `python -m "
       "mp_optimizer.nvidia_environment SCRIPT ARGS...`"),
      (6, "`TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE` made")],
     "os.environ.setdefault('TF_ENABLE_AUTO_MIXED_PRECISION', '1')"),
    ("tf_type_check",
     TF + "\nok = isinstance(s, tf.compat.v1.mixed_precision.DynamicLossScale)\n",
     [(3, "now means managers.DynamicLossScale")],
     "isinstance(s, managers.DynamicLossScale)"),
    ("keras_argument",
     TF + "\nopt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(\n"
     "    opt, tf.mixed_precision.experimental.DynamicLossScale())\n",
     [(4, "is passed to a Keras API")],
     "tf.mixed_precision.experimental.DynamicLossScale()"),
    ("keras_in_the_same_file",
     TF + "\ns = tf.train.experimental.DynamicLossScale()\n"
     "tf.keras.mixed_precision.set_global_policy('mixed_float16')\n",
     [(4, "this file also uses Keras mixed precision")],
     "s = managers.DynamicLossScale()"),
    ("unknown_contrib_member",
     "from tensorflow.contrib.mixed_precision.python.loss_scale_optimizer "
     "import gen_math_ops\n",
     [(1, "is not part of tf.contrib.mixed_precision")], "gen_math_ops"),
    ("module_path_in_a_string",
     "import importlib\n\n"
     "mp = importlib.import_module('tensorflow.contrib.mixed_precision')\n",
     [(3, "names a legacy module")], "'tensorflow.contrib.mixed_precision'"),
]


class ConvertTest(parameterized.TestCase):

  @parameterized.named_parameters(*FORMS)
  def test_converts_with_nothing_left(self, legacy, expected):
    converted, findings = migrate.convert(legacy)
    self.assertEqual(converted, expected)
    self.assertEmpty(findings)

  @parameterized.named_parameters(*FORMS)
  def test_second_run_changes_nothing(self, legacy, expected):
    del legacy
    self.assertEqual(migrate.convert(expected), (expected, []))

  @parameterized.named_parameters(*FORMS)
  def test_managers_are_imported_by_name_only_where_the_legacy_names_were(
      self, legacy, expected):
    # docs/migrating.md: names imported one by one stay so; a module that
    # the converted code adds is always `from mp_optimizer import managers`.
    converted, _ = migrate.convert(legacy)
    by_name = re.search(r"^from mp_optimizer\.managers import", converted, re.M)
    imported = " ".join(re.findall(r"^from tensorflow\S* import (\([^)]*\)|.*)",
                                   legacy, re.M))
    legacy_by_name = set(re.findall(r"\w+", imported)) & MANAGER_NAMES
    self.assertEqual(bool(by_name), bool(legacy_by_name), converted)
    self.assertNotRegex(converted, r"(?m)^import mp_optimizer\.managers|"
                        r"^from mp_optimizer\.managers import \*")
    if re.search(r"\bmanagers(_lib)?\.[A-Z]", converted):  # Under a free name.
      self.assertRegex(converted,
                       r"(?m)^from mp_optimizer import managers( as \w+)?$")

  @parameterized.named_parameters(*FINDINGS)
  def test_reports_what_needs_a_human(self, legacy, expected, kept):
    converted, findings = migrate.convert(legacy)
    self.assertEqual([f.line for f in findings], [line for line, _ in expected])
    for finding, (_, fragment) in zip(findings, expected):
      self.assertIn(fragment, finding.reason)
    self.assertIn(kept, converted)

  def test_private_members_of_other_objects_are_not_reported(self):
    source = ("class Model:\n  def __init__(self):\n    self._opt = 1\n"
              "    self._loss_scale_manager = 2\n")
    self.assertEqual(migrate.convert(source), (source, []))
