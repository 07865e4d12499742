"""The signals' summaries, built with each train op, for `add_summaries()`.

`mp_optimizer.add_summaries()` may first be called after the graph is
finalized (in a hook under `MonitoredTrainingSession`), when no op can be
added. So each train op builds, once the signals are published, the
summaries of the graph's newest signals and their merge (in no collection);
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
import weakref
from typing import Dict, List, Optional, Tuple

import tensorflow as tf

from mp_optimizer._step import skips
from mp_optimizer._step import telemetry

_INVALID_TAG_CHARACTERS = re.compile(r"[^-/\w.]")  # As tf.summary cleans tags.
# graph -> the newest summaries and their merge.
_NEWEST = weakref.WeakKeyDictionary()
# graph -> {optimizer name: its newest telemetry record}, the newest last.
# Not a graph collection: a collection of Python objects makes every
# meta-graph export (a Saver, an Estimator, a FileWriter given the graph)
# warn that it cannot serialize them.
_RECORDS = weakref.WeakKeyDictionary()


def newest_records(graph: tf.Graph) -> Dict[str, telemetry.Record]:
  """{optimizer name: its newest telemetry record}, the newest last."""
  return dict(_RECORDS.get(graph, {}))


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


def build(record: Optional[telemetry.Record] = None) -> None:
  """Builds the summaries of the newest signals of the outermost graph.

  Args:
    record: The new train op's telemetry, if it measures any; kept as its
      optimizer's newest (`newest_records`).
  """
  with tf.init_scope():
    graph = tf.compat.v1.get_default_graph()
    if record is not None:
      newest = _RECORDS.setdefault(graph, {})
      newest.pop(record.optimizer, None)
      newest[record.optimizer] = record
    with graph.name_scope(None), tf.name_scope("mp_optimizer_summaries"):
      names = skips.published_names(graph)
      scales = skips.newest(graph, skips.LOSS_SCALE)
      counts = skips.newest(graph, skips.SKIPPED_STEPS)
      records = newest_records(graph)
      made = [_scalar("mp_optimizer/skipped_steps",
                      skips.total_skipped(graph))]
      for name in names:
        prefix = "mp_optimizer/" if len(names) == 1 else f"mp_optimizer/{name}/"
        made.append(_scalar(prefix + "loss_scale", scales[name]))
        if len(names) > 1:
          made.append(_scalar(prefix + "skipped_steps", counts[name]))
        if name in records:
          made += _precision(prefix, records[name])
      _NEWEST[graph] = made, tf.compat.v1.summary.merge(made, collections=[])


def newest(graph: tf.Graph) -> Tuple[List[tf.Tensor], tf.Tensor]:
  """The newest summaries of `graph`'s signals and their merge (see `build`)."""
  return _NEWEST[graph]
