"""A built training step: its own graph and Session, ready to run."""

import contextlib
import dataclasses
import os
from typing import Callable, ContextManager, Dict, Optional, Tuple

import tensorflow as tf

from benchmarks import timing

v1 = tf.compat.v1


@dataclasses.dataclass
class Step:
  """One training step of one model, in its own graph and Session."""
  graph: tf.Graph
  session: v1.Session
  train_op: tf.Operation
  global_step: tf.Variable
  trainable_variables: int
  init_op: tf.Operation
  runs: int = 0  # Steps run so far; `global_step` should say the same.

  def run(self) -> None:
    self.session.run(self.train_op)
    self.runs += 1

  def measure(self, probe: Callable[[v1.Session, tf.Operation], int]) -> int:
    """Returns `probe(session, train_op)`, which runs one step."""
    self.runs += 1
    return probe(self.session, self.train_op)

  def steps_applied(self) -> int:
    return int(self.session.run(self.global_step))

  def close(self) -> None:
    self.session.close()


def session_config() -> v1.ConfigProto:
  """The default Session config."""
  return v1.ConfigProto()


def build(make_loss: Callable[[], tf.Tensor], make_train_op: Callable,
          config: Optional[v1.ConfigProto] = None,
          scope: Callable[[], ContextManager] = contextlib.nullcontext) -> Step:
  """Builds loss and train op in a fresh graph inside `scope()`, initialized.

  Args:
    make_loss: Builds the model's loss in the default graph.
    make_train_op: Builds the train op from the loss and a global step.
    config: Session config (default: TensorFlow's defaults).
    scope: Context the graph is built in (e.g. an XLA `jit_scope`).

  Returns:
    The step, with variables initialized and nothing run yet.
  """
  graph = tf.Graph()
  with graph.as_default(), scope():
    loss = make_loss()
    global_step = v1.train.get_or_create_global_step()
    train_op = make_train_op(loss, global_step)
    init = v1.global_variables_initializer()
    trainable = len(v1.trainable_variables())
  session = v1.Session(graph=graph, config=config or session_config())
  session.run(init)
  return Step(graph, session, train_op, global_step, trainable, init)



def side_by_side(contenders: Dict[str, Step], reference: str, seconds: float,
                 smoke: bool) -> Tuple[dict, Dict[str, timing.Ratio], tuple]:
  """Times `contenders` in interleaved rounds; prints and returns the ratios.

  Returns:
    The rounds (`timing.interleaved`), each other contender's ratio to
    `reference`, and the load average at the start and at the end.
  """
  load_start = os.getloadavg()[0]
  rounds = timing.interleaved({name: step.run
                               for name, step in contenders.items()},
                              seconds,
                              min_rounds=1 if smoke else timing.MIN_ROUNDS)
  load = (load_start, os.getloadavg()[0])
  print(f"{len(rounds[reference])} interleaved rounds; median step "
        f"({reference}) {timing.step_seconds(rounds, reference) * 1e3:.3f} ms")
  ratios = {name: timing.ratio(rounds, name, reference)
            for name in contenders if name != reference}
  for name, r in ratios.items():
    print(f"  {name:9s}/ {reference}: median {r.median:.4f} (quartiles "
          f"{r.low:.4f}-{r.high:.4f}; 95% CI of the median {r.ci_low:.4f}-"
          f"{r.ci_high:.4f})")
  return rounds, ratios, load


def close_clean(contenders: Dict[str, Step]) -> None:
  """Closes every Session, after checking that every step was applied.

  Raises:
    RuntimeError: If a contender skipped a step (the timing needs clean ones).
  """
  for name, step in contenders.items():
    if step.steps_applied() != step.runs:
      raise RuntimeError(f"{name}: {step.runs - step.steps_applied()} steps "
                         "were skipped; the benchmark needs clean steps")
    step.close()
