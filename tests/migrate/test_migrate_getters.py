"""The codemod points hand-written float32 master-weight getters to ours.

Such getters keep working, so the source is never changed; a notice (not a
finding: the exit status stays 0) names `mp_optimizer.float32_variable_getter`.
"""

from absl.testing import parameterized

from mp_optimizer import migrate

TF = "import tensorflow as tf\n\n\n"
# NVIDIA's TF1 mixed-precision guide's shape: dtype chosen by `trainable`.
NVIDIA_STYLE = TF + (
    "def float32_variable_storage_getter(getter, name, shape=None, dtype=None,\n"
    "                                    initializer=None, trainable=True,\n"
    "                                    *args, **kwargs):\n"
    "  storage_dtype = tf.float32 if trainable else dtype\n"
    "  variable = getter(name, shape, dtype=storage_dtype,\n"
    "                    initializer=initializer, trainable=trainable,\n"
    "                    *args, **kwargs)\n"
    "  if trainable and dtype != tf.float32:\n"
    "    variable = tf.cast(variable, dtype)\n"
    "  return variable\n")
# The kwargs shape: the requested dtype swapped in the keyword arguments.
KWARGS_STYLE = TF + (
    "def _fp32_getter(getter, *args, **kwargs):\n"
    "  requested = kwargs['dtype']\n"
    "  if requested in (tf.float16, tf.bfloat16):\n"
    "    kwargs['dtype'] = tf.float32\n"
    "  var = getter(*args, **kwargs)\n"
    "  return tf.cast(var, requested)\n")
PASS_THROUGH = TF + (
    "def logging_getter(getter, *args, **kwargs):\n"
    "  print(kwargs['name'])\n"
    "  return getter(*args, **kwargs)\n")
NO_GETTER_CALL = TF + (
    "def to_float16(x, dtype=tf.float32):\n"
    "  return tf.cast(tf.cast(x, dtype), tf.float16)\n")


def _notice(name, reads_trainable=True):
  ignores = "" if reads_trainable else (
      f"; `{name}` does not look at `trainable`, so it stores non-trainable "
      "variables (moving averages, counters) in float32 too, and checkpoints "
      "written with it hold them in float32")
  return (f"`{name}` looks like a hand-written float32 master-weight getter: "
          "`mp_optimizer.float32_variable_getter` stores trainable "
          "float16/bfloat16 variables in float32 and casts them on read, "
          "creates every other variable as requested, and also handles "
          "float16 initial values, partitioned variables and an enclosing "
          f"scope's getter{ignores}; pass it as `custom_getter=`, or build the "
          "model under `with mp_optimizer.float32_master_weights():`. "
          "Checkpoint names stay the same. Not rewritten: such getters "
          "differ in detail")


class HandWrittenGetterTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("nvidia_style", NVIDIA_STYLE,
       [(4, _notice("float32_variable_storage_getter"))]),
      # Every 16-bit variable, trainable or not: the notice says so (what
      # each getter does is run in tests/migrate/test_migrate_behaviour.py).
      ("kwargs_style", KWARGS_STYLE,
       [(4, _notice("_fp32_getter", reads_trainable=False))]),
      ("pass_through_getter", PASS_THROUGH, []),
      ("cast_without_a_getter_call", NO_GETTER_CALL, []),
  )
  def test_notice_and_source_unchanged(self, source, expected):
    converted, found = migrate.convert(source)
    self.assertEqual(converted, source)
    self.assertEqual([(f.line, f.reason) for f in found], expected)
    self.assertTrue(all(not f.needs_human for f in found))
