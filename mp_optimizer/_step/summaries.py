"""The signals' summaries, built with each train op, for `add_summaries()`.

`mp_optimizer.add_summaries()` may first be called after the graph is
finalized (in a hook under `MonitoredTrainingSession`), when no op can be
added. So each train op builds, once the signals are published, the
summaries of the graph's newest signals and their merge (in no collection);
and keeps them with the graph's signals (`signal_record.GraphSignals`);
`add_summaries()` adds the newest ones to the SUMMARIES collection while it
still can, and returns their merge. Nothing runs them unless they
are fetched.

```
one optimizer:  mp_optimizer/loss_scale, mp_optimizer/skipped_steps
several:        mp_optimizer/skipped_steps (the total), and per optimizer
                mp_optimizer/<name>/loss_scale, mp_optimizer/<name>/skipped_steps
telemetry:      beside its optimizer's loss_scale: headroom_bits,
                global_norm, zero_share/<group>
```

The tags are given explicitly (not taken from name scopes), so every
rebuild keeps them.
"""

import re
from typing import List

import tensorflow as tf

from mp_optimizer._step import signal_record
from mp_optimizer._step import telemetry

_INVALID_TAG_CHARACTERS = re.compile(r"[^-/\w.]")  # As tf.summary cleans tags.


def _scalar(tag: str, value: tf.Tensor) -> tf.Tensor:
  return tf.raw_ops.ScalarSummary(
      tags=_INVALID_TAG_CHARACTERS.sub("_", tag), values=value)


def _precision(prefix: str, record: telemetry.Record) -> List[tf.Tensor]:
  """Summaries of one record: the step's tensors, or reads inside control flow."""
  values = record.step if record.fetchable else record.reads
  made = [_scalar(prefix + "headroom_bits", values["headroom_bits"]),
          _scalar(prefix + "global_norm", values["global_norm"])]
  made += [_scalar(f"{prefix}zero_share/{group.replace(':', '_')}",
                   values["zero_share"][index])
           for index, group in enumerate(record.groups)]
  return made


def build() -> None:
  """Builds the summaries of the newest signals of the outermost graph."""
  with tf.init_scope():
    graph = tf.compat.v1.get_default_graph()
    signals = signal_record.published(graph, "LossScaleOptimizer")
    with graph.name_scope(None), tf.name_scope("mp_optimizer_summaries"):
      newest = signals.newest()
      records = signals.newest_telemetry()
      made = [_scalar("mp_optimizer/skipped_steps", signals.total_skipped())]
      for name, record in newest.items():
        prefix = "mp_optimizer/" if len(newest) == 1 else f"mp_optimizer/{name}/"
        made.append(_scalar(prefix + "loss_scale", record.loss_scale))
        if len(newest) > 1:
          made.append(_scalar(prefix + "skipped_steps", record.skipped_steps))
        if name in records:
          made += _precision(prefix, records[name])
      signals.summaries = signal_record.Summaries(
          made, tf.compat.v1.summary.merge(made, collections=[]))
