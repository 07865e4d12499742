"""Test-session settings: quiet TensorFlow logs, register markers and options."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_addoption(parser):
  parser.addoption("--run-soak", action="store_true", default=False,
                   help="run the long soak tests (make soak)")


def pytest_configure(config):
  config.addinivalue_line("markers", "soak: long-running soak test (make soak)")
  # absltest helpers such as create_tempdir() read absl flags, which pytest
  # never parses; their defaults are what the tests want.
  from absl import flags  # pylint: disable=import-outside-toplevel
  flags.FLAGS.mark_as_parsed()


def pytest_collection_modifyitems(config, items):
  import pytest  # pylint: disable=import-outside-toplevel
  if config.getoption("--run-soak"):
    return
  skip = pytest.mark.skip(reason="soak test: run with `make soak`")
  for item in items:
    if "soak" in item.keywords:
      item.add_marker(skip)
