"""mp-optimizer-migrate on OpenSeq2Seq's loss scaling: reported, not rewritten.

Each row is a small file in the shape OpenSeq2Seq's configs and training
code have, and the exact findings `(line, reason)`; the source must come
back unchanged. Expected texts are written by hand from the rules in
`mp_optimizer/migrate/openseq2seq/equivalents.py`: Backoff is
`ExponentialUpdateLossScaleManager` with its params' values; LogMax's
nearest is `AmaxHistoryLossScaleManager`; a fixed scale is
`FixedLossScaleManager(..., skip_nonfinite_steps=False)`. That the Backoff
spellings do what OpenSeq2Seq did, step for step, is run in
tests/migrate/test_migrate_scalers.py.
"""

import pathlib

from absl.testing import parameterized

from mp_optimizer import migrate
from tests.support import converted_files

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
SCALER = ("from open_seq2seq.optimizers.automatic_loss_scaler import "
          "AutomaticLossScaler\n")
OPTIMIZE = "from open_seq2seq.optimizers import optimize_loss\n"
_OWN = "not rewritten: OpenSeq2Seq's scaler has an interface of its own"
_MOVE = ("the training code around it (OpenSeq2Seq's optimize_loss or "
         "MixedPrecisionOptimizerWrapper, update_op, loss_scale, check_grads) "
         "must move to `mp_optimizer.LossScaleOptimizer(opt, manager)`, with "
         "the model built under `with mp_optimizer.float32_master_weights():` "
         "for the float32 copies of float16 variables that OpenSeq2Seq's "
         "wrapper kept")
_MIXED = ' (applied only with dtype="mixed")'
_LOGMAX = (
    "no manager has its rule: it sets the scale to 2**(16 - mu - "
    "overflow_std_dev * sigma) from running means of log2 of each step's "
    "largest gradient, starts at 1.0, and takes a step with NaN/Inf gradients "
    "for log2(amax) = 2**log_max, which holds the scale at scale_min for "
    "thousands of steps; the nearest is ")
_AMAX = (
    ", which sets the scale from the largest gradient of the last 16 finite "
    "steps (history_length), a power of two (margin) below float16's largest "
    "value, and on an overflow halves it and keeps a power of two more margin "
    "for 1000 finite steps (relax_after); ")
_BACKOFF_DEFAULTS = ("scale_min 1.0, scale_max 2.0**24, step_factor 2.0, "
                     "step_window 2000")
_GENERAL_BACKOFF = (
    "`managers.ExponentialUpdateLossScaleManager(init_loss_scale=scale_max, "
    "incr_every_n_steps=step_window, decr_every_n_nan_or_inf=1, "
    "incr_ratio=step_factor, decr_ratio=1 / step_factor, "
    "min_loss_scale=scale_min, max_loss_scale=scale_max)`")
_GENERAL_LOGMAX = (
    "`managers.AmaxHistoryLossScaleManager(init_loss_scale=max(1.0, "
    "scale_min), min_loss_scale=scale_min, max_loss_scale=scale_max)`")


def _backoff(label, spelling, mixed=False, after=""):
  return (f"{label} is OpenSeq2Seq's Backoff loss scaling"
          f"{_MIXED if mixed else ''}, {_OWN}; the same rule, step for step, "
          f"is `managers.{spelling}`{after}; {_MOVE}")


def _logmax(label, spelling, mixed=False, after=""):
  return (f"{label} is OpenSeq2Seq's LogMax loss scaling"
          f"{_MIXED if mixed else ''}, {_OWN}, and " + _LOGMAX +
          f"`managers.{spelling}`{after}{_AMAX}{_MOVE}")


def _fixed(label, value, mixed=True):
  return (f"{label} is OpenSeq2Seq's fixed loss scale"
          f"{_MIXED if mixed else ''}, not rewritten; the same is "
          f"`managers.FixedLossScaleManager({value}, "
          "skip_nonfinite_steps=False)` (OpenSeq2Seq applied steps with "
          "NaN/Inf gradients, which "
          f"`managers.FixedLossScaleManager({value})` skips); {_MOVE}")


def _not_literal(label, shown, numbers, mixed=False):
  return (f"{label} is OpenSeq2Seq's loss scaling{_MIXED if mixed else ''}, "
          f"{_OWN}, and which manager does the same cannot be computed here: "
          f"`{shown}` is not a literal. Look at the values it takes: "
          f"\"Backoff\" is {_GENERAL_BACKOFF} with the values of its params "
          f"(defaults: {_BACKOFF_DEFAULTS}), \"LogMax\" is nearest to "
          f"{_GENERAL_LOGMAX}" +
          (", a number N is `managers.FixedLossScaleManager(N, "
           "skip_nonfinite_steps=False)`" if numbers else "") + f"; {_MOVE}")


def _member(shown):
  return (f"`{shown}` uses OpenSeq2Seq's loss scaler, {_OWN}, which no "
          f"manager has; {_MOVE}")


_DEFAULT_BACKOFF = (
    "ExponentialUpdateLossScaleManager(init_loss_scale=2.0**24, "
    "incr_every_n_steps=2000, decr_every_n_nan_or_inf=1, incr_ratio=2.0, "
    "decr_ratio=0.5, min_loss_scale=1.0, max_loss_scale=2.0**24)")
_LABEL = "`AutomaticLossScaler(...)`"

# name, source (left as it is), findings.
CASES = [
    ("backoff_by_default",
     SCALER + "scaler = AutomaticLossScaler()\n",
     [(2, _backoff(_LABEL, _DEFAULT_BACKOFF))]),
    ("backoff_params_filled_in",  # Case and spaces as OpenSeq2Seq ignores.
     SCALER + "scaler = AutomaticLossScaler(\n    ' backoff', {\n"
     "        'scale_min': 2.0, 'scale_max': 2.**15,\n"
     "        'step_factor': 4.0, 'step_window': 100})\n",
     [(2, _backoff(_LABEL, (
         "ExponentialUpdateLossScaleManager(init_loss_scale=2.**15, "
         "incr_every_n_steps=100, decr_every_n_nan_or_inf=1, incr_ratio=4.0, "
         "decr_ratio=0.25, min_loss_scale=2.0, max_loss_scale=2.**15)")))]),
    ("backoff_factor_not_a_power_of_two",
     SCALER + "scaler = AutomaticLossScaler(algorithm='Backoff',\n"
     "                             params=dict(step_factor=3.0))\n",
     [(2, _backoff(_LABEL, (
         "ExponentialUpdateLossScaleManager(init_loss_scale=2.0**24, "
         "incr_every_n_steps=2000, decr_every_n_nan_or_inf=1, incr_ratio=3.0, "
         "decr_ratio=1 / 3.0, min_loss_scale=1.0, max_loss_scale=2.0**24)")))]),
    ("backoff_factor_not_literal",
     SCALER + "s = AutomaticLossScaler('Backoff', {'step_factor': f + 1})\n",
     [(2, _backoff(_LABEL, (
         "ExponentialUpdateLossScaleManager(init_loss_scale=2.0**24, "
         "incr_every_n_steps=2000, decr_every_n_nan_or_inf=1, incr_ratio=f + "
         "1, decr_ratio=1 / (f + 1), min_loss_scale=1.0, "
         "max_loss_scale=2.0**24)")))]),
    ("backoff_params_not_literal",
     SCALER + "def make(cfg):\n  return AutomaticLossScaler('Backoff', cfg)\n",
     [(3, _backoff(_LABEL, _GENERAL_BACKOFF[10:-1], after=(
         " with the values of its params, not known here (defaults: "
         f"{_BACKOFF_DEFAULTS})")))]),
    ("backoff_unknown_param",
     SCALER + "scaler = AutomaticLossScaler('Backoff', {'step_size': 10})\n",
     [(2, _backoff(_LABEL, _DEFAULT_BACKOFF, after=(
         " (OpenSeq2Seq rejects its params' `step_size` with ValueError)")))]),
    ("backoff_scaler_itself",
     "from open_seq2seq.optimizers.automatic_loss_scaler import "
     "BackoffScaler\n\ndef make():\n  return BackoffScaler(None)\n",
     [(4, _backoff("`BackoffScaler(...)`", _DEFAULT_BACKOFF))]),
    ("through_a_module_alias",
     "from open_seq2seq.optimizers import automatic_loss_scaler as als\n"
     "scaler = als.AutomaticLossScaler('Backoff')\n",
     [(2, _backoff("`als.AutomaticLossScaler(...)`", _DEFAULT_BACKOFF))]),
    ("logmax_nearest",
     SCALER + "scaler = AutomaticLossScaler('LogMax', params={\n"
     "    'scale_min': 2.0, 'log_max': 15.0, 'beta1': 0.9})\n",
     [(2, _logmax(_LABEL, (
         "AmaxHistoryLossScaleManager(init_loss_scale=2.0, "
         "min_loss_scale=2.0, max_loss_scale=2.0**24)"), after=(
             " (`log_max`, `beta1` of its params have no counterpart)")))]),
    ("logmax_scaler_itself",
     "from open_seq2seq.optimizers.automatic_loss_scaler import LogMaxScaler\n"
     "scaler = LogMaxScaler({'scale_max': 2.**20})\n",
     [(2, _logmax("`LogMaxScaler(...)`", (
         "AmaxHistoryLossScaleManager(init_loss_scale=1.0, "
         "min_loss_scale=1.0, max_loss_scale=2.**20)")))]),
    ("algorithm_not_literal",
     SCALER + "scaler = AutomaticLossScaler(algorithm=FLAGS.scaling)\n",
     [(2, _not_literal(_LABEL, "FLAGS.scaling", numbers=False))]),
    ("arguments_unpacked",
     SCALER + "scaler = AutomaticLossScaler(**cfg)\n",
     [(2, _not_literal(_LABEL, "AutomaticLossScaler(**cfg)", numbers=False))]),
    ("algorithm_openseq2seq_rejects",
     SCALER + "scaler = AutomaticLossScaler('Static')\n",
     [(2, f"{_LABEL} names the algorithm 'Static', which OpenSeq2Seq's "
       "AutomaticLossScaler rejects with ValueError (it has \"Backoff\" and "
       "\"LogMax\")")]),
    ("optimize_loss_backoff_with_params",
     OPTIMIZE + "train_op = optimize_loss(\n    loss, 'Adam', {}, lr_fn, "
     "dtype='mixed', loss_scaling='Backoff',\n"
     "    loss_scaling_params={'step_window': 500})\n",
     [(2, _backoff("`optimize_loss(..., loss_scaling='Backoff')`", (
         "ExponentialUpdateLossScaleManager(init_loss_scale=2.0**24, "
         "incr_every_n_steps=500, decr_every_n_nan_or_inf=1, incr_ratio=2.0, "
         "decr_ratio=0.5, min_loss_scale=1.0, max_loss_scale=2.0**24)"),
                   mixed=True))]),
    ("optimize_loss_fixed_scale",
     OPTIMIZE + "train_op = optimize_loss(loss, 'SGD', {}, lr_fn, "
     "dtype='mixed',\n                         loss_scaling=512.0)\n",
     [(2, _fixed("`optimize_loss(..., loss_scaling=512.0)`", "512.0"))]),
    ("optimize_loss_without_scaling",
     OPTIMIZE + "a = optimize_loss(loss, 'SGD', {}, lr_fn, dtype='mixed')\n"
     "b = optimize_loss(loss, 'SGD', {}, lr_fn, loss_scaling=1.0)\n"
     "c = optimize_loss(loss, 'SGD', {}, lr_fn, loss_scaling=None)\n", []),
    ("optimize_loss_from_the_model_params",  # OpenSeq2Seq's Model does this.
     OPTIMIZE + "def train_op(self, loss):\n  return optimize_loss(\n"
     "      loss, loss_scaling=self.params.get('loss_scaling', 1.0),\n"
     "      loss_scaling_params=self.params.get('loss_scaling_params'))\n",
     [(3, _not_literal("`optimize_loss(..., loss_scaling=self.params.get("
                       "'loss_scaling', 1.0))`",
                       "self.params.get('loss_scaling', 1.0)", numbers=True,
                       mixed=True))]),
    ("scaler_reported_where_it_is_made",
     SCALER + OPTIMIZE + "from open_seq2seq.optimizers.mp_wrapper import "
     "MixedPrecisionOptimizerWrapper\n"
     "def build(loss, opt):\n  scaler = AutomaticLossScaler('LogMax')\n"
     "  opt = MixedPrecisionOptimizerWrapper(\n"
     "      opt, loss_scale=AutomaticLossScaler('Backoff'))\n"
     "  return optimize_loss(loss, 'SGD', {}, lr_fn, loss_scaling=scaler)\n",
     [(5, _logmax(_LABEL, (
         "AmaxHistoryLossScaleManager(init_loss_scale=1.0, "
         "min_loss_scale=1.0, max_loss_scale=2.0**24)"))),
      (7, _backoff(_LABEL, _DEFAULT_BACKOFF))]),
    ("wrapper_given_a_parameter",  # A float, or a scaler made elsewhere.
     "from .mp_wrapper import MixedPrecisionOptimizerWrapper\n"
     "def wrap(opt, loss_scaling):\n"
     "  return MixedPrecisionOptimizerWrapper(opt, loss_scale=loss_scaling)\n",
     [(3, _not_literal("`MixedPrecisionOptimizerWrapper(..., "
                       "loss_scale=loss_scaling)`", "loss_scaling",
                       numbers=True))]),
    ("relative_imports_in_the_package",
     "import tensorflow as tf\n"
     "from .automatic_loss_scaler import AutomaticLossScaler\n"
     "def apply(scaler, grads_and_vars):\n"
     "  if isinstance(scaler, AutomaticLossScaler):\n"
     "    has_nan, amax = AutomaticLossScaler.check_grads(grads_and_vars)\n"
     "    return scaler.update_op(has_nan, amax)\n",
     [(4, _member("AutomaticLossScaler")),
      (5, _member("AutomaticLossScaler.check_grads"))]),
    ("config_dict",  # No TensorFlow import needed.
     "from open_seq2seq.models import Text2Text\n"
     "base_params = {\n    'dtype': 'mixed',\n"
     "    'loss_scaling': 'Backoff',\n"
     "    'loss_scaling_params': {'scale_max': 2.**16},\n}\n",
     [(4, _backoff("`'loss_scaling': 'Backoff'` (an OpenSeq2Seq model "
                   "config)", (
                       "ExponentialUpdateLossScaleManager(init_loss_scale="
                       "2.**16, incr_every_n_steps=2000, "
                       "decr_every_n_nan_or_inf=1, incr_ratio=2.0, "
                       "decr_ratio=0.5, min_loss_scale=1.0, "
                       "max_loss_scale=2.**16)"), mixed=True))]),
    ("config_fixed_and_set_later",
     "import open_seq2seq.models\n"
     "base = dict(dtype='mixed', loss_scaling=512.0)\n"
     "base['loss_scaling'] = 'LogMax'\n",
     [(2, _fixed("`loss_scaling=512.0` (an OpenSeq2Seq model config)",
                 "512.0")),
      (3, _logmax("`base['loss_scaling'] = 'LogMax'` (an OpenSeq2Seq model "
                  "config)", _GENERAL_LOGMAX[10:-1], mixed=True, after=(
                      " with the values of its params, not known here "
                      "(defaults: scale_min 1.0, scale_max 2.0**24, log_max "
                      "16.0, beta1 0.99, beta2 0.999, overflow_std_dev "
                      "3.09)")))]),
    ("config_built_from_another",  # Its params may be in `base`.
     "from open_seq2seq.models import Speech2Text\n"
     "params = dict(base, loss_scaling='Backoff')\n"
     "other = {**base, 'loss_scaling': 'Backoff'}\n",
     [(2, _backoff("`loss_scaling='Backoff'` (an OpenSeq2Seq model config)",
                   _GENERAL_BACKOFF[10:-1], mixed=True, after=(
                       " with the values of its params, not known here "
                       f"(defaults: {_BACKOFF_DEFAULTS})"))),
      (3, _backoff("`'loss_scaling': 'Backoff'` (an OpenSeq2Seq model "
                   "config)", _GENERAL_BACKOFF[10:-1], mixed=True, after=(
                       " with the values of its params, not known here "
                       f"(defaults: {_BACKOFF_DEFAULTS})")))]),
    ("other_packages_left_alone",  # Not OpenSeq2Seq's names or configs.
     "import tensorflow as tf\nfrom seq2seq_lib import optimize_loss\n"
     "# open_seq2seq's loss_scaling, for comparison.\n"
     "params = {'loss_scaling': 'Backoff'}\n"
     "op = optimize_loss(loss, loss_scaling='Backoff')\n", []),
]


class OpenSeq2SeqTest(parameterized.TestCase):

  @parameterized.named_parameters(*CASES)
  def test_reported_with_the_equivalent(self, source, found):
    converted, findings = migrate.convert(source)
    self.assertEqual(converted, source)
    self.assertEqual([(f.line, f.reason) for f in findings], found)
    self.assertTrue(all(f.needs_human for f in findings))


# Fixture -> the exact stderr lines of the command ({} is the file).
MESSAGES = {
    "openseq2seq_config.py": [
        "{}:25: " + _backoff(
            "`\"loss_scaling\": \"Backoff\"` (an OpenSeq2Seq model config)",
            "ExponentialUpdateLossScaleManager(init_loss_scale=2.0**16, "
            "incr_every_n_steps=1000, decr_every_n_nan_or_inf=1, "
            "incr_ratio=2.0, decr_ratio=0.5, min_loss_scale=1.0, "
            "max_loss_scale=2.0**16)", mixed=True),
        "{}:37: " + _fixed("`loss_scaling=512.0` (an OpenSeq2Seq model "
                           "config)", "512.0")],
    "openseq2seq_training.py": [
        "{}:13: " + _not_literal(
            "`optimize_loss(..., loss_scaling=config.get(\"loss_scaling\", "
            "\"Backoff\"))`", "config.get(\"loss_scaling\", \"Backoff\")",
            numbers=True, mixed=True),
        "{}:21: " + _logmax(
            "`optimize_loss(..., loss_scaling=\"LogMax\")`",
            "AmaxHistoryLossScaleManager(init_loss_scale=1.0, "
            "min_loss_scale=1.0, max_loss_scale=2.0**20)", mixed=True),
        "{}:28: " + _backoff(
            _LABEL, "ExponentialUpdateLossScaleManager(init_loss_scale="
            "2.0**24, incr_every_n_steps=500, decr_every_n_nan_or_inf=1, "
            "incr_ratio=2.0, decr_ratio=0.5, min_loss_scale=4.0, "
            "max_loss_scale=2.0**24)")],
}


class OpenSeq2SeqFilesTest(converted_files.ConvertedFilesTest):
  """The command on files in the shape of OpenSeq2Seq's configs and code."""

  SOURCE = FIXTURES
  NAMES = tuple(MESSAGES)

  def test_command_reports_each_place_and_changes_nothing(self):
    status, out, err = self.migrate
    expected = [line.format(self.dir / name)
                for name, lines in sorted(MESSAGES.items()) for line in lines]
    self.assertEqual((status, out, err.splitlines()), (1, "", expected))
    self.assertEqual(self.summary, "mp-optimizer-migrate: 2 files scanned, "
                     "0 changed, 5 findings, 0 notices, 0 errors")
    for name in self.NAMES:
      self.assertEqual((self.dir / name).read_bytes(),
                       (FIXTURES / name).read_bytes())


if __name__ == "__main__":
  parameterized.absltest.main()
