"""mp-optimizer-migrate on long and deep inputs: what is parsed, what is not.

What cannot matter is left out of libcst's parse at any depth
(`chunks.Reduced`), and what is left is parsed only within the limits of
`migrate.limits`; past one, the file is returned as it is with a finding,
and libcst is never called (counted by a spy on `libcst.parse_module`).
Timing belongs to benchmarks/codemod_shapes.py.
"""

import contextlib
import io
import os
from unittest import mock

from absl.testing import parameterized
import libcst

from mp_optimizer import migrate
from mp_optimizer.migrate import chunks
from mp_optimizer.migrate import limits

_TF = "import tensorflow as tf\n\n\n"
_NAME = "tf.contrib.mixed_precision.FixedLossScaleManager"
_WRAP = "  opt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, m)\n"
_FILLER = ("  h{i} = tf.compat.v1.layers.dense(x, {i})\n"
           "  x = tf.nn.relu(h{i}) + x\n")


def _function(statements, before="", after=""):
  return (_TF + "def build(opt, m, x, flag):\n" + before + _WRAP +
          "".join(_FILLER.format(i=i) for i in range(statements)) + after +
          "  return opt\n")


def _plus_chain(terms):
  return _TF + "def f():\n  return " + " + ".join([f"{_NAME}(8)"] * terms) + "\n"


def _elif_chain(branches):
  return (_TF + "def f(flag):\n  if flag == 0:\n    y = 0\n" + "".join(
      f"  elif flag == {i}:\n    y = {_NAME}({i})\n"
      for i in range(1, branches + 1)) + "  return y\n")


def _parentheses(depth):
  return _TF + "y = " + "(" * depth + f"{_NAME}(8)" + ")" * depth + "\n"


def _repeated(times):
  return (_TF + "def f(opt, x):\n" + "  x = g(x)\n" * times +
          "  return tf.contrib.mixed_precision.LossScaleOptimizer(opt, x)\n")


def _convert(source):
  """`migrate.convert(source)` and how many times libcst parsed."""
  with mock.patch.object(libcst, "parse_module",
                         wraps=libcst.parse_module) as parse:
    converted, found = migrate.convert(source)
  return converted, found, parse.call_count


class RefusedTest(parameterized.TestCase):

  def assertRefused(self, source, reason, line=1):
    converted, found, parses = _convert(source)
    self.assertEqual(converted, source)
    self.assertEqual(parses, 0)
    self.assertLen(found, 1)
    self.assertTrue(found[0].needs_human)
    self.assertEqual(found[0].line, line)
    self.assertStartsWith(found[0].reason, reason)
    self.assertIn("leaves this file as it is", found[0].reason)

  def test_more_to_parse_than_the_limit_is_refused_unparsed(self):
    line = f"  s = {_NAME}(8)\n"
    source = _TF + "def f():\n" + line * (limits.MAX_PARSED // len(line) + 1)
    self.assertGreater(len(chunks.Reduced(source).source), limits.MAX_PARSED)
    self.assertRefused(source, "too large to convert safely")

  @parameterized.named_parameters(
      ("plus_chain", _plus_chain(limits.MAX_NESTING), 5),
      # The deepest statement: the last branch's (each `elif` nests).
      ("elif_chain", _elif_chain(limits.MAX_NESTING),
       6 + 2 * limits.MAX_NESTING),
      ("parentheses", _parentheses(limits.MAX_NESTING), 4))
  def test_deeper_than_the_limit_is_refused_unparsed(self, source, line):
    deepest = max(line.nesting for line in chunks.Reduced(source).lines)
    self.assertGreater(deepest, limits.MAX_NESTING)
    self.assertRefused(source, "too deep to convert safely", line)

  @parameterized.named_parameters(
      ("plus_chain", _plus_chain(limits.MAX_NESTING // 2)),
      ("elif_chain", _elif_chain(limits.MAX_NESTING // 2)),
      ("parentheses", _parentheses(limits.MAX_NESTING // 2)))
  def test_within_the_nesting_limit_converts(self, source):
    converted, found, parses = _convert(source)
    self.assertEqual(parses, 1)
    self.assertEqual([f.reason for f in found if f.needs_human], [])
    self.assertNotIn(_NAME, converted)
    self.assertIn("managers.FixedLossScaleManager", converted)

  def test_one_name_assigned_again_and_again_is_refused_unparsed(self):
    times = int(limits.MAX_PAIRS ** 0.5)
    self.assertRefused(_repeated(times), "too repetitive to convert safely")

  def test_the_command_leaves_the_file_and_exits_1(self):
    path = os.path.join(self.create_tempdir().full_path, "deep.py")
    source = _plus_chain(limits.MAX_NESTING)
    with open(path, "w", encoding="utf-8") as f:
      f.write(source)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), (
        contextlib.redirect_stderr(err)):
      status = migrate.main(["--in-place", path])
    self.assertEqual(status, 1)
    with open(path, encoding="utf-8") as f:
      self.assertEqual(f.read(), source)
    self.assertIn(f"{path}:5: too deep to convert safely", err.getvalue())
    self.assertIn("0 changed, 1 findings", err.getvalue())

  def test_a_few_assignments_of_one_name_convert(self):
    converted, found, parses = _convert(_repeated(10))
    self.assertEqual((parses, found), (1, []))
    self.assertIn("mp_optimizer.LossScaleOptimizer(opt, x)", converted)


class LongFunctionTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("in_the_function", lambda text: text),
      ("in_blocks_of_it", lambda text: text.replace(
          "  h", "  if flag:\n    with g():\n      h").replace(
              "  x = tf.nn", "      x = tf.nn")))
  def test_what_is_parsed_does_not_grow_with_unrelated_statements(self, shape):
    reduced = [chunks.Reduced(shape(_function(n))) for n in (10, 3000)]
    self.assertEqual(reduced[0].source, reduced[1].source)
    self.assertLess(reduced[1].source.count("\n"), 10)
    self.assertGreater(len(shape(_function(3000))), limits.MAX_PARSED)
    compile(shape(_function(3000)), "long", "exec")

  def test_what_an_unrelated_class_binds_in_its_methods_is_left_out(self):
    unrelated = ("class Config{i}(object):\n"
                 "  def __init__(self, x, m):\n"
                 "    self.x, self._m = x, m\n\n")
    sources = [_TF + "".join(unrelated.format(i=i) for i in range(n)) +
               _function(0) for n in (1, 100)]
    reduced = [chunks.Reduced(source).source for source in sources]
    self.assertEqual(reduced[0], reduced[1])
    self.assertNotIn("Config", reduced[1])

  def test_a_long_function_converts_and_keeps_its_text(self):
    source = _function(3000)
    converted, found, parses = _convert(source)
    self.assertEqual((parses, found), (1, []))
    self.assertEqual(converted, source.replace(
        "tf.contrib.mixed_precision.LossScaleOptimizer",
        "mp_optimizer.LossScaleOptimizer").replace(
            "import tensorflow as tf\n",
            "import tensorflow as tf\nimport mp_optimizer\n"))

  @parameterized.named_parameters(
      ("rebound_after_the_wrapper", "",
       "  opt = make_optimizer(opt)\n  opt = tf.contrib.mixed_precision."
       "LossScaleOptimizer(opt, m)\n"),
      ("private_member_of_a_legacy_object", "",
       "  lr = opt._learning_rate\n"),
      ("wrapped_twice", "",
       "  opt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, m)\n"),
      ("local_tf", "  tf = other_module\n", ""),
      ("syntax_error_left_out", "", "  x = = 1\n"))
  def test_left_out_statements_change_no_finding(self, before, after):
    """Findings and rewrites with 500 unrelated statements around the code
    are those without them, lines moved by the statements' length."""
    short = _function(0, before, after)
    long = _function(500, before, after)
    wrap = 5 + before.count("\n")  # The line of `_WRAP`; the rest moves.
    try:
      short_new, short_found = migrate.convert(short)
    except libcst.ParserSyntaxError:
      # The command line names Python's own line for it (test_migrate_cli).
      with self.assertRaises(libcst.ParserSyntaxError):
        migrate.convert(long)
      return
    long_new, long_found = migrate.convert(long)
    moved = len(_FILLER.format(i=0).splitlines()) * 500
    self.assertEqual(
        [(f.line + (moved if f.line > wrap else 0), f.reason)
         for f in short_found],
        [(f.line, f.reason) for f in long_found])
    self.assertEqual(long_new.replace("".join(
        _FILLER.format(i=i) for i in range(500)), ""), short_new)
