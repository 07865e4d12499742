"""The BERT demo's checkpoints move between precisions: float16, bfloat16, float32.

The demo's recipe (`examples/bert_pretraining.py`: AdamWeightDecay under
`LossScaleOptimizer` with `global_clipnorm=1.0` and gradient accumulation)
trains in float16 with a dynamic loss scale for N micro-steps and is saved.
The same model computed in bfloat16 (`managers.NoLossScale()`) and in
float32 restores that checkpoint: every variable of its graph is found (0
missing) with the saved values, and the only keys it leaves are the float16
run's loss-scale state (`loss_scale`, `good_steps`, `bad_steps`), which the
bfloat16 mode does not have. Trained on in bfloat16 and saved, the run goes
back into float16: every variable but that scale state is restored, the
scale state starts from the manager's initial values.
"""

import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from examples import adamw
from examples import bert_model
from examples import bert_pretraining

v1 = tf.compat.v1
MICRO_STEPS, ACCUMULATION, BATCH = 8, 4, 4
SCALE_STATE = {"loss_scale", "good_steps", "bad_steps"}


class _Run:
  """The demo's model and optimizer in `dtype`, in its own graph."""

  def __init__(self, testcase, dtype, manager):
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.inputs = v1.placeholder(tf.int32, [None, bert_model.LENGTH])
      self.targets = v1.placeholder(tf.int32, [None, bert_model.LENGTH])
      self.mask = v1.placeholder(tf.float32, [None, bert_model.LENGTH])
      loss = bert_model.masked_lm_loss(self.inputs, self.targets, self.mask,
                                       dtype)
      global_step = v1.train.get_or_create_global_step()
      args = type("Args", (), {"micro_steps": 100,
                               "accumulation": ACCUMULATION})
      self.opt = mp_optimizer.LossScaleOptimizer(
          adamw.AdamWeightDecay(
              bert_pretraining.learning_rate(global_step, args),
              weight_decay_rate=0.01),
          manager, global_clipnorm=1.0,
          gradient_accumulation_steps=ACCUMULATION)
      self.train_op = self.opt.minimize(loss, global_step=global_step)
      self.variables = {v.op.name: v for v in v1.global_variables()}
      self.scale_state = {v.op.name for v in manager.variables()}
      self.init = v1.global_variables_initializer()
      self.session = v1.Session(graph=self.graph)
      testcase.addCleanup(self.session.close)
      self.session.run(self.init)

  def train(self, steps, seed):
    rng = np.random.RandomState(seed)
    for _ in range(steps):
      tokens, masked, weights = bert_model.generate(rng, BATCH)
      self.session.run(self.train_op, {self.inputs: masked,
                                       self.targets: tokens,
                                       self.mask: weights})

  def values(self, names=None):
    names = sorted(self.variables if names is None else names)
    return dict(zip(names, self.session.run(
        [self.variables[name] for name in names])))

  def save(self, path):
    with self.graph.as_default():
      return v1.train.Saver().save(self.session, path)

  def restore(self, path, names):
    """Restores `names` with a Saver over them alone."""
    with self.graph.as_default():
      v1.train.Saver([self.variables[name] for name in names]).restore(
          self.session, path)


MODES = {"float16": (tf.float16, lambda: managers.ExponentialUpdateLossScaleManager(
    2**15, 100)),
         "bfloat16": (tf.bfloat16, managers.NoLossScale),
         "float32": (tf.float32, managers.NoLossScale)}


class PrecisionCheckpointTest(parameterized.TestCase):

  def _run(self, mode):
    dtype, manager = MODES[mode]
    return _Run(self, dtype, manager())

  def _assert_equal_values(self, got, expected):
    self.assertEqual(sorted(got), sorted(expected))
    for name, value in expected.items():
      self.assertEqual(got[name].tobytes(), value.tobytes(), name)

  @parameterized.named_parameters(("bfloat16", "bfloat16"),
                                  ("float32", "float32"))
  def test_float16_checkpoint_restores(self, mode):
    source = self._run("float16")
    source.train(MICRO_STEPS, seed=0)
    path = source.save(os.path.join(self.create_tempdir(), "fp16"))
    saved = dict(tf.train.list_variables(path))
    target = self._run(mode)
    missing = set(target.variables) - set(saved)
    unexpected = set(saved) - set(target.variables)
    self.assertEqual(missing, set())
    self.assertEqual(unexpected, SCALE_STATE)
    self.assertEqual(source.scale_state, SCALE_STATE)
    target.restore(path, target.variables)
    self._assert_equal_values(target.values(),
                              source.values(target.variables))
    self.assertEqual(target.values(["global_step"])["global_step"],
                     MICRO_STEPS // ACCUMULATION)
    target.train(ACCUMULATION, seed=1)  # It trains on from there.
    self.assertEqual(target.values(["global_step"])["global_step"],
                     MICRO_STEPS // ACCUMULATION + 1)

  def test_float16_to_bfloat16_and_back(self):
    first = self._run("float16")
    first.train(MICRO_STEPS, seed=0)
    path = first.save(os.path.join(self.create_tempdir(), "fp16"))
    middle = self._run("bfloat16")
    middle.restore(path, middle.variables)
    middle.train(MICRO_STEPS, seed=1)
    path = middle.save(os.path.join(self.create_tempdir(), "bf16"))
    last = self._run("float16")
    missing = set(last.variables) - set(dict(tf.train.list_variables(path)))
    self.assertEqual(missing, SCALE_STATE)
    carried = sorted(set(last.variables) - SCALE_STATE)
    last.restore(path, carried)
    self._assert_equal_values(last.values(carried), middle.values(carried))
    # The scale state was not in the bfloat16 checkpoint: initial values.
    scale = last.values(SCALE_STATE)
    self.assertEqual(float(scale["loss_scale"]), 2.0**15)
    self.assertEqual(int(scale["good_steps"]), 0)
    self.assertEqual(int(scale["bad_steps"]), 0)
    self.assertEqual(last.values(["global_step"])["global_step"],
                     2 * MICRO_STEPS // ACCUMULATION)


if __name__ == "__main__":
  tf.test.main()
