"""The BERT-style demo's picture: two loss-scale managers, step by step.

`plot_runs` draws what `examples/bert_pretraining.py` records for each
manager into one PNG with three panels, one value per micro-step:

1. the loss scale S after the micro-step, each skipped micro-step marked;
2. float16 headroom in bits, `log2(65504 / (S * max|g|))`, from precision
   telemetry (`mp_optimizer.signals.precision()`): how far the largest
   scaled gradient was from float16's largest value. A skipped micro-step
   has none (NaN) and leaves a gap;
3. the training loss (mean of the last 40 micro-steps).

The title is given by the caller (computed from the runs' numbers), and the
results travel with the picture as PNG text metadata.
"""

from typing import Dict

import matplotlib

matplotlib.use("Agg")  # Files only: no display needed.
# pylint: disable=wrong-import-position
from matplotlib import pyplot

from examples import demo_plot

COLORS = {"exponential": "tab:red", "amax": "tab:blue"}


def plot_runs(histories: Dict[str, dict], labels: Dict[str, str], path: str,
              title: str, metadata: Dict[str, str]) -> None:
  """Writes the three-panel PNG of the runs to `path`.

  Args:
    histories: Manager name -> dict of per-micro-step lists `scale`,
      `headroom_bits` (NaN where skipped) and `loss`, and `skipped` (the
      skipped micro-steps, counted from 1).
    labels: Manager name -> its legend label.
    path: Where to write the PNG.
    title: The figure's title.
    metadata: PNG text chunks to store with the picture.
  """
  figure, (scale_axes, headroom_axes, loss_axes) = pyplot.subplots(
      3, 1, figsize=(12, 11), dpi=80, sharex=True)
  for name, history in histories.items():
    steps = range(1, len(history["scale"]) + 1)
    color = COLORS.get(name)
    scale_axes.plot(steps, history["scale"], color=color, linewidth=1.5,
                    label=f"{labels[name]}: {len(history['skipped'])} "
                          "skipped micro-steps (x)")
    scale_axes.plot(history["skipped"],
                    [history["scale"][s - 1] for s in history["skipped"]],
                    linestyle="none", marker="x", color=color, markersize=6)
    headroom_axes.plot(steps, history["headroom_bits"], color=color,
                       linewidth=0.8,
                       label=labels[name])
    loss_axes.plot(steps, demo_plot.smooth(history["loss"], 40),
                   color=color, linewidth=1.5, label=labels[name])
  scale_axes.set(ylabel="loss scale S after the micro-step (log scale)",
                 title="Loss scale; x: a skipped micro-step (inf/NaN "
                       "gradient)")
  scale_axes.set_yscale("log", base=2)
  lowest = min(min(history["scale"]) for history in histories.values())
  scale_axes.set_ylim(bottom=lowest / 16)  # Room for the legend below.
  headroom_axes.axhline(0.0, color="black", linewidth=0.8)
  headroom_axes.set(ylabel="float16 headroom (bits)",
                    title="Precision telemetry: log2(65504 / (S * max|g|)); "
                          "below 0 is an overflow")
  loss_axes.set(xlabel="micro-step", ylabel="training loss (mean of 40)",
                title="Masked-token loss")
  for panel, where in ((scale_axes, "lower right"),
                       (headroom_axes, "upper right"),
                       (loss_axes, "upper right")):
    panel.grid(True, alpha=0.3)
    panel.legend(loc=where)
  figure.suptitle(title, fontsize=12)
  figure.tight_layout()
  figure.savefig(path, metadata=metadata)
  pyplot.close(figure)
