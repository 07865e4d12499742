"""Generated inputs for `benchmarks/codemod_speed.py`, in the zoos' shape.

The code is written here, not downloaded: long model files (layers,
configs, input pipelines) in the shape of the public GPU/NPU model zoos,
with, where asked, a function that builds its optimizer through
`tf.contrib.mixed_precision` or the TF graph rewrite together with a
subclass of contrib's manager, NVIDIA's `TF_ENABLE_AUTO_MIXED_PRECISION`,
a hand-written float32 getter, and an NPU toolkit's star import.
"""

import os
from typing import Tuple

_HEADER = '''# Copyright the model zoo authors.
"""{doc}"""

import os
import numpy as np
import tensorflow as tf
{extra}
FLAGS = tf.compat.v1.flags.FLAGS
'''
_NPU = "from npu_bridge.npu_init import *\n"

# One block of ordinary model code (no legacy name); {i} keeps names unique.
_BLOCK = '''

def conv_block_{i}(inputs, filters, training, data_format="channels_last"):
  """Conv-BN-ReLU block number {i}."""
  x = tf.compat.v1.layers.conv2d(
      inputs, filters=filters, kernel_size=3, strides=1, padding="same",
      use_bias=False, data_format=data_format,
      kernel_initializer=tf.compat.v1.variance_scaling_initializer())
  x = tf.compat.v1.layers.batch_normalization(
      x, axis=-1 if data_format == "channels_last" else 1, momentum=0.9,
      epsilon=1e-5, training=training, fused=True)
  x = tf.nn.relu(x)
  shortcut = inputs if inputs.shape[-1] == filters else tf.compat.v1.layers.conv2d(
      inputs, filters, 1, padding="same", data_format=data_format)
  return x + shortcut


class Config{i}(object):
  """Hyper-parameters of variant {i}."""

  def __init__(self, learning_rate=0.1, batch_size=256, warmup_steps=1000):
    self.learning_rate = learning_rate * (1 + {i} % 3)
    self.batch_size = batch_size
    self.warmup_steps = warmup_steps
    self.schedule = {{"decay": 0.96, "every": 10000, "staircase": True}}

  def to_dict(self):
    return dict(vars(self))


def parse_record_{i}(serialized, image_size=224):
  features = tf.io.parse_single_example(serialized, {{
      "image/encoded": tf.io.FixedLenFeature([], tf.string),
      "image/class/label": tf.io.FixedLenFeature([], tf.int64),
  }})
  image = tf.image.decode_jpeg(features["image/encoded"], channels=3)
  image = tf.image.resize(image, [image_size, image_size])
  label = tf.cast(features["image/class/label"], tf.int32) - 1
  return tf.cast(image, tf.float32) / 255.0, label
'''

# The legacy optimizer set-up some training files have.
_LEGACY = '''

def build_optimizer(loss, learning_rate, use_fp16, use_amp):
  """Optimizer of the training script, with fp16 loss scaling."""
  opt = tf.compat.v1.train.MomentumOptimizer(learning_rate, momentum=0.9)
  if use_amp:
    opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(
        opt, loss_scale="dynamic")
  if use_fp16:
    manager = tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(
        init_loss_scale=2**32, incr_every_n_steps=1000,
        decr_every_n_nan_or_inf=2, decr_ratio=0.5)
    opt = tf.contrib.mixed_precision.LossScaleOptimizer(opt, manager)
  global_step = tf.compat.v1.train.get_or_create_global_step()
  return opt.minimize(loss, global_step=global_step)


class ScaleManager(tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager):
  """A manager that sets contrib's attributes itself."""

  def __init__(self, init_loss_scale=2**15):
    self._incr_every_n_steps = 2000
    self._decr_every_n_nan_or_inf = 2
    self._incr_ratio = 2
    self._decr_ratio = 0.5
    self._loss_scale = tf.compat.v1.get_variable(
        "loss_scale", initializer=float(init_loss_scale), trainable=False)
'''

# A launcher that got mixed precision from NVIDIA's container.
_NVIDIA = '''

def set_environment(use_amp):
  """Environment of NVIDIA's TF1 container."""
  if use_amp:
    os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"
  else:
    os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "0"
'''

# A hand-written float32 master-weight getter.
_GETTER = '''

def float32_getter(getter, name, shape=None, dtype=None, trainable=True,
                   *args, **kwargs):
  variable = getter(name, shape, tf.float32 if trainable else dtype,
                    *args, trainable=trainable, **kwargs)
  return tf.cast(variable, dtype) if trainable else variable
'''


def _module(doc: str, blocks: int, extras=(), start: int = 0,
            every: int = 0, npu: bool = False) -> str:
  """A module of `blocks` blocks; each of `extras` after every `every`."""
  parts = [_HEADER.format(doc=doc, extra=_NPU if npu else "")]
  for i in range(blocks):
    parts.append(_BLOCK.format(i=start + i))
    if every and i % every == every // 2:
      parts += [extra.replace("(", f"_{start + i}(", 1) for extra in extras]
  if not every:
    parts += extras
  return "".join(parts)


def _lines(text: str) -> int:
  return text.count("\n")


def _write(path: str, text: str) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(text)


def write_big_file(folder: str, lines: int = 50_000) -> Tuple[str, int]:
  """Writes one module of about `lines` lines with no legacy API."""
  per_block = _lines(_BLOCK.format(i=0))
  text = _module("A long generated model file.",
                 max(1, (lines - _lines(_HEADER)) // per_block))
  path = os.path.join(folder, "big_model.py")
  _write(path, text)
  return path, _lines(text)


def write_big_legacy_file(folder: str,
                          size: int = 5_000_000) -> Tuple[str, int, int]:
  """Writes one module of about `size` bytes that uses the legacy API.

  Returns:
    (path, lines, functions and classes that use the legacy API).
  """
  blocks = size // len(_BLOCK.format(i=10_000))
  text = _module("A long generated model file with fp16 training.", blocks,
                 [_LEGACY], every=100)
  path = os.path.join(folder, "big_legacy_model.py")
  _write(path, text)
  return path, _lines(text), 2 * text.count("\ndef build_optimizer")


def write_zoo(folder: str, files: int = 10_000, lines: int = 2_000_000,
              legacy_every: int = 30) -> Tuple[str, int, int]:
  """Writes a model-zoo tree; returns (root, total lines, legacy files)."""
  root = os.path.join(folder, "zoo")
  per_block = _lines(_BLOCK.format(i=0))
  blocks = max(1, (lines // files - _lines(_HEADER)) // per_block)
  roles = ["model", "data", "utils", "train", "export", "layers"]
  total = legacy_files = 0
  for index in range(files):
    model = f"model_{index // len(roles):04d}"
    role = roles[index % len(roles)]
    extras = []
    if index % legacy_every == legacy_every // 2:
      extras.append(_LEGACY)
      legacy_files += 1
    if index % 50 == 7:
      extras.append(_NVIDIA)
    if index % 40 == 3:
      extras.append(_GETTER)
    text = _module(f"{model}: {role}.", blocks, extras, start=index,
                   npu=index % 2 == 0)
    _write(os.path.join(root, "built-in", model, f"{role}.py"), text)
    total += _lines(text)
  return root, total, legacy_files
