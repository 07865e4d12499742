"""mp-optimizer-migrate on big inputs: what is left out of parsing, and diffs.

A module's functions and classes that spell no name the codemod looks for
are never given to libcst (`chunks.Reduced`); these tests check that the
result is what a whole parse gives: the text put back byte for byte, line
numbers of the file, Python's own syntax errors. `diffs.unified` is checked
against `difflib` and by applying it. Timing belongs to
benchmarks/codemod_speed.py.
"""

import difflib

from absl.testing import parameterized
import hypothesis
from hypothesis import strategies

from mp_optimizer import migrate
from mp_optimizer.migrate import chunks
from mp_optimizer.migrate import diffs

_PLAIN = ("def helper_{i}(x, y=2):\n"
          "  \"\"\"Unrelated.\n\nA docstring line at column 0.\n\"\"\"\n"
          "  return [x,\n"
          "# a comment at column 0 inside brackets\n"
          "          y]\n\n\n")
_LEGACY = ("def build(opt):\n"
           "  m = tf.contrib.mixed_precision.FixedLossScaleManager(8)\n"
           "  opt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, m)\n"
           "  return opt._loss_scale_manager\n")


def _module(before, after, newline="\n"):
  text = ("#!/usr/bin/env python\n# header\nimport tensorflow as tf\n\n" +
          "".join(_PLAIN.format(i=i) for i in range(before)) +
          "@decorator\nclass Unrelated(object):\n  pass\n\n" + _LEGACY + "\n" +
          "".join(_PLAIN.format(i=i) for i in range(before, before + after)))
  return text.replace("\n", newline)


class ReducedTest(parameterized.TestCase):

  def test_unrelated_definitions_are_left_out_of_the_parse(self):
    reduced = chunks.Reduced(_module(3, 3))
    self.assertNotIn("helper_", reduced.source)
    self.assertNotIn("Unrelated", reduced.source)
    self.assertIn("tf.contrib.mixed_precision", reduced.source)
    self.assertIn("# header", reduced.source)

  @parameterized.named_parameters(("lf", "\n"), ("crlf", "\r\n"))
  def test_text_left_out_comes_back_byte_for_byte(self, newline):
    source = _module(5, 4, newline)
    new, found = migrate.convert(source)
    self.assertEqual(new, source.replace(
        "tf.contrib.mixed_precision.FixedLossScaleManager",
        "managers.FixedLossScaleManager").replace(
            "tf.contrib.mixed_precision.LossScaleOptimizer",
            "mp_optimizer.LossScaleOptimizer").replace(
                f"import tensorflow as tf{newline}",
                f"import tensorflow as tf{newline}from mp_optimizer import "
                f"managers{newline}import mp_optimizer{newline}"))
    line = source.splitlines().index("  return opt._loss_scale_manager") + 1
    self.assertEqual([f.line for f in found], [line])

  def test_a_syntax_error_in_an_unrelated_function_is_still_reported(self):
    source = _module(2, 2).replace("  return [x,\n", "   return [x,\n", 1)
    with self.assertRaises(Exception) as raised:
      migrate.convert(source)
    self.assertEqual(type(raised.exception).__name__, "ParserSyntaxError")

  def test_a_file_that_does_not_tokenize_is_parsed_whole(self):
    source = "import tensorflow as tf\nx = tf.contrib.mixed_precision.X(\n"
    self.assertEqual(chunks.Reduced(source).source, source)


def _apply(old, diff_lines):
  """Applies a unified diff's hunks to `old` (a list of lines)."""
  out, index = [], 0
  for line in diff_lines[2:]:
    if line.startswith("@@"):
      start, _, length = line.split()[1][1:].partition(",")
      start = int(start) - (0 if length == "0" else 1)
      out += old[index:start]
      index = start
    elif line[0] == " ":
      out.append(line[1:])
      index += 1
    elif line[0] == "-":
      index += 1
    else:
      out.append(line[1:])
  return out + old[index:]


_LINES = strategies.lists(strategies.sampled_from("abcdefgxyz"), max_size=40)


class UnifiedDiffTest(parameterized.TestCase):

  @hypothesis.settings(max_examples=300, deadline=None)
  @hypothesis.given(_LINES, _LINES)
  def test_applying_the_diff_gives_the_new_lines(self, old, new):
    old = [line + "\n" for line in old]
    new = [line + "\n" for line in new]
    diff = diffs.unified(old, new, "p")
    self.assertEqual(_apply(old, diff), new)
    self.assertEqual(diff == [], old == new)

  def test_same_as_difflib_where_lines_are_unique(self):
    old = [f"line {i}\n" for i in range(60)]
    new = old[:5] + ["new\n"] + old[5:30] + old[31:]
    new[50] = "changed\n"
    self.assertEqual(diffs.unified(old, new, "p"),
                     list(difflib.unified_diff(old, new, "p", "p")))
