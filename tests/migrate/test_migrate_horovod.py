"""`mp-optimizer-migrate --horovod`: Horovod's TF1 imports onto the drop-in.

Expected outputs are written by hand from the rules in the module docstring
of `mp_optimizer.migrate.horovod`.
"""

import os
import shutil
import tempfile

from absl.testing import parameterized

from mp_optimizer import migrate
import mp_optimizer.horovod
from mp_optimizer.migrate import horovod as horovod_imports

HVD_SCRIPT = ("import horovod.tensorflow as hvd\n"
              "hvd.init()\n"
              "opt = hvd.DistributedOptimizer(opt)\n")


class ConvertTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("import_as", "import horovod.tensorflow as hvd\n",
       "import mp_optimizer.horovod as hvd\n"),
      ("from_package", "from horovod import tensorflow as hvd\n",
       "from mp_optimizer import horovod as hvd\n"),
      ("supported_names",
       "from horovod.tensorflow import DistributedOptimizer, size as world\n",
       "from mp_optimizer.horovod import DistributedOptimizer, size as world\n"),
      ("among_others", "import os, horovod.tensorflow as hvd\n",
       "import os, mp_optimizer.horovod as hvd\n"),
  )
  def test_imports_are_mapped_in_place(self, legacy, expected):
    self.assertEqual(horovod_imports.convert(legacy), (expected, []))

  @parameterized.named_parameters(
      ("keras", "x = 1\nimport horovod.tensorflow.keras as hvd\n", 2,
       "`import horovod.tensorflow.keras` is not mapped"),
      ("no_alias", "import horovod.tensorflow\n", 1,
       "`import horovod.tensorflow` is not mapped"),
      ("torch", "from horovod import torch as hvd\n", 1,
       "`from horovod import ...` is not mapped"),
      ("missing_name", "from horovod.tensorflow import Adasum\n", 1,
       "`from horovod.tensorflow import ...` is not mapped"),
      ("use", "import horovod.tensorflow as hvd\n\ntape = "
       "hvd.DistributedGradientTape(tape)\n", 3,
       "`hvd.DistributedGradientTape` is not in mp_optimizer.horovod"),
  )
  def test_what_cannot_be_mapped_is_reported_on_its_line(self, legacy, line,
                                                          reason):
    _, found = horovod_imports.convert(legacy)
    self.assertLen(found, 1)
    self.assertEqual(found[0].line, line)
    self.assertIn(reason, found[0].reason)
    self.assertTrue(found[0].needs_human)

  def test_the_codemods_list_is_the_drop_ins_names(self):
    self.assertEqual(set(horovod_imports.SUPPORTED),
                     set(mp_optimizer.horovod.__all__))


class CommandLineTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir)
    self.path = os.path.join(self.dir, "train.py")
    with open(self.path, "w", encoding="utf-8") as f:
      f.write(HVD_SCRIPT)

  def read(self) -> str:
    with open(self.path, encoding="utf-8") as f:
      return f.read()

  def test_horovod_flag_rewrites_the_import(self):
    self.assertEqual(migrate.main(["--in-place", "--horovod", "--jobs", "1",
                                   self.dir]), 0)
    self.assertEqual(self.read(), HVD_SCRIPT.replace(
        "import horovod.tensorflow", "import mp_optimizer.horovod"))

  def test_without_the_flag_horovod_stays(self):
    self.assertEqual(migrate.main(["--in-place", "--jobs", "1", self.dir]), 0)
    self.assertEqual(self.read(), HVD_SCRIPT)


if __name__ == "__main__":
  parameterized.absltest.main()
