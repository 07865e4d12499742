"""`NoLossScale(keep_state_of=manager)`: the float16 run's scale state, kept.

The kept manager's variables exist in the bfloat16 graph under its names,
are saved and restored with the rest, and are never read nor written by the
step: that step is the step of `NoLossScale()`, with a scale of 1.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer

v1 = tf.compat.v1
Exp = managers.ExponentialUpdateLossScaleManager
FACES = (("contrib", mp_optimizer.LossScaleOptimizer),
         ("tf2", mp_optimizer.MixedPrecisionLossScaleOptimizer))
KEPT = {
    "exponential": (lambda: Exp(2**15, 100),
                    ["loss_scale", "good_steps", "bad_steps"]),
    "dynamic_loss_scale": (managers.DynamicLossScale,
                           ["current_loss_scale", "good_steps"]),
    "amax": (managers.AmaxHistoryLossScaleManager,
             ["loss_scale", "amax_history", "amax_steps", "extra_margin",
              "clean_steps"]),
}


def _names(variables):
  return sorted(v.op.name for v in variables)


class _Run:
  """A two-weight model under `face(SGD, manager)` in its own graph.

  `make_manager` is called inside the graph when `in_graph`, else before
  it exists (its state is then made when the optimizer asks).
  """

  def __init__(self, testcase, face, make_manager, in_graph=True):
    manager = None if in_graph else make_manager()
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.poison = v1.placeholder_with_default(np.float32(1), [])
      self.w = v1.get_variable("w", initializer=[1.0, -2.0])
      self.manager = manager or make_manager()
      self.opt = face(v1.train.MomentumOptimizer(0.1, 0.9), self.manager)
      loss = tf.reduce_sum(tf.square(self.w)) * self.poison
      self.train_op = self.opt.minimize(
          loss, global_step=v1.train.get_or_create_global_step())
      self.signal_scale = mp_optimizer.signals.loss_scale()
      self.optimizer_scale = self.opt.get_loss_scale()
      self.session = v1.Session(graph=self.graph)
      testcase.addCleanup(self.session.close)
      self.session.run(v1.global_variables_initializer())

  def kept(self):
    with self.graph.as_default():
      return self.manager.variables()

  def run(self, poisons):
    for poison in poisons:
      self.session.run(self.train_op, {self.poison: poison})
    return self.session.run(self.w)


class KeepStateTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{face}_{kind}_{where}", face_class, kind, in_graph)
      for face, face_class in FACES for kind in KEPT
      for where, in_graph in (("built_in_graph", True),
                              ("built_before_graph", False)))
  def test_kept_state_has_the_managers_names_and_is_never_touched(
      self, face, kind, in_graph):
    make, names = KEPT[kind]
    self.assertEqual(_names(_Run(self, face, make).kept()), sorted(names))
    run = _Run(self, face, lambda: managers.NoLossScale(keep_state_of=make()),
               in_graph)
    self.assertEqual(_names(run.kept()), sorted(names))
    before = run.session.run(run.kept())
    run.run([1.0, np.inf, 1.0, np.nan, 1.0])
    after = run.session.run(run.kept())
    for old, new in zip(before, after):
      np.testing.assert_array_equal(old, new)
    self.assertEqual(run.session.run(mp_optimizer.skipped_steps(run.graph)),
                     2)
    self.assertEqual(run.session.run(run.signal_scale), 1.0)
    self.assertEqual(run.session.run(run.optimizer_scale), 1.0)
    global_names = {v.op.name for v in run.graph.get_collection(
        v1.GraphKeys.GLOBAL_VARIABLES)}
    self.assertContainsSubset(names, global_names)

  @parameterized.named_parameters(*FACES)
  def test_the_step_is_that_of_no_loss_scale(self, face):
    poisons = [1.0, np.inf, 1.0, 1.0, np.nan, 1.0]
    plain = _Run(self, face, managers.NoLossScale)
    keeping = _Run(self, face,
                   lambda: managers.NoLossScale(keep_state_of=Exp(2**15, 1)))
    np.testing.assert_array_equal(plain.run(poisons), keeping.run(poisons))
    # No op the train op runs takes a kept variable's handle.
    handles = {v.handle.name for v in keeping.kept()}
    seen, stack = set(), [keeping.train_op]
    while stack:
      op = stack.pop()
      if op in seen:
        continue
      seen.add(op)
      self.assertFalse(handles & {t.name for t in op.inputs}, op.name)
      stack.extend(t.op for t in op.inputs)
      stack.extend(op.control_inputs)

  @parameterized.named_parameters(
      ("fixed", lambda: managers.FixedLossScaleManager(128)),
      ("tf2_fixed", lambda: managers.FixedLossScale(128)),
      ("plain_no_loss_scale", managers.NoLossScale))
  def test_a_stateless_manager_keeps_nothing(self, make):
    run = _Run(self, mp_optimizer.LossScaleOptimizer,
               lambda: managers.NoLossScale(keep_state_of=make()))
    self.assertEqual(run.kept(), [])
    self.assertEqual(_names(run.graph.get_collection(
        v1.GraphKeys.GLOBAL_VARIABLES)),
                     ["global_step", "w", "w/Momentum"])

  def test_a_no_loss_scale_given_keeps_what_it_keeps(self):
    run = _Run(self, mp_optimizer.LossScaleOptimizer,
               lambda: managers.NoLossScale(keep_state_of=managers.NoLossScale(
                   keep_state_of=Exp(8, 2))))
    self.assertEqual(_names(run.kept()),
                     ["bad_steps", "good_steps", "loss_scale"])

  @parameterized.named_parameters(
      ("plain", {}, "NoLossScale()", {}),
      ("kept", {"keep_state_of": Exp(8, 2)},
       "NoLossScale(keep_state_of=ExponentialUpdateLossScaleManager("
       "init_loss_scale=8.0, incr_every_n_steps=2, decr_every_n_nan_or_inf=2,"
       " incr_ratio=2.0, decr_ratio=0.8))", None),
      ("kept_tf2", {"keep_state_of": managers.DynamicLossScale()},
       "NoLossScale(keep_state_of=DynamicLossScale(initial_loss_scale=32768.0,"
       " increment_period=2000, multiplier=2.0))", None))
  def test_repr_and_config(self, kwargs, expected_repr, expected_config):
    manager = managers.NoLossScale(**kwargs)
    self.assertEqual(repr(manager), expected_repr)
    self.assertEqual(manager.get_config(),
                     kwargs if expected_config is None else expected_config)
    self.assertIs(manager.keep_state_of, kwargs.get("keep_state_of"))
    self.assertEqual(manager.loss_scale_value, 1.0)
    self.assertEqual(repr(managers.NoLossScale(**manager.get_config())),
                     expected_repr)

  @parameterized.named_parameters(
      ("string", "dynamic", "'dynamic' (type str)", "DynamicLossScale()"),
      ("number", 128, "128 (type int)", None),
      ("class", Exp, "(type ABCMeta)", "Call it"),
      ("optimizer", v1.train.GradientDescentOptimizer(0.1),
       "(type GradientDescentOptimizer)", None),
      ("tf_loss_scale", v1.mixed_precision.FixedLossScale(128),
       "(type FixedLossScale)", "managers.get"))
  def test_a_non_manager_is_refused(self, value, received, hint):
    with tf.Graph().as_default() as graph:
      with self.assertRaises(TypeError) as raised:
        managers.NoLossScale(keep_state_of=value)
      self.assertEmpty(graph.get_operations())
    message = str(raised.exception)
    self.assertIn("`keep_state_of`", message)
    self.assertIn(received, message)
    if hint is not None:
      self.assertIn(hint, message)

  def test_positional_argument_is_refused(self):
    with self.assertRaises(TypeError):
      managers.NoLossScale(Exp(8, 2))  # pylint: disable=too-many-function-args

  def test_object_checkpoint_carries_the_state(self):
    """float16 -> kept -> float16 through `tf.train.Checkpoint`."""
    folder = self.create_tempdir().full_path

    def build(manager):
      run = _Run(self, mp_optimizer.LossScaleOptimizer, manager)
      with run.graph.as_default():
        checkpoint = v1.train.Checkpoint(optimizer=run.opt, w=run.w)
      return run, checkpoint

    first, checkpoint = build(lambda: Exp(2**15, 100))
    first.run([np.inf, np.inf, 1.0])  # 2**15 * 0.8, one good step.
    with first.graph.as_default():
      path = checkpoint.save(folder + "/fp16", session=first.session)
    middle, checkpoint = build(
        lambda: managers.NoLossScale(keep_state_of=Exp(2**15, 100)))
    with middle.graph.as_default():
      checkpoint.restore(path).assert_consumed().run_restore_ops(
          middle.session)
    middle.run([1.0, np.inf])
    with middle.graph.as_default():
      path = checkpoint.save(folder + "/bf16", session=middle.session)
    last, checkpoint = build(lambda: Exp(2**15, 100))
    with last.graph.as_default():
      checkpoint.restore(path).assert_consumed().run_restore_ops(last.session)
    scale, good, bad = last.session.run(last.kept())
    self.assertEqual(scale, np.float32(2**15 * 0.8))
    self.assertEqual((good, bad), (1, 0))
    np.testing.assert_array_equal(last.session.run(last.w),
                                  middle.session.run(middle.w))


  def test_our_saver_restores_a_float32_checkpoint_and_resets_the_kept_state(
      self):
    float32 = _Run(self, mp_optimizer.LossScaleOptimizer, managers.NoLossScale)
    float32.run([1.0, 1.0])
    with float32.graph.as_default():
      path = v1.train.Saver().save(
          float32.session, self.create_tempdir().full_path + "/fp32")
    kept = _Run(self, mp_optimizer.LossScaleOptimizer,
                lambda: managers.NoLossScale(keep_state_of=Exp(2**15, 100)))
    with kept.graph.as_default():
      kept.session.run([v.assign(v + 1) for v in kept.kept()])
      with self.assertLogs(level="WARNING") as logs:
        mp_optimizer.Saver().restore(kept.session, path)
    self.assertIn("holds no loss-scale state (no bad_steps, good_steps, "
                  "loss_scale)", "\n".join(logs.output))
    self.assertEqual(kept.session.run(kept.kept()), [2**15, 0, 0])
    np.testing.assert_array_equal(kept.session.run(kept.w),
                                  float32.session.run(float32.w))


if __name__ == "__main__":
  tf.test.main()
