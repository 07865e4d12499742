"""The BERT demo's checkpoints move between precisions: float16, bfloat16, float32.

The demo's recipe (`examples/bert_pretraining.py`: AdamWeightDecay under
`LossScaleOptimizer` with `global_clipnorm=1.0` and gradient accumulation)
trains in float16 with a dynamic loss scale for N micro-steps and is saved.
The same model computed in bfloat16 or in float32 under
`managers.NoLossScale(keep_state_of=<the float16 manager>)` restores that
checkpoint with a plain `tf.compat.v1.train.Saver()`: 0 missing and 0
unexpected keys, every value bit for bit, the scale state included. Trained
on and saved there, the run goes back into float16 the same way, and the
float16 run resumes with the scale state it had when it stopped. Under a
plain `managers.NoLossScale()` the scale state is not in the bfloat16 graph:
its keys are left over one way and missing the other.
"""

import os
import shutil
import tempfile

from absl.testing import parameterized
import numpy as np
import pytest
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

  def __init__(self, cleanup, dtype, manager):
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
      self.saver = v1.train.Saver()  # Plain: every variable, by name.
      self.init = v1.global_variables_initializer()
      self.session = v1.Session(graph=self.graph)
      cleanup(self.session.close)
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
      return self.saver.save(self.session, path)

  def restore(self, path):
    with self.graph.as_default():
      self.saver.restore(self.session, path)

  def restore_only(self, path, names):
    """Restores `names` with a Saver over them alone."""
    with self.graph.as_default():
      v1.train.Saver([self.variables[name] for name in names]).restore(
          self.session, path)

  def keys_against(self, path):
    """(missing, unexpected): this graph's names against `path`'s keys."""
    saved = set(dict(tf.train.list_variables(path)))
    return set(self.variables) - saved, saved - set(self.variables)


def _float16_manager():
  # A period of 1: the scale moves on every applied step, so a reset shows.
  return managers.ExponentialUpdateLossScaleManager(2**15, 1)


MODES = {
    "float16": (tf.float16, _float16_manager),
    "bfloat16": (tf.bfloat16, lambda: managers.NoLossScale(
        keep_state_of=_float16_manager())),
    "float32": (tf.float32, lambda: managers.NoLossScale(
        keep_state_of=_float16_manager())),
    "plain_bfloat16": (tf.bfloat16, managers.NoLossScale),
}


@pytest.mark.long_run
class PrecisionCheckpointTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    """The float16 run, trained N micro-steps, and its checkpoint: built
    once, then only read."""
    super().setUpClass()
    dtype, manager = MODES["float16"]
    cls.float16 = _Run(cls.addClassCleanup, dtype, manager())
    cls.float16.train(MICRO_STEPS, seed=0)
    folder = tempfile.mkdtemp()
    cls.addClassCleanup(shutil.rmtree, folder)
    cls.float16_path = cls.float16.save(os.path.join(folder, "fp16"))

  def _run(self, mode):
    dtype, manager = MODES[mode]
    return _Run(self.addCleanup, dtype, manager())

  def _assert_equal_values(self, got, expected):
    self.assertEqual(sorted(got), sorted(expected))
    for name, value in expected.items():
      self.assertEqual(got[name].tobytes(), value.tobytes(), name)

  def _saved(self, run, name):
    return run.save(os.path.join(self.create_tempdir(), name))

  def _float16_checkpoint(self):
    """The float16 run, trained N micro-steps, and its checkpoint."""
    return self.float16, self.float16_path

  @parameterized.named_parameters(("bfloat16", "bfloat16"),
                                  ("float32", "float32"))
  def test_float16_checkpoint_restores_with_every_key(self, mode):
    source, path = self._float16_checkpoint()
    target = self._run(mode)
    self.assertEqual(target.keys_against(path), (set(), set()))
    target.restore(path)
    self._assert_equal_values(target.values(), source.values())
    self.assertNotEqual(float(source.values(["loss_scale"])["loss_scale"]),
                        2.0**15)  # The scale moved: a reset would show.
    restored_step = target.values(["global_step"])["global_step"]
    # It trains on from there (no micro-step overflows without float16:
    # the window left open and ACCUMULATION more apply once),
    target.train(ACCUMULATION, seed=1)
    self.assertEqual(target.values(["global_step"])["global_step"],
                     restored_step + 1)
    # and leaves the kept scale state as it was.
    self._assert_equal_values(target.values(SCALE_STATE),
                              source.values(SCALE_STATE))

  @parameterized.named_parameters(("bfloat16", "bfloat16"),
                                  ("float32", "float32"))
  def test_float16_to_other_precision_and_back(self, mode):
    first, path = self._float16_checkpoint()
    middle = self._run(mode)
    middle.restore(path)
    middle.train(MICRO_STEPS, seed=1)
    path = self._saved(middle, mode)
    last = self._run("float16")
    self.assertEqual(last.keys_against(path), (set(), set()))
    last.restore(path)
    self._assert_equal_values(last.values(), middle.values())
    # The float16 run resumes its scale where it stopped.
    self._assert_equal_values(last.values(SCALE_STATE),
                              first.values(SCALE_STATE))

  def test_plain_no_loss_scale_leaves_the_scale_state_behind(self):
    """`NoLossScale()` alone: as documented for it, the scale state's keys
    are unexpected in bfloat16 and missing back in float16 (restore the
    other variables; the scale starts from its initial values)."""
    first, path = self._float16_checkpoint()
    middle = self._run("plain_bfloat16")
    self.assertEqual(middle.keys_against(path), (set(), SCALE_STATE))
    middle.restore(path)
    self._assert_equal_values(middle.values(), first.values(middle.variables))
    middle.train(MICRO_STEPS, seed=1)
    path = self._saved(middle, "bf16")
    last = self._run("float16")
    self.assertEqual(last.keys_against(path), (SCALE_STATE, set()))
    carried = sorted(set(last.variables) - SCALE_STATE)
    last.restore_only(path, carried)
    self._assert_equal_values(last.values(carried), middle.values(carried))
    scale = last.values(SCALE_STATE)
    self.assertEqual(float(scale["loss_scale"]), 2.0**15)
    self.assertEqual(int(scale["good_steps"]), 0)
    self.assertEqual(int(scale["bad_steps"]), 0)


if __name__ == "__main__":
  tf.test.main()
