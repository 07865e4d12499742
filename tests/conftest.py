"""Test-session settings: quiet TensorFlow logs, markers, options, order.

The suites hand tests to their processes a class at a time, in collection
order (`--dist loadscope --no-loadscope-reorder`). A class marked
`long_run` (it takes tens of seconds: a demo, a cluster, a benchmark script,
graphs of hundreds of variables) is moved to the front, so the processes start with the long classes and share
the short ones at the end, rather than one process running a long class
alone while the other has finished.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_addoption(parser):
  parser.addoption("--run-soak", action="store_true", default=False,
                   help="run the long soak tests (make soak)")


def pytest_configure(config):
  config.addinivalue_line("markers", "soak: long-running soak test (make soak)")
  config.addinivalue_line(
      "markers", "long_run: a class that takes tens of seconds (a demo, a "
      "cluster, a benchmark script, big graphs); the suite starts it first")
  # absltest helpers such as create_tempdir() read absl flags, which pytest
  # never parses; their defaults are what the tests want.
  from absl import flags  # pylint: disable=import-outside-toplevel
  flags.FLAGS.mark_as_parsed()


def pytest_collection_modifyitems(config, items):
  import pytest  # pylint: disable=import-outside-toplevel
  # Stable: classes keep their order within each of the two groups.
  items.sort(key=lambda item: item.get_closest_marker("long_run") is None)
  if config.getoption("--run-soak"):
    return
  skip = pytest.mark.skip(reason="soak test: run with `make soak`")
  for item in items:
    if "soak" in item.keywords:
      item.add_marker(skip)
