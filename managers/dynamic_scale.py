"""One dynamic loss scale: its settings, how a face stores it, its state.

`ExponentialUpdateLossScaleManager` and TF2's `DynamicLossScale` are two
faces of one scale. Each states its settings in a frozen dataclass here
(`ExponentialSettings`, `DynamicLossScaleSettings`, which translates into
the first), validates its arguments into `ExponentialSettings`, and holds a
`StateMachine`: the variables its `Face` names, made in each graph, and the
update: a lock-free count on the common step and the mutex on the others
(`managers.fast_path`), or the mutex on every step where a finite step
writes more than the count (`managers.transition` computes the next state).
"""

import dataclasses
from typing import Dict, List, Mapping, Optional

import tensorflow as tf

from mp_optimizer._internal import per_graph
from mp_optimizer._internal import validation
from mp_optimizer.managers import base
from mp_optimizer.managers import fast_path
from mp_optimizer.managers import floor
from mp_optimizer.managers import transition


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
                                           transition.HYSTERESIS_MODES),
        fail_at_floor_after=validation.check_optional_step_count(
            "fail_at_floor_after", self.fail_at_floor_after))


@dataclasses.dataclass(frozen=True)
class DynamicLossScaleSettings:
  """`DynamicLossScale`'s settings and their defaults.

  TF's three, then the keyword-only ones, whose defaults are those of
  `ExponentialUpdateLossScaleManager`.
  """
  initial_loss_scale: float = 2**15
  increment_period: int = 2000
  multiplier: float = 2.0
  min_loss_scale: float = ExponentialSettings.min_loss_scale
  max_loss_scale: Optional[float] = ExponentialSettings.max_loss_scale
  fail_at_floor_after: Optional[int] = ExponentialSettings.fail_at_floor_after

  def as_exponential(self) -> ExponentialSettings:
    """The same scale as the exponential manager's settings."""
    return ExponentialSettings(
        self.initial_loss_scale, self.increment_period,
        decr_every_n_nan_or_inf=1, incr_ratio=self.multiplier,
        decr_ratio=1.0 / self.multiplier, min_loss_scale=self.min_loss_scale,
        max_loss_scale=self.max_loss_scale,
        fail_at_floor_after=self.fail_at_floor_after)

  @classmethod
  def of(cls, settings: ExponentialSettings) -> "DynamicLossScaleSettings":
    """The inverse of `as_exponential`."""
    return cls(settings.init_loss_scale, settings.incr_every_n_steps,
               settings.incr_ratio, min_loss_scale=settings.min_loss_scale,
               max_loss_scale=settings.max_loss_scale,
               fail_at_floor_after=settings.fail_at_floor_after)


# How TF names and stores the state, and names the arguments in messages.
TF_FACE = Face(scale_name="current_loss_scale", good_steps_name="good_steps",
               bad_steps_name=None, counter_dtype=tf.int64,
               shrink_by_dividing=True)
TF_NAMES = {"init_loss_scale": "initial_loss_scale",
            "incr_every_n_steps": "increment_period",
            "incr_ratio": "multiplier"}


class StateMachine:
  """One dynamic scale: its variables in each graph and its update.

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

    mutex = self._state.mutex(api)
    if fast_path.enabled(self.policy, variables.good_steps,
                         fail_after is not None):
      with tf.name_scope("loss_scale_update"):
        return fast_path.write_step(
            self.policy, variables, finite_grads,
            lambda build: mutex.run(build, after=[finite_grads]))

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
      return mutex.run(locked, after=[finite_grads])


def machine_setting(name: str) -> property:
  """A read-only property: setting `name` of the manager's `StateMachine`."""
  return property(lambda self: getattr(self._machine.settings, name))
