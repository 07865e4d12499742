"""Soak: 20,000 steps with random overflow (`make soak`; skipped otherwise).

Checks that the scale never leaves its bounds and stays finite, that the graph
does not grow (it is finalized before the loop), and that memory stays flat:
the process's resident set after the last step is compared with the one after
a warm-up of 2,000 steps.
"""

import os

from absl.testing import absltest
import numpy as np
import pytest
import tensorflow as tf

from mp_optimizer import managers
import mp_optimizer
from tests.support import models

v1 = tf.compat.v1
STEPS, WARMUP, LOW, HIGH = 20_000, 2_000, 4.0, 2.0**14
RSS_GROWTH_LIMIT = 16 * 2**20  # bytes


def _rss() -> int:
  with open("/proc/self/statm") as statm:
    return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.soak
class SoakTest(absltest.TestCase):

  def test_twenty_thousand_steps(self):
    rng = np.random.RandomState(7)
    with tf.Graph().as_default() as graph:
      poison = models.poison_input()
      manager = managers.ExponentialUpdateLossScaleManager(
          2**10, 25, min_loss_scale=LOW, max_loss_scale=HIGH)
      opt = mp_optimizer.LossScaleOptimizer(models.OPTIMIZERS["adam"](),
                                            manager)
      train_op = opt.minimize(models.dense_loss(poison),
                              global_step=v1.train.get_or_create_global_step())
      fetches = [train_op, opt.get_loss_scale(), mp_optimizer.skipped_steps()]
      init = v1.global_variables_initializer()
      graph.finalize()
      ops = len(graph.get_operations())
      scales, injected = [], 0
      with v1.Session(graph=graph) as sess:
        sess.run(init)
        for step in range(STEPS):
          # 3% overflow, with a burst of 50% that drives the scale to its floor.
          poisoned = rng.rand() < (0.5 if 10_000 <= step < 10_500 else 0.03)
          injected += poisoned
          _, scale, skipped = sess.run(fetches,
                                       {poison: np.inf} if poisoned else {})
          scales.append(scale)
          if step + 1 == WARMUP:
            rss_warm = _rss()
        rss_end = _rss()
        skipped = sess.run(fetches[2])
    scales = np.array(scales)
    print(f"soak: {STEPS} steps, {injected} overflows injected, {skipped} "
          f"skipped, scale in [{scales.min():g}, {scales.max():g}], "
          f"{ops} ops (unchanged), RSS {rss_warm / 2**20:.1f} -> "
          f"{rss_end / 2**20:.1f} MiB")
    self.assertEqual(skipped, injected)
    self.assertTrue(np.all(np.isfinite(scales)))
    self.assertGreaterEqual(scales.min(), LOW)
    self.assertLessEqual(scales.max(), HIGH)
    self.assertEqual(len(graph.get_operations()), ops)
    self.assertLess(rss_end - rss_warm, RSS_GROWTH_LIMIT)
