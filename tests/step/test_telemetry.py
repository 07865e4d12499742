"""Precision telemetry (`precision_telemetry=True`): values, reasons, cost.

The gradients here are known exactly: with loss = sum_i sum(w_i * C_i) the
gradient of w_i is C_i, so headroom, zero shares and the norm are worked by
hand from the C_i. Reasons are checked on applied, overflowing, at-the-floor
and accumulation steps; the cost is counted in ops (reductions added do not
grow with the number of variables, nothing is read to the host, and with
the flag off nothing is built); the signals reach summaries and the hook;
and under MirroredStrategy the norm is that of the replicas' sum.
"""

import math

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mp_optimizer
from mp_optimizer import managers
from tests.support import control_flow
from tests.support import mirrored
from tests.workers import replicated

v1 = tf.compat.v1
SCALE = 2.0**10
ZERO_LIMIT = 2.0**-25 / SCALE  # |g| at or below this is 0 in float16 at S.
NAN = float("nan")


def _constants(layers: int, shape=(8, 8)):
  """C_i: layer i has i entries 0, one entry just below the float16 zero
  limit at S (also 0 in float16), one just above it, and the rest 2**-i."""
  out = []
  for i in range(layers):
    c = np.full(shape, 2.0**-i, np.float32).reshape(-1)
    c[:i] = 0.0
    c[i] = ZERO_LIMIT / 2
    c[i + 1] = ZERO_LIMIT * 2
    out.append(c.reshape(shape))
  return out


def _build(constants, manager=None, poison=None, **options):
  """Variables layer_i/kernel, loss sum(w_i * C_i) (* poison); returns parts."""
  weights = []
  for i, _ in enumerate(constants):
    with v1.variable_scope(f"layer_{i}"):
      weights.append(v1.get_variable("kernel", constants[0].shape,
                                     initializer=v1.ones_initializer()))
  loss = tf.add_n([tf.reduce_sum(w * c) for w, c in zip(weights, constants)])
  if poison is not None:
    loss = loss * poison
  opt = mp_optimizer.LossScaleOptimizer(
      v1.train.GradientDescentOptimizer(0.0),
      manager or managers.ExponentialUpdateLossScaleManager(SCALE, 1000),
      precision_telemetry=True, **options)
  return opt, opt.minimize(loss)


def _expected(constants, scale=SCALE):
  flat = np.concatenate([c.reshape(-1) for c in constants]).astype(np.float64)
  amax = np.abs(flat).max()
  limit = 2.0**-25 / scale
  return dict(
      headroom_bits=math.log2(65504.0 / (scale * amax)),
      global_norm=math.sqrt((flat**2).sum()),
      zero_share=[np.mean(np.abs(c) <= limit) for c in constants],
      groups=[f"layer_{i}" for i in range(len(constants))])


def _fetch(precision):
  return {k: v for k, v in precision.items() if k != "groups"}


class ValuesTest(parameterized.TestCase):

  @parameterized.named_parameters(("one_variable", 1), ("stacked", 6))
  def test_applied_step_matches_the_hand_worked_values(self, layers):
    constants = _constants(layers)
    with tf.Graph().as_default(), v1.Session() as sess:
      _, train_op = _build(constants)
      precision = mp_optimizer.signals.precision()
      sess.run(v1.global_variables_initializer())
      sess.run(train_op)
      got = sess.run(_fetch(precision))
    want = _expected(constants)
    self.assertEqual(precision["groups"], want["groups"])
    self.assertAlmostEqual(got["headroom_bits"], want["headroom_bits"],
                           places=5)
    self.assertAlmostEqual(got["global_norm"], want["global_norm"], places=5)
    np.testing.assert_allclose(got["zero_share"], want["zero_share"],
                               rtol=1e-6)
    self.assertEqual(got["skip_reason"], 0)
    self.assertEqual(list(got["reason_counts"]), [1, 0, 0, 0, 0])

  def test_before_any_step_values_are_nan_and_reason_minus_one(self):
    with tf.Graph().as_default(), v1.Session() as sess:
      _build(_constants(2))
      got = sess.run(_fetch(mp_optimizer.signals.precision()))
    self.assertTrue(np.isnan(got["headroom_bits"]))
    self.assertTrue(np.isnan(got["global_norm"]))
    self.assertTrue(np.isnan(got["zero_share"]).all())
    self.assertEqual(got["skip_reason"], -1)
    self.assertEqual(list(got["reason_counts"]), [0, 0, 0, 0, 0])

  @parameterized.named_parameters(
      ("above_the_floor", lambda: managers.ExponentialUpdateLossScaleManager(
          SCALE, 1000), 1),
      ("at_the_floor", lambda: managers.ExponentialUpdateLossScaleManager(
          1, 1000), 2),
      ("at_a_raised_floor", lambda: managers.ExponentialUpdateLossScaleManager(
          8, 1000, min_loss_scale=8), 2),
      ("fixed", lambda: managers.FixedLossScaleManager(SCALE), 1),
      ("no_loss_scale", managers.NoLossScale, 4))
  def test_skipped_step_has_nan_norm_and_its_reason(self, manager, reason):
    with tf.Graph().as_default(), v1.Session() as sess:
      poison = v1.placeholder_with_default(1.0, [])
      _, train_op = _build(_constants(3), manager(), poison)
      precision = mp_optimizer.signals.precision()
      sess.run(v1.global_variables_initializer())
      sess.run(train_op, {poison: float("inf")})
      got = sess.run(_fetch(precision))
      self.assertEqual(sess.run(mp_optimizer.skipped_steps()), 1)
    self.assertTrue(np.isnan(got["global_norm"]), got)
    # Inf times the zero entries of C made NaN: the headroom is NaN too.
    self.assertTrue(np.isnan(got["headroom_bits"]), got)
    self.assertEqual(got["skip_reason"], reason)
    self.assertEqual(mp_optimizer.signals.SKIP_REASONS[reason],
                     ("applied", "overflow", "overflow at the floor", None,
                      "non-finite, unscaled")[reason])
    counts = [0, 0, 0, 0, 0]
    counts[reason] = 1
    self.assertEqual(list(got["reason_counts"]), counts)

  @parameterized.named_parameters(("all_zero", 0.0, 1.0, np.inf),
                                  ("an_inf", 1.0, np.inf, -np.inf))
  def test_headroom_at_its_ends(self, entry, poison_value, headroom):
    # Zero gradients leave every doubling free: +Inf. An Inf entry with no
    # NaN (C has no zero to make Inf * 0) has none: -Inf.
    with tf.Graph().as_default(), v1.Session() as sess:
      poison = v1.placeholder_with_default(1.0, [])
      constants = [np.full((2, 2), entry, np.float32)]
      _, train_op = _build(constants, poison=poison)
      precision = mp_optimizer.signals.precision()
      sess.run(v1.global_variables_initializer())
      sess.run(train_op, {poison: poison_value})
      self.assertEqual(sess.run(precision["headroom_bits"]), headroom)

  def test_accumulation_micro_steps_have_their_own_reason(self):
    with tf.Graph().as_default(), v1.Session() as sess:
      poison = v1.placeholder_with_default(1.0, [])
      _, train_op = _build(_constants(2), poison=poison,
                           gradient_accumulation_steps=2)
      precision = mp_optimizer.signals.precision()
      sess.run(v1.global_variables_initializer())
      reasons = []
      for value in (1.0, 1.0, 1.0, float("nan"), 1.0):
        sess.run(train_op, {poison: value})
        reasons.append(int(sess.run(precision["skip_reason"])))
      counts = list(sess.run(precision["reason_counts"]))
    # micro-step, window applied, micro-step, overflow, window applied.
    self.assertEqual(reasons, [3, 0, 3, 1, 0])
    self.assertEqual(counts, [2, 1, 0, 2, 0])

  @parameterized.named_parameters(("a_string", "yes"), ("an_int", 1),
                                  ("none", None))
  def test_flag_must_be_a_bool(self, value):
    with self.assertRaisesRegex(TypeError, "precision_telemetry.*True or False"):
      mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.1),
          managers.FixedLossScaleManager(8), precision_telemetry=value)

  def test_without_the_flag_precision_is_refused_by_name(self):
    with tf.Graph().as_default():
      w = v1.get_variable("w", initializer=1.0)
      mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.1),
          managers.FixedLossScaleManager(8)).minimize(w * w)
      with self.assertRaisesRegex(ValueError, "precision_telemetry=True"):
        mp_optimizer.signals.precision()


def _op_types(graph):
  types = {}
  for op in graph.get_operations():
    types[op.type] = types.get(op.type, 0) + 1
  return types


class CostTest(parameterized.TestCase):

  def _graph(self, layers, telemetry):
    graph = tf.Graph()
    with graph.as_default():
      constants = _constants(layers)
      if telemetry:
        _build(constants)
      else:
        weights = [v1.get_variable(f"layer_{i}/kernel", c.shape)
                   for i, c in enumerate(constants)]
        loss = tf.add_n([tf.reduce_sum(w * c)
                         for w, c in zip(weights, constants)])
        mp_optimizer.LossScaleOptimizer(
            v1.train.GradientDescentOptimizer(0.0),
            managers.ExponentialUpdateLossScaleManager(SCALE, 1000)
        ).minimize(loss)
    return graph

  def test_reductions_added_do_not_grow_with_the_number_of_variables(self):
    reductions = ("Max", "Sum", "UnsortedSegmentSum")
    added = []
    for layers in (16, 40):  # From 16 on, eight stacks.
      on = _op_types(self._graph(layers, True))
      off = _op_types(self._graph(layers, False))
      added.append({t: on.get(t, 0) - off.get(t, 0) for t in reductions})
    self.assertEqual(added[0], added[1])
    # Over the gradients' data: one max and one sum over each of the eight
    # stacks of same-shape gradients; the other max and sum reduce
    # per-variable scalars, and the segment sums per-group counts.
    self.assertEqual(added[0], {"Max": 9, "Sum": 9, "UnsortedSegmentSum": 2})

  def test_nothing_is_read_to_the_host(self):
    types = _op_types(self._graph(5, True))
    for host_op in ("PyFunc", "EagerPyFunc", "PyFuncStateless", "Print",
                    "PrintV2"):
      self.assertNotIn(host_op, types)

  @parameterized.named_parameters(("telemetry_on", True),
                                  ("telemetry_off", False))
  def test_exporting_the_graph_warns_of_nothing(self, telemetry):
    # A Saver, an Estimator or a FileWriter given the graph exports it; a
    # graph collection of Python objects would make that warn every time.
    graph = self._graph(5, telemetry)
    with graph.as_default(), self.assertNoLogs("tensorflow", "WARNING"):
      v1.train.export_meta_graph(graph=graph)
    if telemetry:
      self.assertLen(mp_optimizer.signals.precision(graph)["groups"], 5)

  def test_off_builds_no_telemetry(self):
    graph = self._graph(5, False)
    self.assertEmpty([op.name for op in graph.get_operations()
                      if "precision_telemetry" in op.name
                      or "headroom" in op.name])


class ReadersTest(parameterized.TestCase):

  def test_summaries_carry_the_telemetry_tags(self):
    with tf.Graph().as_default(), v1.Session() as sess:
      _, train_op = _build(_constants(2))
      summary = mp_optimizer.add_summaries()
      sess.run(v1.global_variables_initializer())
      _, serialized = sess.run([train_op, summary])
    values = {v.tag: v.simple_value
              for v in v1.Summary.FromString(serialized).value}
    want = _expected(_constants(2))
    self.assertAlmostEqual(values["mp_optimizer/headroom_bits"],
                           want["headroom_bits"], places=5)
    self.assertAlmostEqual(values["mp_optimizer/global_norm"],
                           want["global_norm"], places=5)
    self.assertAlmostEqual(values["mp_optimizer/zero_share/layer_1"],
                           want["zero_share"][1], places=6)

  def test_hook_line_and_latest_precision(self):
    logged = []
    with tf.Graph().as_default():
      poison = v1.placeholder_with_default(1.0, [])
      _, train_op = _build(_constants(2), poison=poison)
      hook = mp_optimizer.LossScaleHook(every_n_steps=3)
      original = v1.logging.info
      v1.logging.info = lambda fmt, *args: logged.append(fmt % args)
      self.addCleanup(setattr, v1.logging, "info", original)
      with v1.train.MonitoredTrainingSession(hooks=[hook]) as sess:
        for value in (1.0, float("inf"), 1.0):
          sess.run(train_op, {poison: value})
    line = [l for l in logged if "headroom" in l][-1]
    want = _expected(_constants(2))
    self.assertIn(f"float16 headroom {want['headroom_bits']:.1f} bits", line)
    self.assertIn("skipped for overflow 1, at the floor 0", line)
    self.assertIn("most: 'layer_1'", line)
    latest = hook.latest_precision["GradientDescent"]
    self.assertEqual(list(latest["reason_counts"]), [2, 1, 0, 0, 0])
    self.assertAlmostEqual(latest["global_norm"], want["global_norm"],
                           places=5)

  def test_step_inside_a_cond_is_read_from_the_stored_values(self):
    with tf.Graph().as_default(), v1.Session() as sess:
      constants = _constants(2)
      weights = [v1.get_variable(f"layer_{i}/kernel", c.shape,
                                 initializer=v1.ones_initializer())
                 for i, c in enumerate(constants)]
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.0),
          managers.ExponentialUpdateLossScaleManager(SCALE, 1000),
          precision_telemetry=True)
      run_it = v1.placeholder_with_default(True, [])
      train_op = tf.cond(run_it, lambda: opt.minimize(tf.add_n(
          [tf.reduce_sum(w * c) for w, c in zip(weights, constants)])),
                         tf.no_op)
      summary = mp_optimizer.add_summaries()
      sess.run(v1.global_variables_initializer())
      sess.run(train_op)
      got = sess.run(_fetch(mp_optimizer.signals.precision()))
      sess.run(summary)  # Fetchable: built from the stored values.
    self.assertAlmostEqual(got["global_norm"],
                           _expected(constants)["global_norm"], places=5)


class EdgeCasesTest(parameterized.TestCase):

  @parameterized.named_parameters(("v1", "v1"), ("v2", "v2"))
  def test_accumulating_step_inside_a_cond_survives_an_overflow(self, mode):
    # The window's count is read after the step; inside a v1 cond a plain
    # read reused a capture that is dead on a skipped step, and the train op
    # failed ("Retval[0] does not have value").
    with control_flow.control_flow(mode), tf.Graph().as_default(), \
        v1.Session() as sess:
      poison = v1.placeholder_with_default(1.0, [])
      w = v1.get_variable("d/w", [2, 2], initializer=v1.ones_initializer())
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.1),
          managers.ExponentialUpdateLossScaleManager(SCALE, 1000),
          gradient_accumulation_steps=2, precision_telemetry=True)
      train_op = tf.cond(v1.placeholder_with_default(True, []),
                         lambda: opt.minimize(tf.reduce_sum(w * 0.5) * poison),
                         tf.no_op)
      precision = mp_optimizer.signals.precision()
      sess.run(v1.global_variables_initializer())
      reasons = []
      for value in (1.0, float("nan"), 1.0):
        sess.run(train_op, {poison: value})
        reasons.append(int(sess.run(precision["skip_reason"])))
      counts = list(sess.run(precision["reason_counts"]))
    self.assertEqual(reasons, [3, 1, 0])
    self.assertEqual(counts, [1, 1, 0, 1, 0])

  def test_a_gradient_paired_twice_is_measured_as_paired(self):
    # Two outputs of one unstack, one of them twice, the third unused: the
    # unused one must not be measured, nor rows matched to other variables.
    with tf.Graph().as_default(), v1.Session() as sess:
      values = tf.unstack(tf.constant(
          [[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]))
      variables = [v1.get_variable(f"v{i}", [2]) for i in range(3)]
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.0),
          managers.FixedLossScaleManager(SCALE), precision_telemetry=True)
      with mp_optimizer.allow_unscaled_gradients():
        train_op = opt.apply_gradients(
            [(values[0], variables[0]), (values[1], variables[1]),
             (values[0], variables[2])])
      precision = mp_optimizer.signals.precision()
      sess.run(v1.global_variables_initializer())
      sess.run(train_op)
      got = sess.run(_fetch(precision))
    self.assertAlmostEqual(got["global_norm"],
                           math.sqrt(1 + 4 + 9 + 16 + 1 + 4), places=5)
    self.assertAlmostEqual(got["headroom_bits"],
                           math.log2(65504.0 / (SCALE * 4.0)), places=5)

  def test_precision_without_optimizer_reads_the_newest_train_op(self):
    with tf.Graph().as_default():
      made = {}
      for name, scope in (("A", "first"), ("B", "second"), ("A", "third")):
        w = v1.get_variable(f"{scope}/w", initializer=1.0)
        if name not in made:
          made[name] = mp_optimizer.LossScaleOptimizer(
              v1.train.GradientDescentOptimizer(0.1, name=name),
              managers.FixedLossScaleManager(8), precision_telemetry=True)
        made[name].minimize(w * w)
      self.assertEqual(mp_optimizer.signals.precision()["groups"], ["third"])


class MirroredTest(parameterized.TestCase):

  def test_norm_of_the_replicas_sum_and_amax_over_replicas(self):
    run = mirrored.MirroredRun(self, lambda: mp_optimizer.LossScaleOptimizer(
        v1.train.GradientDescentOptimizer(0.0),
        managers.ExponentialUpdateLossScaleManager(SCALE, 1000),
        precision_telemetry=True))
    with run.graph.as_default():
      precision = mp_optimizer.signals.precision()
    run.step(mirrored.NO_REPLICA, 1.0)
    got = run.session.run(_fetch(precision))
    # The same gradients from TF alone, per replica, at the same weights.
    with tf.Graph().as_default(), v1.Session() as sess:
      w = v1.get_variable("w", initializer=replicated.INITIAL_W)
      per_replica = [tf.gradients(replicated.loss(w, *replicated.replica_data(
          r)), w)[0] for r in range(len(mirrored.DEVICES))]
      sess.run(v1.global_variables_initializer())
      grads = sess.run(per_replica)
    amax = max(np.abs(g).max() for g in grads)
    self.assertAlmostEqual(got["global_norm"],
                           float(np.linalg.norm(sum(grads))), places=4)
    self.assertAlmostEqual(got["headroom_bits"],
                           math.log2(65504.0 / (SCALE * amax)), places=3)
    self.assertEqual(got["zero_share"].tolist(), [0.0])


if __name__ == "__main__":
  tf.test.main()
