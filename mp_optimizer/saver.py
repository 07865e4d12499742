"""`Saver`: a `tf.compat.v1.train.Saver` that continues runs without scale state.

A default `tf.compat.v1.train.Saver` restores every variable it saves with
one `RestoreV2` op over all their keys, and that op fails as a whole when
one key is absent (`NotFoundError: Key bad_steps not found in checkpoint`).
Saving and restoring are built from the same list, so no entry of that list
can be saved yet optional on restore: a loss-scaled graph cannot restore a
float32 run's checkpoint through a default Saver, whatever the scale state's
own saveable does. This subclass saves exactly what a default Saver saves
(same keys, same files) and decides in Python, before it restores, whether
the checkpoint holds the loss-scale state:

```
restore(sess, path):
    absent = scale-state keys the checkpoint at `path` lacks
    if not absent: the default Saver's restore
    elif each absent key is there under another variable scope:
        NotFoundError naming the key found and the fix
    else: restore everything else; the scale state takes the manager's
          initial values; one warning line names what was absent
```

The "everything else" restore and the reset are built with the Saver, so
they also work in a finalized graph (`MonitoredTrainingSession`,
`Estimator`).
"""

from typing import Dict, List, Optional

import tensorflow as tf

from mp_optimizer._internal import tracking


def _key(variable) -> str:
  """The key a name-based Saver writes for `variable` (its op's name)."""
  return variable.op.name


class Saver(tf.compat.v1.train.Saver):
  """A `tf.compat.v1.train.Saver` that restores checkpoints without scale state.

  It saves exactly what `tf.compat.v1.train.Saver` saves and takes the same
  arguments. On restore, a checkpoint that lacks the loss-scale state (a
  float32 run's, or one written with another manager) restores everything it
  holds, and the scale state starts from the manager's initial values, with
  one warning line saying so. A checkpoint that holds the state under another
  variable scope (contrib's `scope/loss_scale`) raises `NotFoundError` naming
  the key found and the fix. The scale state is that of every
  `LossScaleOptimizer` whose train op was built in the graph before the Saver
  is built (when it is made, or at `build()` with `defer_build=True`).

  Example:

  ```python
  saver = mp_optimizer.Saver()  # instead of tf.compat.v1.train.Saver()
  saver.restore(sess, float32_checkpoint)
  ```

  With `MonitoredTrainingSession` or an `Estimator`, pass it in a
  `tf.compat.v1.train.Scaffold(saver=mp_optimizer.Saver(sharded=True))`.

  Args:
    var_list: As for `tf.compat.v1.train.Saver`: None (every saveable
      variable), a list of variables or a dict from checkpoint key to
      variable.
    **kwargs: The other arguments of `tf.compat.v1.train.Saver`, by keyword.
  """

  def __init__(self, var_list=None, **kwargs):
    self._given_var_list = var_list
    self._given_saver_def = kwargs.get("saver_def") is not None
    self._options = {key: kwargs[key] for key in (
        "reshape", "sharded", "restore_sequentially", "write_version")
                     if key in kwargs}
    self._scale_keys: Dict[str, tf.Variable] = {}
    self._rest: Optional[tf.compat.v1.train.Saver] = None
    self._reset: Optional[tf.Operation] = None
    super().__init__(var_list=var_list, **kwargs)

  def build(self) -> None:
    """Builds the Saver's ops, and the restore without the scale state."""
    super().build()
    if self._reset is not None or self._given_saver_def:
      return
    state = {id(v) for v in tracking.recorded_state(tracking.SCALE_STATE)}
    given = self._given_var_list
    if isinstance(given, dict):
      self._scale_keys = {k: v for k, v in given.items() if id(v) in state}
      rest = {k: v for k, v in given.items() if id(v) not in state}
    else:
      if given is None:  # What TF's Saver takes then.
        given = tf.compat.v1.global_variables() + tf.compat.v1.get_collection(
            tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS)
      self._scale_keys = {_key(v): v for v in given if id(v) in state}
      rest = [v for v in given if id(v) not in state]
    if not self._scale_keys:
      return
    self._rest = tf.compat.v1.train.Saver(
        var_list=rest, allow_empty=True, name="save_without_scale_state",
        **self._options)
    self._reset = tf.group([v.initializer for v in self._scale_keys.values()],
                           name="reset_scale_state")

  def restore(self, sess: tf.compat.v1.Session, save_path: str) -> None:
    """Restores `save_path`, with or without the loss-scale state.

    Raises:
      tf.errors.NotFoundError: If the checkpoint holds the scale state under
        another variable scope, or lacks another variable of this Saver.
      ValueError: As `tf.compat.v1.train.Saver.restore`.
    """
    absent = self._absent_scale_keys(save_path)
    if not absent:
      super().restore(sess, save_path)
      return
    _raise_if_scoped_elsewhere(absent, save_path)
    self._rest.restore(sess, save_path)
    sess.run(self._reset)
    tf.compat.v1.logging.warning(
        "Checkpoint %s holds no loss-scale state (no %s): the run continues "
        "from it, and the scale state starts from the manager's initial "
        "values.", save_path, ", ".join(absent))

  def _absent_scale_keys(self, save_path: Optional[str]) -> List[str]:
    """Scale-state keys `save_path` lacks ([] to restore as TF's Saver)."""
    if self._rest is None or save_path is None:
      return []
    try:
      reader = tf.train.load_checkpoint(save_path)
    except (tf.errors.NotFoundError, ValueError):
      return []  # TF's restore gives its own error.
    if reader.has_tensor(tracking.OBJECT_GRAPH_KEY):
      return []  # Object-based: TF's Saver maps it by its object graph.
    return sorted(key for key in self._scale_keys
                  if not reader.has_tensor(key))


def _raise_if_scoped_elsewhere(absent: List[str], save_path: str) -> None:
  """Raises if every absent key is in the checkpoint under one other scope.

  contrib made its state where the manager was built, so a checkpoint can
  hold `optimizers/loss_scale` where this graph has `loss_scale`.

  Raises:
    tf.errors.NotFoundError: Naming the keys found and the fix.
  """
  keys = set(tf.train.load_checkpoint(save_path).get_variable_to_shape_map())
  found = {}
  for key in absent:
    name = key.rsplit("/", 1)[-1]
    matches = sorted(k for k in keys if k == name or k.endswith("/" + name))
    if not matches:
      return
    found[key] = matches[0]
  scopes = {found[key][:-len(key.rsplit("/", 1)[-1])] for key in absent}
  if len(scopes) != 1:
    return
  pairs = ", ".join(f"`{key}` as `{found[key]}`" for key in absent)
  scope = found[absent[0]].rpartition("/")[0]
  where = (f'inside `tf.compat.v1.variable_scope("{scope}")`' if scope else
           "outside any variable scope")
  raise tf.errors.NotFoundError(
      None, None,
      f"Key {absent[0]} not found in checkpoint {save_path}, which holds "
      f"the loss-scale state under another variable scope: {pairs}. Build "
      f"the manager {where}, in the graph, so its variables get those names, "
      f"or give the Saver a var_list that maps those keys to the manager's "
      f"variables (manager.variables()).")
