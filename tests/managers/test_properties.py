"""Property tests: the graph managers against a plain-Python model.

`python_model` below is written from the pseudocode in the
ExponentialUpdateLossScaleManager docstring, in numpy float32 (the graph's
arithmetic). Hypothesis draws hyperparameters and finite/non-finite sequences;
after every step the graph's scale and counters must equal the model's, and
the invariants must hold: min <= scale <= max, scale finite, 0 <= good_steps <
incr_every_n_steps, 0 <= bad_steps < decr_every_n_nan_or_inf.
"""

from absl.testing import parameterized
import hypothesis
from hypothesis import strategies as st
import numpy as np

from mp_optimizer import managers
from mp_optimizer.managers import exponential
from tests.support import harness

f32 = np.float32
SETTINGS = hypothesis.settings(max_examples=40, deadline=None,
                               derandomize=True, print_blob=True)


def python_model(init, incr_every, decr_every, grow, shrink, low, high,
                 hysteresis, steps):
  """Returns [(scale, good, bad)] after each step; `shrink(scale)` decreases."""
  scale, good, bad, out = f32(init), 0, 0, []
  for finite in steps:
    if finite:
      if good + 1 >= incr_every:
        with np.errstate(over="ignore"):
          grown = scale * f32(grow)
        if np.isfinite(grown):
          scale = grown if high is None else min(grown, f32(high))
        good, bad = 0, 0
      else:
        good += 1
        if hysteresis == "consecutive":
          bad = 0
    else:
      good = 0
      if bad + 1 >= decr_every:
        scale = max(shrink(scale), f32(low))
        if hysteresis != "sticky":
          bad = 0
      else:
        bad += 1
    out.append((scale, good, bad))
  return out


@st.composite
def contrib_configs(draw):
  low = draw(st.sampled_from([1.0, 0.25, 3.0]) | st.floats(0.01, 100.0))
  high = draw(st.none() | st.floats(low, 3e38))
  init = draw(st.floats(low, high if high is not None else 3e38))
  return dict(init_loss_scale=init,
              incr_every_n_steps=draw(st.integers(1, 4)),
              decr_every_n_nan_or_inf=draw(st.integers(1, 4)),
              incr_ratio=draw(st.sampled_from([2.0, 3.0]) | st.floats(1.01, 1e6)),
              decr_ratio=draw(st.sampled_from([0.5, 0.8]) | st.floats(0.01, 0.99)),
              min_loss_scale=low, max_loss_scale=high,
              hysteresis=draw(st.sampled_from(
                  exponential.HYSTERESIS_MODES)))


STEPS = st.lists(st.booleans(), min_size=1, max_size=40)


class PropertyTest(parameterized.TestCase):

  def _check(self, make_manager, steps, expected, bounds):
    low, high, incr_every, decr_every = bounds
    states = harness.run_manager(make_manager, steps)
    self.assertLen(states, len(expected))
    for step, (state, (scale, good, bad)) in enumerate(zip(states, expected)):
      got = state["scale"]
      self.assertEqual(got, scale, f"scale after step {step}")
      self.assertEqual(state["good_steps"], good, f"good_steps, step {step}")
      self.assertEqual(state.get("bad_steps", 0), bad, f"bad_steps, step {step}")
      self.assertTrue(np.isfinite(got))
      self.assertGreaterEqual(got, f32(low))
      if high is not None:
        self.assertLessEqual(got, f32(high))
      self.assertTrue(0 <= good < incr_every)
      self.assertTrue(0 <= bad < decr_every)

  @hypothesis.given(config=contrib_configs(), steps=STEPS)
  @SETTINGS
  def test_contrib_face_matches_the_model(self, config, steps):
    decr = config["decr_ratio"]
    expected = python_model(
        config["init_loss_scale"], config["incr_every_n_steps"],
        config["decr_every_n_nan_or_inf"], config["incr_ratio"],
        lambda scale: scale * f32(decr), config["min_loss_scale"],
        config["max_loss_scale"], config["hysteresis"], steps)
    self._check(lambda: managers.ExponentialUpdateLossScaleManager(**config),
                steps, expected,
                (config["min_loss_scale"], config["max_loss_scale"],
                 config["incr_every_n_steps"],
                 config["decr_every_n_nan_or_inf"]))

  @hypothesis.given(init=st.floats(1.0, 1e30), period=st.integers(1, 4),
                    # Powers of two: Grappler may turn `scale / m` into
                    # `scale * (1/m)`, which differs in the last bit for
                    # other multipliers (as in TF's own DynamicLossScale).
                    multiplier=st.sampled_from([2.0, 4.0, 8.0]),
                    steps=STEPS)
  @SETTINGS
  def test_tf2_face_matches_the_model(self, init, period, multiplier, steps):
    expected = python_model(init, period, 1, multiplier,
                            lambda scale: scale / f32(multiplier), 1.0, None,
                            "contrib", steps)
    self._check(lambda: managers.DynamicLossScale(init, period, multiplier),
                steps, expected, (1.0, None, period, 1))
