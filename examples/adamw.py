"""AdamW for `tf.compat.v1` graphs, in the style of BERT's optimizer.

Adam without bias correction, with weight decay decoupled from the gradient
(added to the update, not to the loss), and no decay for LayerNorm and bias
variables, as the original BERT pre-training code did.
"""

import re
from typing import Sequence

import tensorflow as tf

v1 = tf.compat.v1


class AdamWeightDecay(v1.train.Optimizer):
  """Adam with decoupled weight decay, as a regular v1 Optimizer subclass.

  Example:

  ```python
  opt = AdamWeightDecay(1e-4, weight_decay_rate=0.01)
  train_op = opt.minimize(loss)
  ```
  """

  def __init__(self, learning_rate: float, weight_decay_rate: float = 0.01,
               beta_1: float = 0.9, beta_2: float = 0.999,
               epsilon: float = 1e-6,
               exclude_from_weight_decay: Sequence[str] = ("LayerNorm",
                                                           "bias"),
               name: str = "AdamWeightDecay"):
    super().__init__(use_locking=False, name=name)
    self._hyper = dict(lr=learning_rate, decay=weight_decay_rate, b1=beta_1,
                       b2=beta_2, eps=epsilon)
    self._exclude = tuple(exclude_from_weight_decay)

  def _decays(self, var) -> bool:
    return not any(re.search(p, var.op.name) for p in self._exclude)

  def _create_slots(self, var_list):
    for var in var_list:
      self._zeros_slot(var, "m", self._name)
      self._zeros_slot(var, "v", self._name)

  def _resource_apply_dense(self, grad, var):
    h = {k: tf.cast(x, var.dtype.base_dtype) for k, x in self._hyper.items()}
    m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
    m_new = h["b1"] * m + (1.0 - h["b1"]) * grad
    v_new = h["b2"] * v + (1.0 - h["b2"]) * tf.square(grad)
    update = m_new / (tf.sqrt(v_new) + h["eps"])
    if self._decays(var):
      update += h["decay"] * var
    return tf.group(m.assign(m_new), v.assign(v_new),
                    var.assign_sub(h["lr"] * update))

  def _resource_apply_sparse(self, grad, var, indices):
    # Rows absent from the slices still decay and move their moments, as in
    # BERT's dense implementation.
    dense = tf.tensor_scatter_nd_add(tf.zeros_like(var), indices[:, None],
                                     grad)
    return self._resource_apply_dense(dense, var)
