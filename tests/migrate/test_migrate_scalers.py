"""The managers the codemod names for OpenSeq2Seq's scalers, run next to them.

`backoff_model` is OpenSeq2Seq's Backoff rule written from its algorithm,
in numpy float32 as its graph computes it: the scale starts at `scale_max`;
a step with NaN/Inf gradients divides it by `step_factor` and remembers the
step; a finite step multiplies it by `step_factor` when the steps since the
last such step (or since step -1) are a multiple of `step_window`; the scale
is clipped to `[scale_min, scale_max]` each time. The division is by a
constant, which a Session's default rewrites (Grappler's constant folding)
compute as a product by its float32 reciprocal: the model does the same, and
a test shows the rewrite. Hypothesis draws params and sequences of
finite/non-finite steps; the codemod's finding for
`AutomaticLossScaler("Backoff", params)` spells a manager, which is built
from that text and run in a graph: after every step its scale must equal the
model's, bit for bit.

`logmax_model` is OpenSeq2Seq's LogMax rule, likewise; it backs the
finding's account of how LogMax differs from the nearest manager.
"""

import math
import re

from absl.testing import parameterized
import hypothesis
from hypothesis import strategies as st
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
from mp_optimizer import migrate
from tests.support import harness

v1 = tf.compat.v1
f32 = np.float32
SETTINGS = hypothesis.settings(max_examples=40, deadline=None,
                               derandomize=True, print_blob=True)
_SCALER = ("from open_seq2seq.optimizers.automatic_loss_scaler import "
           "AutomaticLossScaler\n")
_DEFAULTS = {"scale_min": 1.0, "scale_max": 2.0**24, "step_factor": 2.0,
             "step_window": 2000}


def backoff_model(params, finite_steps):
  """The scale after each step, as OpenSeq2Seq's Backoff rule sets it."""
  settings = {**_DEFAULTS, **params}
  low, high = f32(settings["scale_min"]), f32(settings["scale_max"])
  factor, window = f32(settings["step_factor"]), settings["step_window"]
  scale, last_overflow, out = high, -1, []
  for iteration, finite in enumerate(finite_steps):
    if not finite:  # `scale / step_factor`, as a Session computes it.
      shrunk = scale * (f32(1.0) / factor)
      scale, last_overflow = min(max(shrunk, low), high), iteration
    elif (iteration - last_overflow) % window == 0:
      scale = min(max(scale * factor, low), high)
    out.append(f32(scale))
  return out


def logmax_model(amaxes, log_max=16.0, beta1=0.99, beta2=0.999,
                 overflow_std_dev=3.09, scale_min=1.0, scale_max=2.0**24):
  """The scale each step uses, as OpenSeq2Seq's LogMax rule sets it."""
  fast = slow = squares = f32(0.0)
  fast_decay = slow_decay = f32(1.0)
  scale, out = f32(1.0), []
  for amax in amaxes:
    out.append(scale)
    x = (f32(2.0**log_max) if not np.isfinite(amax) else
         f32(np.log(f32(amax)) / np.log(f32(2.0))))
    fast = f32(beta1 * fast + (1 - beta1) * x)
    fast_decay = f32(fast_decay * beta1)
    slow = f32(beta2 * slow + (1 - beta2) * x)
    squares = f32(beta2 * squares + (1 - beta2) * x * x)
    slow_decay = f32(slow_decay * beta2)
    mu, slow_mu = fast / (1 - fast_decay), slow / (1 - slow_decay)
    sigma = math.sqrt(max(squares / (1 - slow_decay) - slow_mu * slow_mu, 0.0))
    scale = f32(min(max(2.0**(16 - (mu + overflow_std_dev * sigma)),
                        scale_min), scale_max))
  return out


def spelled_manager(params_source):
  """The manager the codemod's finding names for Backoff with these params."""
  _, found = migrate.convert(
      f"{_SCALER}s = AutomaticLossScaler('Backoff', {params_source})\n")
  return re.search(r"`(managers\.\w+\(.*?\))`", found[0].reason).group(1)


def run_spelling(spelling, finite_steps):
  states = harness.run_manager(lambda: eval(spelling, {"managers": managers}),  # pylint: disable=eval-used
                               finite_steps)
  return [s["scale"] for s in states]


PARAMS = st.fixed_dictionaries({}, optional={
    "scale_min": st.sampled_from([0.5, 1.0, 4.0]),
    "scale_max": st.sampled_from([2.0**10, 2.0**16, 3000.0]),
    "step_factor": st.sampled_from([2.0, 4.0, 3.0, 1.5, 8.0]),
    "step_window": st.integers(1, 6),
})


class BackoffTest(parameterized.TestCase):

  @hypothesis.given(PARAMS, st.lists(st.booleans(), min_size=1, max_size=60))
  @SETTINGS
  def test_spelled_manager_sets_backoffs_scale_bit_for_bit(self, params,
                                                           finite_steps):
    params.setdefault("step_window", 3)  # 2000 is run below.
    spelling = spelled_manager(repr(params))
    np.testing.assert_array_equal(
        run_spelling(spelling, finite_steps),
        backoff_model(params, finite_steps), err_msg=spelling)

  def test_defaults_over_a_whole_window(self):
    # Two backoffs, then 2,000 finite steps: the 2,000th grows the scale.
    finite_steps = [True] * 5 + [False] * 2 + [True] * 2001
    spelling = spelled_manager("None")
    self.assertIn("ExponentialUpdateLossScaleManager", spelling)
    ours = run_spelling(spelling, finite_steps)
    theirs = backoff_model({}, finite_steps)
    np.testing.assert_array_equal(ours, theirs)
    self.assertEqual((theirs[6], theirs[2005], theirs[2006]),
                     (2.0**22, 2.0**22, 2.0**23))

  def test_a_session_divides_by_a_constant_as_a_product(self):
    # OpenSeq2Seq's `scale / step_factor` (a Python float): with a factor
    # that is not a power of two the two roundings differ.
    scale = f32(2.0**24) * (f32(1.0) / f32(3.0))
    self.assertNotEqual(scale / f32(3.0), scale * (f32(1.0) / f32(3.0)))
    with tf.Graph().as_default() as graph:
      value = v1.placeholder(tf.float32, [])
      flag = v1.placeholder(tf.bool, [])
      divided = tf.cond(flag, lambda: value / 3.0, lambda: value)
      with v1.Session(graph=graph) as sess:
        got = sess.run(divided, {value: scale, flag: True})
    self.assertEqual(got, scale * (f32(1.0) / f32(3.0)))


class LogMaxTest(parameterized.TestCase):
  """What the LogMax finding says about it, on gradients of 2**-12..2**-8."""

  def setUp(self):
    super().setUp()
    rng = np.random.RandomState(0)
    self.amaxes = 2.0**rng.uniform(-12, -8, size=3000)
    self.amaxes[500] = np.inf

  def test_starts_at_one_and_stays_at_scale_min_after_an_overflow(self):
    scales = logmax_model(self.amaxes)
    self.assertEqual(scales[0], 1.0)
    self.assertGreater(scales[500], 2.0**14)
    self.assertEqual(set(scales[501:2501]), {1.0})  # 2,000 steps and more.

  def test_nearest_manager_halves_and_recovers(self):
    steps = [(bool(np.isfinite(a)), a) for a in self.amaxes[:520]]
    with tf.Graph().as_default() as graph:
      manager = managers.AmaxHistoryLossScaleManager(
          init_loss_scale=1.0, min_loss_scale=1.0, max_loss_scale=2.0**24)
      finite = v1.placeholder(tf.bool, [])
      amax = v1.placeholder(tf.float32, [])
      update = manager.update_loss_scale(finite, gradient_amax=amax)
      scale = manager.get_loss_scale()
      with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        scales = []
        for is_finite, value in steps:
          scales.append(sess.run(scale))
          sess.run(update, {finite: is_finite, amax: value})
    self.assertEqual(scales[0], 1.0)
    self.assertEqual(scales[501], scales[500] / 2)
    self.assertGreaterEqual(min(scales[501:]), scales[500] / 4)


if __name__ == "__main__":
  parameterized.absltest.main()
