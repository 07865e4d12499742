"""What type checkers see of `mp_optimizer` is exactly what it exports.

`mp_optimizer/__init__.py` loads its public names lazily (`__getattr__`), so
type checkers see them only through its `if TYPE_CHECKING:` imports; a name
added to `__all__` without one there would be `Any` to them.
"""

import ast
import pathlib

from absl.testing import absltest

import mp_optimizer

INIT = pathlib.Path(mp_optimizer.__file__)


def _type_checking_names():
  tree = ast.parse(INIT.read_text())
  block, = [node for node in tree.body if isinstance(node, ast.If) and
            getattr(node.test, "id", None) == "TYPE_CHECKING"]
  return {alias.asname or alias.name for node in block.body
          for alias in node.names}


class PublicNamesTest(absltest.TestCase):

  def test_type_checking_imports_cover_all_exports(self):
    self.assertEqual(_type_checking_names(), set(mp_optimizer.__all__))

  def test_every_export_loads(self):
    for name in mp_optimizer.__all__:
      self.assertIsNotNone(getattr(mp_optimizer, name), name)
