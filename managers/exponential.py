"""`ExponentialUpdateLossScaleManager`: the one dynamic loss-scale state machine.

Every dynamic scale in this project (contrib's, and TF2's `DynamicLossScale`
in `managers.loss_scale`) holds a `StateMachine`, built from
`ExponentialSettings` and a `Face` (names, counter dtype, how it shrinks).
"""

import dataclasses
from typing import Any, Dict, List, Mapping, Optional

import tensorflow as tf

from mp_optimizer._internal import per_graph
from mp_optimizer._internal import validation
from mp_optimizer.managers import base
from mp_optimizer.managers import floor
from mp_optimizer.managers import transition

HYSTERESIS_MODES = transition.HYSTERESIS_MODES


@dataclasses.dataclass(frozen=True)
class Face:
  """How one public face names and stores the one state machine.

  Attributes:
    scale_name: Name (and checkpoint key) of the float32 scale variable.
    good_steps_name: Name of the good-step counter.
    bad_steps_name: Name of the overflow counter; None when it is always 0
      (one overflow per shrink) and not stored.
    counter_dtype: The counters' dtype as that face's checkpoints hold it.
    shrink_by_dividing: Shrink as `scale / incr_ratio` (TF) instead of
      `scale * decr_ratio` (contrib).
  """
  scale_name: str
  good_steps_name: str
  bad_steps_name: Optional[str]
  counter_dtype: tf.DType
  shrink_by_dividing: bool


CONTRIB_FACE = Face(scale_name="loss_scale", good_steps_name="good_steps",
                    bad_steps_name="bad_steps", counter_dtype=tf.int32,
                    shrink_by_dividing=False)


@dataclasses.dataclass(frozen=True)
class ExponentialSettings:
  """`ExponentialUpdateLossScaleManager`'s settings and their defaults.

  One field per constructor argument, same name, same default (the
  arguments are described in the class docstring). The last four are
  keyword-only in the constructor.
  """
  init_loss_scale: float
  incr_every_n_steps: int
  decr_every_n_nan_or_inf: int = 2
  incr_ratio: float = 2
  decr_ratio: float = 0.8
  min_loss_scale: float = 1
  max_loss_scale: Optional[float] = None
  hysteresis: str = "contrib"
  fail_at_floor_after: Optional[int] = None

  def checked(self, names: Optional[Mapping[str, str]] = None
              ) -> "ExponentialSettings":
    """Returns the settings validated, numbers as Python floats and ints.

    Args:
      names: How the calling face names `init_loss_scale`,
        `incr_every_n_steps` and `incr_ratio` in its messages (default:
        these names).

    Raises:
      TypeError, ValueError: As the class docstring of
        `ExponentialUpdateLossScaleManager` lists.
    """
    name = dict(names or {}).get
    init_name = name("init_loss_scale", "init_loss_scale")
    low = validation.check_scale_floor("min_loss_scale", self.min_loss_scale)
    high = (None if self.max_loss_scale is None else
            validation.check_at_least("max_loss_scale", self.max_loss_scale,
                                      low))
    init = validation.check_at_least(init_name, self.init_loss_scale, low)
    if high is not None and init > high:
      raise ValueError(f"`{init_name}` must be <= max_loss_scale "
                       f"({high:g}), got {init:g}.")
    return ExponentialSettings(
        init_loss_scale=init,
        incr_every_n_steps=validation.check_step_count(
            name("incr_every_n_steps", "incr_every_n_steps"),
            self.incr_every_n_steps),
        decr_every_n_nan_or_inf=validation.check_step_count(
            "decr_every_n_nan_or_inf", self.decr_every_n_nan_or_inf),
        incr_ratio=validation.check_greater(
            name("incr_ratio", "incr_ratio"), self.incr_ratio, 1.0),
        decr_ratio=validation.check_open_unit("decr_ratio", self.decr_ratio),
        min_loss_scale=low, max_loss_scale=high,
        hysteresis=validation.check_choice("hysteresis", self.hysteresis,
                                           HYSTERESIS_MODES),
        fail_at_floor_after=validation.check_optional_step_count(
            "fail_at_floor_after", self.fail_at_floor_after))


class StateMachine:
  """One dynamic scale: its variables in each graph and its locked update.

  A manager holds one, made from its validated settings and its face; the
  manager is the owner its variables are tracked under in checkpoints.

  Attributes:
    settings: The validated `ExponentialSettings`.
    face: The `Face` it names and stores its state by.
    policy: The `transition.Policy` its update follows.
  """

  def __init__(self, owner: base.LossScaleManager,
               settings: ExponentialSettings, face: Face):
    self.settings, self.face = settings, face
    self.policy = transition.Policy(
        incr_every=settings.incr_every_n_steps,
        decr_every=settings.decr_every_n_nan_or_inf,
        incr_ratio=settings.incr_ratio, decr_ratio=settings.decr_ratio,
        shrink_by_dividing=face.shrink_by_dividing,
        min_scale=settings.min_loss_scale, max_scale=settings.max_loss_scale,
        hysteresis=settings.hysteresis)
    self._owner_name = type(owner).__name__
    specs = [per_graph.VariableSpec(face.scale_name, tf.float32,
                                    settings.init_loss_scale),
             per_graph.VariableSpec(face.good_steps_name, face.counter_dtype,
                                    0)]
    if face.bad_steps_name is not None:
      specs.append(per_graph.VariableSpec(face.bad_steps_name,
                                          face.counter_dtype, 0))
    if settings.fail_at_floor_after is not None:  # Old files restore.
      specs.append(per_graph.VariableSpec(floor.STREAK, tf.int64, 0,
                                          checkpointed=False))
    self._state = per_graph.PerGraphVariables(owner, specs)
    self._state.create_if_graph()

  def scale(self) -> tf.Variable:
    """The current graph's float32 scale variable (made on first use)."""
    state = self._state.get(f"{self._owner_name}.get_loss_scale")
    return state[self.face.scale_name]

  def variables(self) -> List[tf.Variable]:
    """The state variables made so far in the current graph."""
    return list(self._state.existing().values())

  def adopt(self, variables: Dict[str, tf.Variable]) -> None:
    """Takes over existing state variables by name (see `managers.get`)."""
    self._state.adopt(variables)

  def update(self, finite_grads: tf.Tensor) -> tf.Operation:
    """The op of one step (see `ExponentialUpdateLossScaleManager`)."""
    base.check_finite_flag(finite_grads)
    api = f"{self._owner_name}.update_loss_scale"
    state = self._state.get(api)
    face, fail_after = self.face, self.settings.fail_at_floor_after
    variables = transition.Variables(state[face.scale_name],
                                     state[face.good_steps_name],
                                     state.get(face.bad_steps_name))

    def locked() -> List[tf.Operation]:
      if fail_after is None:
        return [transition.write_next_state(self.policy, variables,
                                            finite_grads)]
      scale = variables.scale.read_value()  # The floor guard reads it.
      return [floor.guard(state[floor.STREAK], scale, finite_grads,
                          self.policy.min_scale, fail_after),
              transition.write_next_state(self.policy, variables,
                                          finite_grads, scale)]

    with tf.name_scope("loss_scale_update"):
      return self._state.mutex(api).run(locked, after=[finite_grads])


# The keyword-only settings: a repr shows each only when not its default.
KEYWORD_ONLY = ("min_loss_scale", "max_loss_scale", "hysteresis",
                "fail_at_floor_after")


def machine_setting(name: str) -> property:
  """A read-only property: setting `name` of the manager's `StateMachine`."""
  return property(lambda self: getattr(self._machine.settings, name))


_SETTINGS = ExponentialSettings  # Its class attributes are the defaults.


class ExponentialUpdateLossScaleManager(base.LossScaleManager):
  """Grows the scale after a run of clean steps, shrinks it on overflow.

  A scale that is too small lets float16 gradients underflow; one that is too
  large makes them overflow to Inf. This manager searches between the two, once
  per step, exactly as `tf.contrib.mixed_precision` did (with
  `hysteresis="contrib"`, the default); see `managers.transition` for the
  algorithm as pseudocode and the two other `hysteresis` modes.

  Each update holds the state's mutex (`_internal.per_graph.Mutex`), so
  concurrent updates (two train ops, threads, asynchronous workers) end as
  if run one after the other.

  State: float32 `loss_scale`, int32 `good_steps`, int32 `bad_steps`: the
  names and dtypes contrib wrote to checkpoints. They are non-trainable
  resource variables in GLOBAL_VARIABLES. Built while a graph is the default,
  the manager makes them in its constructor under the current name scope, as
  contrib did (`optimizers/loss_scale` inside `variable_scope("optimizers")`);
  built with no graph, it makes them at the root name scope of each graph
  that asks for the scale, the first time it asks. Step counts are compared
  in int64; an int32 counter stops at 2**31 - 1, so with this face a period
  longer than that never completes (it means "never").

  Example:

  ```python
  manager = managers.ExponentialUpdateLossScaleManager(
      init_loss_scale=2**15, incr_every_n_steps=2000)
  opt = mp_optimizer.LossScaleOptimizer(
      tf.compat.v1.train.AdamOptimizer(1e-3), manager)
  ```

  Args:
    init_loss_scale: Starting scale, finite, >= `min_loss_scale` and <=
      `max_loss_scale`.
    incr_every_n_steps: Positive whole number up to 2**63 - 1 (an int, or a
      float such as 2000.0): finite steps in a row before growing.
    decr_every_n_nan_or_inf: Positive whole number up to 2**63 - 1:
      overflows before shrinking.
    incr_ratio: Growth factor, > 1.
    decr_ratio: Shrink factor, 0 < decr_ratio < 1.
    min_loss_scale: Keyword-only floor, from 2**-126 (float32's smallest
      normal number) to 2**126 (default 1, contrib's floor). Values below 1
      are allowed when asked for explicitly. Outside that range the scale
      would end at 0 (flushed) or above 2**126 and skip every step.
    max_loss_scale: Keyword-only ceiling, None (only float32's range) or a
      finite number >= `init_loss_scale`.
    hysteresis: Keyword-only, one of "contrib", "consecutive", "sticky".
    fail_at_floor_after: Keyword-only, None (default) or a positive whole
      number N up to 2**63 - 1: after N non-finite steps in a row at
      `min_loss_scale` (the scale those steps used), the step fails with
      `tf.errors.InvalidArgumentError` saying what to look for, instead of
      skipping steps forever. Counted in a variable
      `nonfinite_steps_at_min_scale` that is in no collection (not
      checkpointed, never reset by an initializer).

  Raises:
    TypeError: If a number is not a Python/NumPy int or float (bools
      rejected), or `hysteresis` is not a str.
    ValueError: If a value is outside the range given above, or a step count
      has a fractional part.
  """

  def __init__(
      self, init_loss_scale: float, incr_every_n_steps: int,
      decr_every_n_nan_or_inf: int = _SETTINGS.decr_every_n_nan_or_inf,
      incr_ratio: float = _SETTINGS.incr_ratio,
      decr_ratio: float = _SETTINGS.decr_ratio, *,
      min_loss_scale: float = _SETTINGS.min_loss_scale,
      max_loss_scale: Optional[float] = _SETTINGS.max_loss_scale,
      hysteresis: str = _SETTINGS.hysteresis,
      fail_at_floor_after: Optional[int] = _SETTINGS.fail_at_floor_after):
    self._settings = ExponentialSettings(
        init_loss_scale, incr_every_n_steps, decr_every_n_nan_or_inf,
        incr_ratio, decr_ratio, min_loss_scale=min_loss_scale,
        max_loss_scale=max_loss_scale, hysteresis=hysteresis,
        fail_at_floor_after=fail_at_floor_after).checked()
    self._machine = StateMachine(self, self._settings, CONTRIB_FACE)

  init_loss_scale = machine_setting("init_loss_scale")
  incr_every_n_steps = machine_setting("incr_every_n_steps")
  decr_every_n_nan_or_inf = machine_setting("decr_every_n_nan_or_inf")
  incr_ratio = machine_setting("incr_ratio")
  decr_ratio = machine_setting("decr_ratio")
  min_loss_scale = machine_setting("min_loss_scale")
  max_loss_scale = machine_setting("max_loss_scale")
  hysteresis = machine_setting("hysteresis")
  fail_at_floor_after = machine_setting("fail_at_floor_after")

  @property
  def dynamic(self) -> bool:
    return True

  def get_loss_scale(self) -> tf.Variable:
    """Returns the current graph's float32 scale variable.

    As contrib did, the variable itself: one object per graph, which reads
    the current scale wherever it is used as a tensor and can be fetched
    after the graph is finalized (in a hook).
    """
    return self._machine.scale()

  def variables(self) -> List[tf.Variable]:
    return self._machine.variables()

  def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
    """Returns the op that moves the state machine one step.

    While it holds the state's mutex, the op reads `good_steps`, and the
    rest of the state only on a step that changes more than that counter,
    and writes the next state (`managers.transition.write_next_state`): any
    number of updates running at once end as if run one after the other, in
    some order. The floor guard (`fail_at_floor_after`) runs in the same
    locked section and sees the scale before this step's own change, i.e.
    the scale this step used.

    Args:
      finite_grads: Scalar bool tensor: were all of this step's gradients
        finite? Under `tf.distribute` it must be the same on every replica and
        this must be called in cross-replica context.

    Returns:
      One op that updates the scale and counters.
    """
    return self._machine.update(finite_grads)

  def __repr__(self) -> str:
    settings = self._settings
    return base.call_repr(type(self).__name__, keywords={
        "init_loss_scale": settings.init_loss_scale,
        "incr_every_n_steps": settings.incr_every_n_steps,
        "decr_every_n_nan_or_inf": settings.decr_every_n_nan_or_inf,
        "incr_ratio": settings.incr_ratio, "decr_ratio": settings.decr_ratio,
        **base.non_default(settings, KEYWORD_ONLY)})
