"""`python hvd_matmul_probe.py OUT_DIR`: the compared model's first matmul.

Writes OUT_DIR/matmul.npz: `tf.matmul` of rank 0's float16 batch and the
initial float16 weights of `hvd_compare_worker` ("float16"), and the same
operands multiplied in float32 and rounded to float16 once, as that
script's model does ("float32_sum"). Run by each TensorFlow version's
interpreter to show which kernel differs between them.
"""

import os
import sys

import numpy as np
import tensorflow as tf

from tests.workers import hvd_compare_worker
from tests.workers import replicated


def main(out_dir: str) -> None:
  tf.compat.v1.disable_eager_execution()
  x, _ = replicated.replica_data(0)
  operands = [tf.cast(t, tf.float16) for t in (x, replicated.INITIAL_W)]
  fetches = {
      "float16": tf.matmul(*operands),
      "float32_sum": hvd_compare_worker.float16_matmul(*operands),
  }
  with tf.compat.v1.Session() as sess:
    np.savez(os.path.join(out_dir, "matmul.npz"), **sess.run(fetches))


if __name__ == "__main__":
  main(*sys.argv[1:])
