"""Gradients that never saw the loss scale are refused when the graph is built.

Each row builds gradients one way in a fresh graph, with v1 and with v2
control flow, and hands them to `apply_gradients`: the refused ones must
raise the ValueError that names the fix; the accepted ones must build and
run a step.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import control_flow
from tests.support import mirrored
from tests.support import models
from tests.workers import replicated

v1 = tf.compat.v1
UNSCALED = r"never multiplied by the loss scale.*compute_gradients.*" \
           r"get_scaled_loss.*get_unscaled_gradients.*allow_unscaled_gradients"


def _plain(opt, loss, variables):
  return list(zip(tf.gradients(loss, variables), variables))


def _named_plain(opt, loss, variables):
  return list(zip(tf.gradients(loss, variables, name="custom"), variables))


def _inner(opt, loss, variables):
  return opt.inner_optimizer.compute_gradients(loss, variables)


def _bert_clipped(opt, loss, variables):
  # google-research BERT's optimization.py: tf.gradients, then global clip.
  grads, _ = tf.clip_by_global_norm(tf.gradients(loss, variables), 1.0)
  return list(zip(grads, variables))


def _through_cond(make):
  def build(opt, loss, variables):
    pairs = make(opt, loss, variables)
    pred = v1.placeholder_with_default(True, [])
    grads = tf.cond(pred, lambda: [g for g, _ in pairs],
                    lambda: [tf.zeros_like(g) for g, _ in pairs])
    return list(zip(grads, variables))
  return build


def _through_while(make):
  def build(opt, loss, variables):
    pairs = make(opt, loss, variables)
    halved = tf.while_loop(
        lambda i, *_: i < 2,
        lambda i, *grads: [i + 1] + [g * 0.5 for g in grads],
        [tf.constant(0)] + [g for g, _ in pairs])[1:]
    return list(zip(halved, variables))
  return build


def _ours(opt, loss, variables):
  return opt.compute_gradients(loss, variables)


def _ours_clipped_and_summed(opt, loss, variables):
  grads = [g for g, _ in opt.compute_gradients(loss, variables)]
  clipped, _ = tf.clip_by_global_norm(grads, 1.0)
  return [(c + 0.1 * g, v) for c, g, v in zip(clipped, grads, variables)]


def _keras_style(opt, loss, variables):
  grads = tf.gradients(opt.get_scaled_loss(loss), variables)
  return list(zip(opt.get_unscaled_gradients(grads), variables))


def _accumulator_read(opt, loss, variables):
  # Hand-written accumulation: the gradient is read back from a variable, so
  # its ancestry is a variable read, which proves nothing.
  pairs = opt.compute_gradients(loss, variables)
  sums = [v1.get_variable(f"sum{i}", v.shape, initializer=v1.zeros_initializer(),
                          trainable=False) for i, v in enumerate(variables)]
  with tf.control_dependencies([s.assign_add(g) for s, (g, _) in
                                zip(sums, pairs)]):
    return [(s.read_value(), v) for s, v in zip(sums, variables)]


def _setup(manager=None, sparse=False):
  poison = models.poison_input()
  loss = (models.embedding_loss(poison) if sparse else
          models.dense_loss(poison))
  opt = mp_optimizer.LossScaleOptimizer(
      models.OPTIMIZERS["momentum"](),
      manager or managers.ExponentialUpdateLossScaleManager(2**10, 3))
  return opt, loss, v1.trainable_variables()


def _assigned(make):
  # The legacy fixture's accumulation: the gradient is `sum.assign(g)`. With
  # ref variables (TF1) the Assign op carries g; a resource variable's
  # assign returns a read, which proves nothing.
  def build(opt, loss, variables):
    pairs = make(opt, loss, variables)
    sums = [v1.get_variable(f"sum{i}", v.shape, trainable=False,
                            initializer=v1.zeros_initializer())
            for i, v in enumerate(variables)]
    return [(tf.identity(s.assign(g)), v) for s, (g, v) in zip(sums, pairs)]
  return build


BOTH, DENSE = ("dense", "sparse"), ("dense",)
REFUSED = [("tf_gradients", _plain, BOTH),
           ("named_tf_gradients", _named_plain, DENSE),
           ("inner_compute_gradients", _inner, BOTH),
           ("bert_clipped_tf_gradients", _bert_clipped, BOTH),
           ("tf_gradients_through_cond", _through_cond(_plain), DENSE),
           ("tf_gradients_through_while_loop", _through_while(_plain), DENSE)]
ACCEPTED = [("compute_gradients", _ours, BOTH),
            ("clipped_and_summed", _ours_clipped_and_summed, DENSE),
            ("get_unscaled_gradients", _keras_style, BOTH),
            ("read_from_an_accumulator", _accumulator_read, DENSE),
            ("compute_gradients_through_cond", _through_cond(_ours), DENSE),
            ("compute_gradients_through_while_loop", _through_while(_ours),
             DENSE)]


def _rows(cases):
  return [dict(testcase_name=f"{name}_{kind}_v{version}", make=make,
               version=version, sparse=kind == "sparse")
          for name, make, kinds in cases for kind in kinds
          for version in (1, 2)]


class UnscaledGradientsTest(parameterized.TestCase):

  @parameterized.named_parameters(*_rows(REFUSED))
  def test_refused(self, make, version, sparse):
    with control_flow.control_flow(f"v{version}"), tf.Graph().as_default():
      opt, loss, variables = _setup(sparse=sparse)
      opt.compute_gradients(loss)  # A scaled loss exists in the graph too.
      pairs = make(opt, loss, variables)
      with self.assertRaisesRegex(ValueError, f"(dense/w|table).*{UNSCALED}"):
        opt.apply_gradients(pairs)

  @parameterized.named_parameters(*_rows(REFUSED))
  def test_refused_with_no_scaled_loss_anywhere(self, make, version, sparse):
    with control_flow.control_flow(f"v{version}"), tf.Graph().as_default():
      opt, loss, variables = _setup(sparse=sparse)
      with self.assertRaisesRegex(ValueError, UNSCALED):
        opt.apply_gradients(make(opt, loss, variables))

  @parameterized.named_parameters(*_rows(REFUSED))
  def test_allowed_explicitly(self, make, version, sparse):
    with control_flow.control_flow(f"v{version}"), tf.Graph().as_default() as graph:
      opt, loss, variables = _setup(sparse=sparse)
      pairs = make(opt, loss, variables)
      with mp_optimizer.allow_unscaled_gradients():
        train_op = opt.apply_gradients(pairs)
      with self.assertRaisesRegex(ValueError, UNSCALED):
        opt.apply_gradients(pairs)  # The block is closed again.
      self._run(graph, train_op)

  @parameterized.named_parameters(*_rows(ACCEPTED))
  def test_accepted(self, make, version, sparse):
    with control_flow.control_flow(f"v{version}"), tf.Graph().as_default() as graph:
      opt, loss, variables = _setup(sparse=sparse)
      train_op = opt.apply_gradients(make(opt, loss, variables))
      self._run(graph, train_op)

  def _run(self, graph, train_op, steps=1):
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      before = sess.run(v1.trainable_variables())
      for _ in range(steps):
        sess.run(train_op)
      after = sess.run(v1.trainable_variables())
    self.assertFalse(all(np.array_equal(b, a) for b, a in zip(before, after)))

  @parameterized.named_parameters(("v1", 1), ("v2", 2))
  def test_scaled_gradients_stay_refused_inside_the_block(self, version):
    with control_flow.control_flow(f"v{version}"), tf.Graph().as_default():
      opt, loss, variables = _setup()
      grads = tf.gradients(opt.get_scaled_loss(loss), variables)
      with mp_optimizer.allow_unscaled_gradients():
        with self.assertRaisesRegex(ValueError, "never divided by the loss"):
          opt.apply_gradients(zip(grads, variables))

  @parameterized.named_parameters(
      ("fixed", lambda: managers.FixedLossScaleManager(128)),
      ("fixed_applying_every_step", lambda: managers.FixedLossScaleManager(
          128, skip_nonfinite_steps=False)),
      ("tf2_dynamic", lambda: managers.DynamicLossScale()))
  def test_other_managers(self, make_manager):
    with tf.Graph().as_default():
      opt, loss, variables = _setup(make_manager())
      self.assertIsInstance(opt.apply_gradients(_ours(opt, loss, variables)),
                            tf.Operation)
      with self.assertRaisesRegex(ValueError, UNSCALED):
        opt.apply_gradients(_plain(opt, loss, variables))

  @parameterized.named_parameters(
      ("resource_variables", False, _ours),
      ("ref_variables", True, _ours),
      ("resource_variables_plain", False, _plain))  # Nothing proven.
  def test_assigned_to_an_accumulator_accepted(self, legacy, make):
    with models.legacy_graph_behavior(legacy), tf.Graph().as_default() as g:
      opt, loss, variables = _setup()
      train_op = opt.apply_gradients(_assigned(make)(opt, loss, variables))
      self._run(g, train_op)

  @parameterized.named_parameters(("ref_variables_plain", True, _plain))
  def test_assigned_to_an_accumulator_refused(self, legacy, make):
    with models.legacy_graph_behavior(legacy), tf.Graph().as_default():
      opt, loss, variables = _setup()
      pairs = _assigned(make)(opt, loss, variables)
      with self.assertRaisesRegex(ValueError, UNSCALED):
        opt.apply_gradients(pairs)

  @parameterized.named_parameters(("v1", 1), ("v2", 2))
  def test_library_accumulation_inside_a_cond_branch(self, version):
    # Legacy accumulation calls apply_gradients inside a tf.cond branch.
    with control_flow.control_flow(f"v{version}"), tf.Graph().as_default() as graph:
      loss = models.dense_loss(models.poison_input())
      opt = mp_optimizer.LossScaleOptimizer(
          models.OPTIMIZERS["sgd"](), managers.FixedLossScaleManager(128),
          gradient_accumulation_steps=2)
      pairs = opt.compute_gradients(loss)
      pred = v1.placeholder_with_default(True, [])

      def apply():
        with tf.control_dependencies([opt.apply_gradients(pairs)]):
          return tf.constant(1)

      train_op = tf.cond(pred, apply, lambda: tf.constant(0))
      self._run(graph, train_op, steps=2)

  def test_plain_gradients_applied_inside_a_v1_cond_branch(self):
    # v1 control flow keeps the branch in the outer graph, so the walk
    # follows its Switch back to tf.gradients. (A v2 branch is a function
    # graph; the walk stops at its inputs: see mp_optimizer.misuse.)
    with control_flow.control_flow("v1"), tf.Graph().as_default():
      opt, loss, variables = _setup()
      pairs = _plain(opt, loss, variables)
      with self.assertRaisesRegex(ValueError, UNSCALED):
        tf.cond(v1.placeholder_with_default(True, []),
                lambda: opt.apply_gradients(pairs), tf.no_op)


def _mirrored_step(make, allow):
  """Builds one MirroredStrategy step from `make(opt, loss, [w])` pairs."""
  graph = tf.Graph()
  with graph.as_default():
    strategy = tf.distribute.MirroredStrategy(mirrored.DEVICES)
    xs, ys = replicated.all_replica_data()
    with strategy.scope():
      w = v1.get_variable("w", initializer=replicated.INITIAL_W)
      opt = mp_optimizer.LossScaleOptimizer(
          v1.train.GradientDescentOptimizer(0.1),
          managers.FixedLossScaleManager(128))

      def step():
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        loss = replicated.loss(w, tf.gather(xs, replica), tf.gather(ys, replica))
        return opt.apply_gradients(make(opt, loss, [w]))

      if allow:
        with mp_optimizer.allow_unscaled_gradients():
          train_op = strategy.group(strategy.run(step))
      else:
        train_op = strategy.group(strategy.run(step))
  return graph, train_op, w


class MirroredUnscaledGradientsTest(parameterized.TestCase):

  def test_plain_gradients_in_replicas_are_refused(self):
    with self.assertRaisesRegex(ValueError, f"w:0.*{UNSCALED}"):
      _mirrored_step(_plain, allow=False)

  @parameterized.named_parameters(
      ("compute_gradients", _ours, False), ("allowed_plain", _plain, True))
  def test_accepted_in_replicas(self, make, allow):
    graph, train_op, w = _mirrored_step(make, allow)
    with v1.Session(graph=graph, config=mirrored.SESSION_CONFIG) as sess:
      sess.run(v1.global_variables_initializer())
      sess.run(train_op)
      self.assertFalse(np.array_equal(sess.run(w), replicated.INITIAL_W))


if __name__ == "__main__":
  tf.test.main()
