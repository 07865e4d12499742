"""fp32 vs fp16 vs fp16 with dynamic loss scaling, on scikit-learn's digits.

Three runs of the same TF1-style graph (same data order, same initial
weights): variables are float32 in every run; the forward and backward pass run
in float32, float16, or float16 with `mp_optimizer.LossScaleOptimizer`. Every
`--report_every` steps a line shows the test accuracy and how much of the
gradient underflowed: entries that are exactly zero in the run's gradient
although the float32 gradient at the same weights and batch, through the same
active ReLU units, is not (as a share of entries, and of the float32
gradient's L1 mass).

TensorBoard summaries go to `--logdir` (default runs/digits):
    .venv/tf2.21/bin/tensorboard --logdir runs/digits

Run with `make demo`, or: python examples/digits_demo.py --steps 2000
"""

import argparse
import os
import time

import numpy as np
from sklearn import datasets
from sklearn import model_selection
import tensorflow as tf

import managers
import mp_optimizer

v1 = tf.compat.v1
RUNS = (("fp32", tf.float32, False), ("fp16", tf.float16, False),
        ("fp16 + loss scaling", tf.float16, True))


def load_data():
  """Returns (x_train, x_test, y_train, y_test); pixels scaled to [0, 1]."""
  x, y = datasets.load_digits(return_X_y=True)
  return model_selection.train_test_split(
      (x / 16.0).astype(np.float32), y, test_size=0.2, random_state=0,
      stratify=y)


def mlp(x, weights, dtype, masks=None):
  """Logits of a ReLU MLP computed in `dtype` from float32 `weights`.

  Returns the logits and each hidden layer's ReLU mask (1 where active). With
  `masks` given, those masks replace the ReLUs, so a float32 copy of the net
  follows exactly the units the float16 net kept alive.
  """
  h, active = tf.cast(x, dtype), []
  for i, (w, b) in enumerate(weights):
    h = tf.matmul(h, tf.cast(w, dtype)) + tf.cast(b, dtype)
    if i < len(weights) - 1:
      mask = (tf.cast(h > 0, dtype) if masks is None
              else tf.cast(masks[i], dtype))
      active.append(tf.stop_gradient(mask))
      h = h * active[-1]
  return tf.cast(h, tf.float32), active


def build(dtype, scaled, args):
  """Builds one run's graph; returns the tensors and ops it needs."""
  x = v1.placeholder(tf.float32, [None, 64], name="x")
  y = v1.placeholder(tf.int64, [None], name="y")
  rng = np.random.RandomState(args.seed)
  sizes = [64] + [args.width] * args.depth + [10]
  weights = [(v1.get_variable(f"w{i}", initializer=(
      args.init_std * rng.randn(n_in, n_out)).astype(np.float32)),
              v1.get_variable(f"b{i}", initializer=np.zeros(n_out, np.float32)))
             for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:]))]

  def loss_of(logits):
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

  logits, masks = mlp(x, weights, dtype)
  loss = loss_of(logits)
  global_step = v1.train.get_or_create_global_step()
  learning_rate = v1.train.cosine_decay(args.learning_rate, global_step,
                                        args.steps)
  opt = v1.train.MomentumOptimizer(learning_rate, 0.9)
  if scaled:
    opt = mp_optimizer.LossScaleOptimizer(
        opt, managers.ExponentialUpdateLossScaleManager(
            init_loss_scale=2**15, incr_every_n_steps=200))
  grads_and_vars = opt.compute_gradients(loss)
  train_op = opt.apply_gradients(grads_and_vars, global_step=global_step)

  # Diagnostics: the float32 gradient at the same weights through the same
  # active units; where it is non-zero and the run's gradient is exactly zero,
  # the backward pass underflowed.
  grads = [g for g, _ in grads_and_vars]
  grads32 = tf.gradients(loss_of(mlp(x, weights, tf.float32, masks)[0]),
                         [v for _, v in grads_and_vars])
  underflowed = [tf.logical_and(tf.equal(g, 0.0), tf.not_equal(g32, 0.0))
                 for g, g32 in zip(grads, grads32)]

  def total(tensors):
    return tf.add_n([tf.reduce_sum(t) for t in tensors])

  lost = total(tf.cast(u, tf.float32) for u in underflowed)
  nonzero = total(tf.cast(tf.not_equal(g32, 0.0), tf.float32) for g32 in grads32)
  lost_mass = total(tf.abs(g32) * tf.cast(u, tf.float32)
                    for u, g32 in zip(underflowed, grads32))
  mass = total(tf.abs(g32) for g32 in grads32)
  scale = opt.get_loss_scale() if scaled else tf.constant(1.0)
  accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y),
                                    tf.float32))
  summaries = v1.summary.merge([v1.summary.scalar("loss", loss),
                                v1.summary.scalar("loss_scale", scale)])
  return dict(x=x, y=y, train_op=train_op, global_step=global_step,
              underflow=(lost / tf.maximum(nonzero, 1.0),
                         lost_mass / tf.maximum(mass, 1e-30)), scale=scale,
              accuracy=accuracy, summaries=summaries)


def train(name, dtype, scaled, data, args):
  """Trains one run; returns its row of the final table."""
  x_train, x_test, y_train, y_test = data
  with tf.Graph().as_default() as graph:
    t = build(dtype, scaled, args)
    writer = v1.summary.FileWriter(
        os.path.join(args.logdir, name.replace(" + ", "_").replace(" ", "_")),
        graph)
    batches = np.random.RandomState(args.seed).randint(
        0, len(x_train), size=(args.steps, args.batch_size))
    shares = []
    with v1.Session(graph=graph) as sess:
      sess.run(v1.global_variables_initializer())
      for step, batch in enumerate(batches, start=1):
        feed = {t["x"]: x_train[batch], t["y"]: y_train[batch]}
        _, summary = sess.run([t["train_op"], t["summaries"]], feed)
        writer.add_summary(summary, step)
        if step % args.report_every == 0 or step == args.steps:
          share, mass_share = sess.run(
              t["underflow"], {t["x"]: x_train[:512], t["y"]: y_train[:512]})
          shares.append((share, mass_share))
          accuracy, scale = sess.run((t["accuracy"], t["scale"]),
                                     {t["x"]: x_test, t["y"]: y_test})
          print(f"  [{name:>19}] step {step:5d}  test acc {accuracy:6.2%}  "
                f"loss scale {scale:8.0f}  underflowed grads {share:6.2%} "
                f"(mass {mass_share:.1e})", flush=True)
      skipped = args.steps - sess.run(t["global_step"])
    writer.close()
  share, mass_share = np.mean(shares, axis=0)
  return dict(name=name, accuracy=accuracy, skipped=skipped, scale=scale,
              underflow=share, mass=mass_share)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=3000)
  parser.add_argument("--batch_size", type=int, default=256)
  parser.add_argument("--depth", type=int, default=3, help="hidden layers")
  parser.add_argument("--width", type=int, default=128)
  parser.add_argument("--init_std", type=float, default=0.02)
  parser.add_argument("--learning_rate", type=float, default=0.05)
  parser.add_argument("--report_every", type=int, default=500)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--logdir", default=os.path.join("runs", "digits"))
  args = parser.parse_args()
  tf.config.experimental.enable_op_determinism()
  data = load_data()
  print(f"digits: {len(data[0])} train / {len(data[1])} test images; "
        f"{args.depth}x{args.width} ReLU MLP, momentum SGD with cosine decay, "
        f"{args.steps} steps of {args.batch_size}")
  rows = []
  for name, dtype, scaled in RUNS:
    start = time.time()
    rows.append(train(name, dtype, scaled, data, args))
    print(f"  [{name:>19}] done in {time.time() - start:.0f}s", flush=True)
  print()
  print("| run                 | test accuracy | skipped steps | final loss scale "
        "| underflowed gradient entries | gradient mass lost |")
  print("|---------------------|---------------|---------------|------------------"
        "|------------------------------|--------------------|")
  for r in rows:
    scale = f"{r['scale']:.0f}" if r["name"].endswith("scaling") else "n/a"
    print(f"| {r['name']:<19} | {r['accuracy']:>13.2%} | {r['skipped']:>13d} "
          f"| {scale:>16} | {r['underflow']:>28.2%} | {r['mass']:>18.2e} |")
  print("\nUnderflow columns: mean over the reports above of the share of the "
        "float32 gradient's\nnon-zero entries (and of its L1 mass) that came "
        "out exactly zero in the run.")
  print(f"\nTensorBoard: tensorboard --logdir {args.logdir}")


if __name__ == "__main__":
  main()
