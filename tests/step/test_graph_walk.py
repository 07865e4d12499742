"""The one walk back over a graph (`_internal.graph_walk`) that every walk of
the library uses: each node once, depth first in a stated order, a stop
that keeps the walk from going past a node, no recursion.

The expected orders are worked by hand from the rule in the module's
docstring: the first start on top of the stack, a node's last input
visited first.
"""

import sys

from absl.testing import parameterized
import tensorflow as tf

from mp_optimizer._internal import graph_walk
from tests.support import control_flow

v1 = tf.compat.v1


def _diamond():
  """d = b + c, b = a * 2, c = a * 3: (graph, {name: op})."""
  graph = tf.Graph()
  with graph.as_default():
    a = tf.constant(1.0, name="a")
    b = tf.multiply(a, 2.0, name="b")
    c = tf.multiply(a, 3.0, name="c")
    tf.add(b, c, name="d")
  return graph, {name: graph.get_operation_by_name(name)
                 for name in "abcd"}


def _names(ops):
  """The walk's ops named by the test (the constants 2 and 3 left out)."""
  return [op.name for op in ops if op.name in ("a", "b", "c", "d")]


class GraphWalkTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("pre_order", False, ["d", "c", "a", "b"]),
      ("post_order", True, ["a", "c", "b", "d"]))
  def test_each_op_once_in_the_stated_order(self, post_order, expected):
    _, ops = _diamond()
    walked = list(graph_walk.walk_back([ops["d"]], graph_walk.op_inputs,
                                       post_order=post_order))
    self.assertEqual(_names(walked), expected)
    self.assertLen({id(op) for op in walked}, len(walked))
    self.assertLen(walked, 6)  # a, b, c, d and the constants 2 and 3.

  @parameterized.named_parameters(
      ("at_c_a_still_reached_through_b", ["c"], ["d", "c", "b", "a"]),
      ("at_b_and_c_a_never_reached", ["b", "c"], ["d", "c", "b"]))
  def test_a_stopped_op_is_yielded_and_not_passed(self, stops, expected):
    _, ops = _diamond()
    walked = graph_walk.walk_back([ops["d"]], graph_walk.op_inputs,
                                  stop=lambda op: op.name in stops)
    self.assertEqual(_names(walked), expected)

  def test_each_start_is_walked_to_its_end_before_the_next(self):
    _, ops = _diamond()
    walked = graph_walk.walk_back([ops["b"], ops["c"]], graph_walk.op_inputs)
    self.assertEqual(_names(walked), ["b", "a", "c"])

  @parameterized.named_parameters(
      ("data_edges", graph_walk.op_inputs, False),
      ("data_and_control_edges", graph_walk.op_and_control_inputs, True))
  def test_control_edges_only_when_asked(self, inputs, reaches_waited):
    with tf.Graph().as_default():
      waited = tf.constant(1.0, name="waited")
      with tf.control_dependencies([waited]):
        last = tf.identity(tf.constant(2.0), name="last")
    walked = list(graph_walk.walk_back([last.op], inputs))
    self.assertEqual(waited.op in walked, reaches_waited)

  def test_a_chain_longer_than_the_recursion_limit(self):
    length = sys.getrecursionlimit() + 500
    with tf.Graph().as_default():
      tensor = first = tf.constant(1.0)
      for _ in range(length):
        tensor = tf.identity(tensor)
    walked = list(graph_walk.walk_back([tensor], graph_walk.tensor_inputs))
    self.assertLen(walked, length + 1)
    self.assertIs(walked[-1], first)

  def test_a_while_loop_s_cycle_is_walked_once(self):
    with tf.Graph().as_default() as graph, control_flow.control_flow("v1"):
      result = v1.while_loop(lambda i: i < 5, lambda i: i + 1,
                             [tf.constant(0)])
    walked = list(graph_walk.walk_back([result.op], graph_walk.op_inputs))
    self.assertLen({id(op) for op in walked}, len(walked))
    self.assertIn("NextIteration", {op.type for op in walked})
    # Everything the loop built is behind its result.
    self.assertEqual(set(walked), set(graph.get_operations()) - {
        op for op in graph.get_operations() if op.type == "NoOp"})
