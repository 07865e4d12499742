"""Installs the `mp_optimizer` and `managers` packages."""

import pathlib
import re

import setuptools

_HERE = pathlib.Path(__file__).parent
_VERSION = re.search(r'^__version__ = "([^"]+)"',
                     (_HERE / "mp_optimizer" / "__init__.py").read_text(),
                     re.MULTILINE).group(1)

# TensorFlow ships as `tensorflow` or `tensorflow-cpu`; a hard requirement on
# one would pull the other into environments that already have TensorFlow, so
# it is an extra: `pip install mp_optimizer[tensorflow]` or `[tensorflow-cpu]`.
_TF_RANGE = ">=2.15,<2.22"

setuptools.setup(
    name="mp_optimizer",
    version=_VERSION,
    description=("Float16 loss scaling for tf.compat.v1 graph code: a drop-in "
                 "for tf.contrib.mixed_precision on TensorFlow 2.x."),
    long_description=(_HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    packages=setuptools.find_packages(
        include=["mp_optimizer", "mp_optimizer.*", "managers", "managers.*"]),
    python_requires=">=3.9",
    # libcst: the concrete syntax tree behind `mp-optimizer-migrate`.
    install_requires=["libcst>=1.1,<2"],
    entry_points={
        "console_scripts": [
            "mp-optimizer-migrate = mp_optimizer.migrate:main",
        ],
    },
    extras_require={
        "tensorflow": [f"tensorflow{_TF_RANGE}"],
        "tensorflow-cpu": [f"tensorflow-cpu{_TF_RANGE}"],
    },
    license="Apache-2.0",
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
