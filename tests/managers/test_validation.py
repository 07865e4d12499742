"""Every bad constructor argument: the right exception, naming arg and value.

One row per (argument, bad value). The message must name the argument and show
the value received, and nothing may have been added to the graph.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer

Exp = managers.ExponentialUpdateLossScaleManager
SGD = tf.compat.v1.train.GradientDescentOptimizer


def _exp(**kwargs):
  args = dict(init_loss_scale=8, incr_every_n_steps=2)
  args.update(kwargs)
  return lambda: Exp(**args)


def _dyn(**kwargs):
  return lambda: managers.DynamicLossScale(**kwargs)


def _exp_built_elsewhere():
  """A valid manager whose state lives in a graph of its own.

  A manager built in graph mode makes its state at once, so the optimizer
  rows build theirs in another graph: the graph under test must then hold
  nothing the failing optimizer constructor made.
  """
  with tf.Graph().as_default():
    return Exp(8, 2)


BAD_ARGUMENTS = (
    # FixedLossScaleManager
    ("fixed_below_one", lambda: managers.FixedLossScaleManager(0.5),
     ValueError, "loss_scale", "0.5"),
    ("fixed_nan", lambda: managers.FixedLossScaleManager(float("nan")),
     ValueError, "loss_scale", "nan"),
    ("fixed_inf", lambda: managers.FixedLossScaleManager(float("inf")),
     ValueError, "loss_scale", "inf"),
    ("fixed_beyond_float32", lambda: managers.FixedLossScaleManager(1e39),
     ValueError, "loss_scale", "1e+39"),
    ("fixed_string", lambda: managers.FixedLossScaleManager("128"),
     TypeError, "loss_scale", "'128'"),
    ("fixed_bool", lambda: managers.FixedLossScaleManager(True),
     TypeError, "loss_scale", "True"),
    ("fixed_array", lambda: managers.FixedLossScaleManager(np.array([2.0])),
     TypeError, "loss_scale", "array([2.])"),
    ("fixed_skip_not_bool",
     lambda: managers.FixedLossScaleManager(8, skip_nonfinite_steps=1),
     TypeError, "skip_nonfinite_steps", "1"),
    # ExponentialUpdateLossScaleManager
    ("init_below_one", _exp(init_loss_scale=0.5), ValueError,
     "init_loss_scale", "0.5"),
    ("init_none", _exp(init_loss_scale=None), TypeError, "init_loss_scale",
     "None"),
    ("init_inf", _exp(init_loss_scale=float("inf")), ValueError,
     "init_loss_scale", "inf"),
    ("incr_every_zero", _exp(incr_every_n_steps=0), ValueError,
     "incr_every_n_steps", "0"),
    ("incr_every_fractional", _exp(incr_every_n_steps=2.5), ValueError,
     "incr_every_n_steps", "2.5"),
    ("incr_every_string", _exp(incr_every_n_steps="2"), TypeError,
     "incr_every_n_steps", "'2'"),
    ("incr_every_bool", _exp(incr_every_n_steps=True), TypeError,
     "incr_every_n_steps", "True"),
    ("decr_every_negative", _exp(decr_every_n_nan_or_inf=-1), ValueError,
     "decr_every_n_nan_or_inf", "-1"),
    ("decr_every_string", _exp(decr_every_n_nan_or_inf="2"), TypeError,
     "decr_every_n_nan_or_inf", "'2'"),
    ("incr_ratio_one", _exp(incr_ratio=1), ValueError, "incr_ratio", "1"),
    ("incr_ratio_half", _exp(incr_ratio=0.5), ValueError, "incr_ratio",
     "0.5"),
    ("incr_ratio_bool", _exp(incr_ratio=True), TypeError, "incr_ratio",
     "True"),
    ("decr_ratio_one", _exp(decr_ratio=1), ValueError, "decr_ratio", "1"),
    ("decr_ratio_zero", _exp(decr_ratio=0), ValueError, "decr_ratio", "0"),
    ("decr_ratio_negative", _exp(decr_ratio=-0.5), ValueError, "decr_ratio",
     "-0.5"),
    ("decr_ratio_nan", _exp(decr_ratio=float("nan")), ValueError,
     "decr_ratio", "nan"),
    ("min_zero", _exp(min_loss_scale=0), ValueError, "min_loss_scale", "0"),
    ("min_above_init", _exp(min_loss_scale=16), ValueError,
     "init_loss_scale", "8"),
    ("max_below_min", _exp(max_loss_scale=0.5), ValueError, "max_loss_scale",
     "0.5"),
    ("max_below_init", _exp(max_loss_scale=4), ValueError, "init_loss_scale",
     "8"),
    ("max_inf", _exp(max_loss_scale=float("inf")), ValueError,
     "max_loss_scale", "inf"),
    ("hysteresis_unknown", _exp(hysteresis="deepspeed"), ValueError,
     "hysteresis", "'deepspeed'"),
    ("hysteresis_not_string", _exp(hysteresis=None), TypeError,
     "hysteresis", "None"),
    ("fail_after_zero", _exp(fail_at_floor_after=0), ValueError,
     "fail_at_floor_after", "0"),
    ("fail_after_fractional", _exp(fail_at_floor_after=2.5), ValueError,
     "fail_at_floor_after", "2.5"),
    ("fail_after_bool", _exp(fail_at_floor_after=True), TypeError,
     "fail_at_floor_after", "True"),
    ("min_string", _exp(min_loss_scale="1"), TypeError, "min_loss_scale",
     "'1'"),
    ("max_bool", _exp(max_loss_scale=False), TypeError, "max_loss_scale",
     "False"),
    # FixedLossScale (TF2 face)
    ("tf2_fixed_below_one", lambda: managers.FixedLossScale(0),
     ValueError, "loss_scale_value", "0"),
    ("tf2_fixed_string", lambda: managers.FixedLossScale("dynamic"),
     ValueError, "loss_scale_value", "'dynamic'"),
    ("tf2_fixed_none", lambda: managers.FixedLossScale(None),
     ValueError, "loss_scale_value", "None"),
    # DynamicLossScale (TF2 face)
    ("tf2_initial_below_one", _dyn(initial_loss_scale=0.25), ValueError,
     "initial_loss_scale", "0.25"),
    ("tf2_period_zero", _dyn(increment_period=0), ValueError,
     "increment_period", "0"),
    ("tf2_period_fractional", _dyn(increment_period=1.5), ValueError,
     "increment_period", "1.5"),
    ("tf2_period_none", _dyn(increment_period=None), TypeError,
     "increment_period", "None"),
    ("tf2_multiplier_one", _dyn(multiplier=1.0), ValueError, "multiplier",
     "1"),
    ("tf2_multiplier_string", _dyn(multiplier="2"), ValueError, "multiplier",
     "'2'"),
    ("tf2_alias_conflict", _dyn(initial_loss_scale=4, initial_scale=8),
     ValueError, "initial_scale", "8"),
    ("tf2_alias_conflict_at_default",
     _dyn(initial_loss_scale=2**15, initial_scale=8), ValueError,
     "initial_scale", "32768"),
    ("tf2_growth_alias_conflict_at_default",
     _dyn(increment_period=2000, dynamic_growth_steps=3), ValueError,
     "dynamic_growth_steps", "2000"),
    ("tf2_growth_alias_bad", _dyn(dynamic_growth_steps=0), ValueError,
     "increment_period", "0"),
    ("tf2_min_negative", _dyn(min_loss_scale=-1), ValueError,
     "min_loss_scale", "-1"),
    ("tf2_max_below_initial", _dyn(max_loss_scale=2.0**10), ValueError,
     "initial_loss_scale", "32768"),
    ("tf2_fail_after_zero", _dyn(fail_at_floor_after=0), ValueError,
     "fail_at_floor_after", "0"),
    # LossScaleHook
    ("hook_every_zero", lambda: mp_optimizer.LossScaleHook(every_n_steps=0),
     ValueError, "every_n_steps", "0"),
    ("hook_every_string", lambda: mp_optimizer.LossScaleHook(every_n_steps="5"),
     TypeError, "every_n_steps", "'5'"),
    # managers.get
    ("get_none", lambda: managers.get(None), ValueError, "loss_scale", "None"),
    ("get_other_string", lambda: managers.get("dynamik"), ValueError,
     "loss_scale", "'dynamik'"),
    ("get_list", lambda: managers.get([8]), ValueError, "loss_scale", "[8]"),
    ("get_below_one", lambda: managers.get(0.5), ValueError, "loss_scale",
     "0.5"),
    # LossScaleOptimizer
    ("opt_not_optimizer",
     lambda: mp_optimizer.LossScaleOptimizer("sgd", _exp_built_elsewhere()),
     TypeError,
     "opt", "'sgd'"),
    ("opt_manager_wrong_type",
     lambda: mp_optimizer.LossScaleOptimizer(SGD(0.1), 128), TypeError,
     "loss_scale_manager", "128"),
    ("opt_wrapped_twice",
     lambda: mp_optimizer.LossScaleOptimizer(
         mp_optimizer.LossScaleOptimizer(SGD(0.1), _exp_built_elsewhere()),
         _exp_built_elsewhere()),
     ValueError, "opt", "inner_optimizer"),
)


class BadArgumentsTest(parameterized.TestCase):

  @parameterized.named_parameters(*BAD_ARGUMENTS)
  def test_bad_argument(self, build, error, argument, shown_value):
    with tf.Graph().as_default() as graph:
      with self.assertRaises(error) as raised:
        build()
      self.assertEmpty(graph.get_operations(), "half-built graph")
    message = str(raised.exception)
    self.assertIn(f"`{argument}`", message)
    self.assertIn(shown_value, message)
