"""Which of the files found are converted: each real file once, and never
TensorFlow's own sources.

A symbolic link and the file it points to are one file: it is converted
(or shown in the diff) once, under the path that is not a link, so that
`patch -p0` applies the diff. A file that is part of TensorFlow itself (a
vendored copy of its sources, or of an installed package) defines the legacy
API rather than using it: it is skipped, and the command line says so. Such
a file sits under a directory called `tensorflow` (or TF 1.15's
`tensorflow_core`) that is either followed on its path by `python` or
`contrib` (TensorFlow's source layout) or is a package's top (it holds an
`__init__.py`, its parent does not): a project's own package of that name
would hide TensorFlow's.
"""

import collections
import os
from typing import Dict, List, Optional, Sequence, Tuple

_PACKAGES = ("tensorflow", "tensorflow_core")
_SOURCE_FOLDERS = ("python", "contrib")


def tensorflow_root(path: str) -> Optional[str]:
  """The folder of TensorFlow's own sources that holds `path`, if one does."""
  parts = os.path.abspath(path).split(os.sep)
  for index, part in enumerate(parts[:-1]):
    if part not in _PACKAGES:
      continue
    folder = os.sep.join(parts[:index + 1])
    if parts[index + 1] in _SOURCE_FOLDERS or (
        os.path.isfile(os.path.join(folder, "__init__.py")) and
        not os.path.isfile(os.path.join(folder, os.pardir, "__init__.py"))):
      return folder
  return None


def select(paths: Sequence[str]) -> Tuple[List[str], Dict[str, int]]:
  """The paths to convert, in order, and TensorFlow's sources left out.

  Args:
    paths: The files found, in order.

  Returns:
    The paths to convert: one per real file (the first that is not reached
    through a link, else the first); and for each folder of TensorFlow's
    own sources, how many of `paths` it holds (none of them converted).
  """
  skipped: Dict[str, int] = collections.Counter()
  real = {}  # Path -> its real path, for the paths not skipped.
  chosen: Dict[str, str] = {}  # Real path -> the path it is converted as.
  for path in paths:
    root = tensorflow_root(path)
    if root is not None:
      skipped[root] += 1
      continue
    real[path] = os.path.realpath(path)
    first = chosen.setdefault(real[path], path)
    if _through_link(first, real[path]) and not _through_link(path,
                                                              real[path]):
      chosen[real[path]] = path
  kept = dict.fromkeys(path for path in paths
                       if path in real and chosen[real[path]] == path)
  return list(kept), dict(skipped)  # `kept`: in order, each once.


def _through_link(path: str, real: str) -> bool:
  return real != os.path.abspath(path)
