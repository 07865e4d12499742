"""Bit parity with TF's built-in `tf.compat.v1.mixed_precision` optimizer.

The same model, data and initial values are trained twice, each in its own
fresh graph: once with `mp_optimizer.MixedPrecisionLossScaleOptimizer`, once
with TensorFlow's `tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer`.
After every step every global variable (weights, slots, Adam's beta powers,
`global_step`, the loss-scale state) and the loss scale itself must hold the
same bytes in both runs.

Overflow is injected on chosen steps through the fed loss multiplier `poison`:
Inf and NaN make every gradient non-finite; a large finite multiplier makes the
float16 backward pass overflow only while the loss scale is large, so the
dynamic scale has to shrink far enough before such a step applies.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import models

v1 = tf.compat.v1
tf_mp = tf.compat.v1.mixed_precision

STEPS = 320
OVERFLOW = {
    3: np.inf, 4: np.inf, 17: np.nan, 40: 2.0**12, 41: 2.0**12, 42: 2.0**12,
    90: -np.inf, 150: 2.0**14, 151: np.nan, 152: 2.0**14, 230: np.inf,
    231: 2.0**13, 290: np.nan,
}
CLEAN = {}
LATE_OVERFLOW = {300: np.inf}  # A fixed scale applying it writes NaN.
SCALE = "(loss scale)"


def _schedule(injected):
  return [injected.get(step, 1.0) for step in range(STEPS)]


def _tf_dynamic(*args):
  return lambda: tf_mp.DynamicLossScale(*args)


# name, our loss_scale argument, TF's loss_scale argument, injected steps,
# whether some steps must have been skipped. The arguments are factories:
# loss-scale objects are made inside the graph they belong to.
VARIANTS = (
    ("dynamic_string", lambda: "dynamic", lambda: "dynamic", OVERFLOW, True),
    ("dynamic_growing", lambda: managers.DynamicLossScale(2**8, 10),
     _tf_dynamic(2**8, 10), OVERFLOW, True),
    ("dynamic_multiplier_three", lambda: managers.DynamicLossScale(100, 7, 3),
     _tf_dynamic(100, 7, 3), OVERFLOW, True),
    ("dynamic_tf_object_converted", _tf_dynamic(2**8, 10, 2),
     _tf_dynamic(2**8, 10, 2), OVERFLOW, True),
    ("dynamic_keras_aliases",
     lambda: managers.DynamicLossScale(initial_scale=2**8,
                                       dynamic_growth_steps=10),
     _tf_dynamic(2**8, 10), OVERFLOW, True),
    ("fixed_number_clean_run", lambda: 1024, lambda: 1024, CLEAN, False),
    ("fixed_tf_behaviour_applies_overflow",
     lambda: managers.FixedLossScale(1024, skip_nonfinite_steps=False),
     lambda: tf_mp.FixedLossScale(1024), LATE_OVERFLOW, False),
)


ALL_OPTIMIZERS = ("dynamic_string", "dynamic_growing", "dynamic_multiplier_three",
                  "fixed_number_clean_run")


def _variants():
  """Every variant with Adam (the most state); the main ones with all three."""
  return [
      (f"{name}_{optimizer}", optimizer, ours, theirs, injected, skips)
      for name, ours, theirs, injected, skips in VARIANTS
      for optimizer in (sorted(models.OPTIMIZERS) if name in ALL_OPTIMIZERS
                        else ["adam"])
  ]


def _train(wrap, optimizer, schedule):
  """Trains a fresh model with the optimizer `wrap(inner_optimizer)` makes.

  Args:
    wrap: Returns `(optimizer, loss_scale_fn)` for an inner optimizer;
      `loss_scale_fn()` gives the scale tensor once the graph is built.
    optimizer: A key of `models.OPTIMIZERS`.
    schedule: The `poison` multiplier fed at each step.

  Returns:
    One dict per step: every global variable's dtype and bytes, plus the loss
    scale, read after the step by the session run that ran it.
  """
  with tf.Graph().as_default() as graph:
    poison = models.poison_input()
    loss = models.dense_loss(poison) + tf.cast(models.embedding_loss(poison),
                                               tf.float32)
    opt, loss_scale_fn = wrap(models.OPTIMIZERS[optimizer]())
    global_step = v1.train.get_or_create_global_step()
    train_op = opt.minimize(loss, global_step=global_step)
    state = {v.op.name: v for v in v1.global_variables()}
    with tf.control_dependencies([train_op]):
      after_step = {name: tf.identity(v.read_value())
                    for name, v in state.items()}
      after_step[SCALE] = tf.identity(loss_scale_fn())
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      return [{name: (value.dtype, value.tobytes())
               for name, value in sess.run(after_step, {poison: p}).items()}
              for p in schedule]


def _ours(loss_scale):
  """Our optimizer; the scale through its public `loss_scale` property."""
  def wrap(inner):
    opt = mp_optimizer.MixedPrecisionLossScaleOptimizer(inner, loss_scale())
    return opt, lambda: opt.loss_scale
  return wrap


def _theirs(loss_scale):
  """TF's optimizer; the scale from its loss-scale object or variable."""
  def wrap(inner):
    argument = loss_scale()
    opt = tf_mp.MixedPrecisionLossScaleOptimizer(inner, argument)
    if isinstance(argument, str):  # TF made the object: read its variable.
      return opt, lambda: _variable("current_loss_scale").value()
    if isinstance(argument, (int, float)):  # TF's FixedLossScale(argument)().
      return opt, lambda: tf.constant(float(argument))
    return opt, argument
  return wrap


def _variable(name):
  found = [v for v in v1.global_variables() if v.op.name == name]
  if len(found) != 1:
    raise LookupError(f"expected one variable {name!r}, found {found}")
  return found[0]


def _values(states, name, dtype):
  return [np.frombuffer(s[name][1], dtype)[0] for s in states]


class BitParityTest(parameterized.TestCase):

  @parameterized.named_parameters(*_variants())
  def test_every_variable_bit_identical_after_every_step(
      self, optimizer, ours, theirs, injected, expect_skipped_steps):
    schedule = _schedule(injected)
    got = _train(_ours(ours), optimizer, schedule)
    want = _train(_theirs(theirs), optimizer, schedule)
    self.assertLen(got, STEPS)
    self.assertEqual(sorted(got[0]), sorted(want[0]), "different variables")
    self.assertContainsSubset({"dense/w", "dense/b", "table", "global_step",
                               SCALE}, set(want[0]))
    for step, (ours_after, theirs_after) in enumerate(zip(got, want)):
      for name, (dtype, data) in theirs_after.items():
        self.assertEqual(ours_after[name], (dtype, data),
                         f"{name} differs after step {step} "
                         f"(poison {schedule[step]})")
    final_step = _values(want, "global_step", np.int64)[-1]
    self.assertEqual(final_step < STEPS, expect_skipped_steps)


class ScheduleTest(parameterized.TestCase):
  """The injected schedule drives a dynamic scale both ways (TF's run)."""

  def test_scale_grows_and_shrinks_and_overflow_steps_are_skipped(self):
    states = _train(_theirs(_tf_dynamic(2**8, 10)), "sgd", _schedule(OVERFLOW))
    scales = _values(states, SCALE, np.float32)
    self.assertTrue(any(b > a for a, b in zip(scales, scales[1:])))
    self.assertTrue(any(b < a for a, b in zip(scales, scales[1:])))
    applied = np.diff([0] + _values(states, "global_step", np.int64))
    non_finite = [step for step, p in OVERFLOW.items() if not np.isfinite(p)]
    self.assertEqual([applied[step] for step in non_finite],
                     [0] * len(non_finite))
    # Some large finite multipliers overflow float16 at the scale they meet.
    self.assertGreater(STEPS - sum(applied), len(non_finite))
