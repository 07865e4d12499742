"""Graph size and step memory, read from real graphs and real Session runs.

Ops are counted twice:

* built: nodes of the GraphDef as Python built it, including the bodies of
  its functions (TF's built-in wrapper puts the inner apply in a `tf.cond`,
  whose branches are function bodies, so counting only top-level nodes would
  hide it);
* run: nodes of the partition graphs the Session executes, after Grappler
  has optimized the graph (constant folding, deduplication, pruning) and
  `tf.cond` has been lowered to Switch/Merge.

Step memory is the peak, over one step, of bytes allocated and not yet
freed, from the allocation records of a FULL_TRACE `RunMetadata`.
"""

import collections
import dataclasses
from typing import Dict

import tensorflow as tf

v1 = tf.compat.v1


def built_ops(graph: tf.Graph) -> int:
  """Nodes in `graph`'s GraphDef, function bodies included."""
  graph_def = graph.as_graph_def()
  return len(graph_def.node) + sum(len(function.node_def)
                                   for function in graph_def.library.function)


def run_ops(session: v1.Session, fetch) -> int:
  """Runs `fetch` once; returns the number of nodes the Session executed."""
  metadata = v1.RunMetadata()
  session.run(fetch, options=v1.RunOptions(output_partition_graphs=True),
              run_metadata=metadata)
  return sum(len(graph.node) for graph in metadata.partition_graphs)


@dataclasses.dataclass(frozen=True)
class Trace:
  """What one traced step ran and allocated.

  Attributes:
    kernels: Nodes in the step stats (kernels the executor ran).
    peak_bytes: Peak over the step of bytes allocated and not yet freed.
    at_peak: Node name -> its bytes still live at that peak (nodes with
      none left out): who holds the memory when it is highest.
  """
  kernels: int
  peak_bytes: int
  at_peak: Dict[str, int]


def trace_step(session: v1.Session, fetch) -> Trace:
  """Runs `fetch` once with a FULL_TRACE `RunMetadata`; reads it."""
  metadata = v1.RunMetadata()
  session.run(fetch, options=v1.RunOptions(
      trace_level=v1.RunOptions.FULL_TRACE), run_metadata=metadata)
  nodes = [node for device in metadata.step_stats.dev_stats
           for node in device.node_stats]
  records = sorted((record.alloc_micros, record.alloc_bytes, node.node_name)
                   for node in nodes for memory in node.memory
                   for record in memory.allocation_records)
  live = peak = 0
  peak_index = -1
  for index, (_, change, _) in enumerate(records):
    live += change
    if live > peak:
      peak, peak_index = live, index
  at_peak: Dict[str, int] = collections.Counter()
  for _, change, name in records[:peak_index + 1]:
    at_peak[name] += change
  return Trace(len(nodes), peak,
               {name: held for name, held in at_peak.items() if held > 0})


def step_peak_bytes(session: v1.Session, fetch) -> int:
  """Runs `fetch` once, traced; returns the peak of live bytes it allocated."""
  return trace_step(session, fetch).peak_bytes


@dataclasses.dataclass(frozen=True)
class Line:
  """Ops added as a function of trainable variables: slope * n + constant."""
  per_variable: float
  constant: float

  def __str__(self) -> str:
    return f"{self.per_variable:.2f}/var + {self.constant:.0f}"


def fit_line(added_a: int, variables_a: int, added_b: int,
             variables_b: int) -> Line:
  """The line through two (variables, ops added) points."""
  slope = (added_b - added_a) / (variables_b - variables_a)
  return Line(slope, added_a - slope * variables_a)
