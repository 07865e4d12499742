"""Gradient accumulation over micro-steps, on unscaled gradients.

With `gradient_accumulation_steps=N`, each finite micro-step adds its
*unscaled* gradients, divided by N, to float32 accumulators (float64 for
float64 variables); after the N-th finite micro-step the inner optimizer
applies what they hold (the mean) once, `global_step` advances once, and the
accumulators reset:

```
on a finite micro-step:      accumulators += grads / N; micro_steps += 1
    if micro_steps == N:     apply(accumulators); accumulators = 0;
                             micro_steps = 0
on a non-finite micro-step:  nothing (the micro-batch is dropped; the window
                             waits for N finite micro-batches)
```

Because what is stored is already divided by that micro-step's loss scale, a
scale that changes inside a window (growth, or a shrink after an overflow)
changes nothing in the sum. Dividing before adding keeps every accumulator
within the range of the finite gradients it holds, so the mean applied is
finite by construction (a sum of N large finite gradients could overflow). Dropping an overflowed micro-batch, rather than
the whole window, keeps every applied update a mean of exactly N finite
micro-batches and wastes only the bad one.

Sparse gradients are added into the accumulator with `scatter_add` (only
their rows are touched); the window's mean is applied as a dense gradient.
Under `tf.distribute` each replica accumulates its own gradients in an
ON_READ variable, and the inner optimizer sums the replicas' means once per
window, so cross-replica traffic happens once per window.

The state is optimizer state: GLOBAL variables (checkpointed, listed by
`LossScaleOptimizer.variables()`) named `gradient_accumulation/<variable>`
and `gradient_accumulation/micro_steps`, made once per train op (a second
train op of the same optimizer gets `gradient_accumulation_1/...`).
"""

from typing import (Callable, Dict, List, NamedTuple, Optional, Sequence,
                    Tuple, Union)

import tensorflow as tf

from mp_optimizer._internal import keyed
from mp_optimizer._internal import tensors
from mp_optimizer._internal import tracking
from mp_optimizer._internal import validation
from mp_optimizer._step import gate

_PREFIX = "gradient_accumulation"


class Window(NamedTuple):
  """One train op's window: its pairs, accumulators and micro-step counter."""
  pairs: tensors.GradsAndVars  # The pairs with a gradient.
  accumulators: Dict[object, tf.Variable]  # By variable ref.
  counter: tf.Variable


# (mean (gradient, variable) pairs, gate pivot) -> the inner apply's op.
Apply = Callable[[tensors.GradsAndVars, tf.Tensor], tf.Operation]


def check_steps(steps: Optional[int]) -> Optional[int]:
  """Validates `gradient_accumulation_steps`: None, or an int >= 2."""
  if steps is None:
    return None
  return validation.check_positive_int("gradient_accumulation_steps", steps,
                                        minimum=2)


def _accumulator_dtype(var: tf.Variable) -> tf.DType:
  return tf.float64 if var.dtype.base_dtype == tf.float64 else tf.float32


class GradientAccumulator:
  """Accumulators and micro-step counters of one optimizer, per graph.

  Each `apply_gradients` (each train op) gets its own window: accumulators
  for its variables and a micro-step counter. The first train op's state is
  named `gradient_accumulation/...`, a second one's
  `gradient_accumulation_1/...`, so an optimizer minimized twice (over the
  same or different `var_list`s) keeps two windows that never mix.
  """

  def __init__(self, owner: tracking.Trackable, steps: int):
    self._owner = owner
    self._steps = steps
    # Per graph, each train op's (accumulators by variable ref, counter).
    self._windows: keyed.PerGraph[list] = keyed.PerGraph(list)

  def variables(self) -> List[tf.Variable]:
    """The current graph's accumulators and counters (none before use)."""
    graph = tensors.outer_graph()
    windows = (None if graph is None else self._windows.peek(graph)) or []
    return [variable for accumulators, counter in windows
            for variable in (*accumulators.values(), counter)]

  def _new_window(self, variables: Sequence[tf.Variable]
                  ) -> Tuple[Dict[object, tf.Variable], tf.Variable]:
    """Creates one train op's state (in cross-replica context)."""
    with tf.init_scope():
      graph = tf.compat.v1.get_default_graph()
      windows = self._windows.of(graph)
      prefix = _PREFIX if not windows else f"{_PREFIX}_{len(windows)}"
      accumulators = {}
      with graph.name_scope(None):
        for var in variables:
          with tf.device(var.device):  # Next to the variable it serves.
            accumulators[var.ref()] = tf.compat.v1.Variable(
                tf.zeros(var.shape, _accumulator_dtype(var)),
                name=f"{prefix}/{var.op.name}", trainable=False,
                use_resource=True,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM)
          tracking.track(self._owner, accumulators[var.ref()],
                          f"{prefix}/{var.op.name}")
        counter = tf.compat.v1.Variable(
            0, dtype=tf.int64, name=f"{prefix}/micro_steps", trainable=False,
            use_resource=True,
            synchronization=tf.VariableSynchronization.ON_WRITE,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        tracking.track(self._owner, counter, f"{prefix}/micro_steps")
      windows.append((accumulators, counter))
      return accumulators, counter

  def open_window(self, grads_and_vars: tensors.GradsAndVars) -> Window:
    """Makes one train op's window (its accumulators and counter) now.

    Called in cross-replica context before the step's gate: distributed
    variables must not be created inside control flow.

    Args:
      grads_and_vars: Unscaled (gradient, variable) pairs of the micro-step;
        per-replica values under a strategy. Pairs without a gradient get no
        accumulator.
    """
    pairs = [(g, v) for g, v in grads_and_vars if g is not None]
    accumulators, counter = self._new_window([v for _, v in pairs])
    self._latest_counter = counter
    return Window(pairs, accumulators, counter)

  def micro_step(self, strategy: tf.distribute.Strategy, window: Window,
                 apply: Apply, pivot: tf.Tensor) -> tf.Operation:
    """Builds one finite micro-step (see the module docstring) behind `pivot`.

    Args:
      strategy: The strategy whose cross-replica context this runs in.
      window: The train op's window (`open_window`).
      apply: Called with the window's mean (gradient, variable) pairs (again
        per replica) and the window gate's pivot, to build the inner
        optimizer's update op.
      pivot: The step gate's pivot; replica functions re-enter it
        (`gate.on_each_replica`).

    Returns:
      The micro-step's op.
    """
    return self._build(strategy, window.pairs, window.accumulators,
                       window.counter, apply, pivot)

  def count_after(self, done: tf.Operation) -> tf.Tensor:
    """The newest window's micro-step count once `done` ran (0: applied).

    Read through a handle taken outside any control flow: inside a v1
    `tf.cond` a plain read would reuse the capture of the counter that the
    gated side made, which is dead on a skipped step. Under a strategy
    (cross-replica context, where a mirrored variable has no one handle) the
    first local copy is read: every copy holds the same count.
    """
    counter = tf.distribute.get_strategy().experimental_local_results(
        self._latest_counter)[0]
    with tf.init_scope():
      handle = tf.identity(counter.handle, name="micro_steps_handle")
    with tf.control_dependencies([done]):
      return tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.int64)

  def _build(self, strategy: tf.distribute.Strategy,
             pairs: tensors.GradsAndVars,
             accumulators: Dict[object, tf.Variable], counter: tf.Variable,
             apply: Apply, pivot: tf.Tensor) -> tf.Operation:

    def add(*grads: tensors.Gradient) -> tf.Operation:
      ops = []
      for grad, (_, var) in zip(grads, pairs):
        acc = accumulators[var.ref()]
        share = tf.cast(tensors.values(grad), acc.dtype) / self._steps
        if isinstance(grad, tf.IndexedSlices):
          # A per-replica (ON_READ) accumulator has no scatter_add in replica
          # context; its handle there is this replica's own component's.
          ops.append(tf.raw_ops.ResourceScatterAdd(
              resource=acc.handle, indices=grad.indices, updates=share))
        else:
          ops.append(acc.assign_add(share, read_value=False))
      return tf.group(*ops)

    added = gate.on_each_replica(strategy, pivot, add,
                                     tuple(g for g, _ in pairs))
    with tf.control_dependencies([strategy.group(added)]):
      counted = counter.assign_add(1, read_value=False)
    with tf.control_dependencies([counted]):
      count = counter.read_value()

    def apply_window(window_pivot: tf.Tensor) -> tf.Operation:
      # Each replica's accumulator is read and reset through its own
      # component, named explicitly: an ON_READ variable read in replica
      # context under control flow returned a stale value on the first of two
      # MirroredStrategy replicas (seen on TF 2.21 inside tf.cond).
      parts = [strategy.experimental_local_results(accumulators[v.ref()])
               for _, v in pairs]

      def mean(components: Sequence[tf.Variable], var: tf.Variable
               ) -> Union[tf.Tensor, tf.distribute.DistributedValues]:
        local = [tf.cast(c.read_value(), var.dtype.base_dtype)
                 for c in components]
        # Replica ids are global; this worker holds len(local) of them, in
        # order, so the id modulo that count picks the local component.
        return strategy.experimental_distribute_values_from_function(
            lambda context: local[context.replica_id_in_sync_group % len(local)])

      means = [mean(components, v) for components, (_, v) in zip(parts, pairs)]
      applied = apply(list(zip(means, [v for _, v in pairs])), window_pivot)
      with tf.control_dependencies([applied]):
        return tf.group(*[c.assign(tf.zeros_like(c), read_value=False)
                          for components in parts for c in components],
                        counter.assign(0, read_value=False))

    return gate.gate(count >= self._steps, apply_window, tf.no_op)
