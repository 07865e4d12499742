"""Test-session settings: quiet TensorFlow logs, register markers and options."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_addoption(parser):
  parser.addoption("--run-soak", action="store_true", default=False,
                   help="run the long soak tests (make soak)")


def pytest_configure(config):
  config.addinivalue_line("markers", "soak: long-running soak test (make soak)")
  # pytest-xdist registers this one; an environment without it (the Horovod
  # build of `make test-horovod`) runs the suite in one process and must not
  # warn about the mark.
  config.addinivalue_line(
      "markers", "xdist_group(name): tests pytest-xdist keeps in one process")
  # absltest helpers such as create_tempdir() read absl flags, which pytest
  # never parses; their defaults are what the tests want.
  from absl import flags  # pylint: disable=import-outside-toplevel
  flags.FLAGS.mark_as_parsed()


def _shares_class_setup(cls) -> bool:
  """Whether a test class of this suite builds something in `setUpClass`."""
  return cls is not None and any(
      "setUpClass" in vars(base) for base in cls.__mro__
      if base.__module__.split(".")[0] == "tests")


def pytest_collection_modifyitems(config, items):
  import pytest  # pylint: disable=import-outside-toplevel
  for item in items:
    # Under pytest-xdist (`make test`: `-n 2 --dist loadgroup`), the tests of
    # a class that starts a cluster or runs a program once in `setUpClass`
    # go to one process, so that work is done once, not once per process.
    if _shares_class_setup(getattr(item, "cls", None)):
      item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0] +
                                              "::" + item.cls.__name__))
  if config.getoption("--run-soak"):
    return
  skip = pytest.mark.skip(reason="soak test: run with `make soak`")
  for item in items:
    if "soak" in item.keywords:
      item.add_marker(skip)
