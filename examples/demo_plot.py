"""The digits demo's picture: loss, loss scale with skipped steps, accuracy.

`plot_runs` draws the histories `examples/digits_demo.py` records into one
PNG with three panels side by side:

1. training loss per step of every run (log scale, so a stall is visible);
2. the loss scale of the dynamically scaled run per step, with each skipped
   step (non-finite gradients, update not applied) marked;
3. test accuracy of every run at each evaluation step.
"""

from typing import Dict, Sequence

import matplotlib

matplotlib.use("Agg")  # Files only: no display needed.
from matplotlib import pyplot  # pylint: disable=wrong-import-position

COLORS = {"fp32": "tab:blue", "fp16": "tab:red",
          "fp16 + loss scaling": "tab:green"}


def _smooth(values: Sequence[float], window: int) -> list:
  """Trailing mean over `window` values (the first ones average fewer)."""
  out, total = [], 0.0
  for i, value in enumerate(values):
    total += value
    if i >= window:
      total -= values[i - window]
    out.append(total / min(i + 1, window))
  return out


def plot_runs(histories: Dict[str, dict], path: str, title: str) -> None:
  """Writes the three-panel PNG of the demo's runs to `path`.

  Args:
    histories: Run name -> dict with lists `loss` and `scale` (one value per
      step, step 1 first), `skipped` (the steps whose update was skipped),
      and `eval_steps` / `accuracy` (test accuracy at those steps).
    path: Where to write the PNG.
    title: The figure's title.
  """
  figure, (loss_axes, scale_axes, accuracy_axes) = pyplot.subplots(
      1, 3, figsize=(15, 4.6), dpi=100)
  for name, history in histories.items():
    steps = range(1, len(history["loss"]) + 1)
    color = COLORS.get(name)
    loss_axes.plot(steps, history["loss"], color=color, alpha=0.2,
                   linewidth=0.8)
    loss_axes.plot(steps, _smooth(history["loss"], 25), color=color,
                   linewidth=1.8, label=name)
    accuracy_axes.plot(history["eval_steps"],
                       [100 * a for a in history["accuracy"]], color=color,
                       marker="o", markersize=3, linewidth=1.8, label=name)
  loss_axes.set(yscale="log", xlabel="step",
                ylabel="training loss (cross-entropy, log scale)",
                title="Loss (faint: every step; bold: mean of 25)")
  loss_axes.legend()

  scaled = histories["fp16 + loss scaling"]
  steps = range(1, len(scaled["scale"]) + 1)
  scale_axes.plot(steps, scaled["scale"], color=COLORS["fp16 + loss scaling"],
                  linewidth=1.8, label="loss scale S")
  scale_axes.plot(
      scaled["skipped"], [scaled["scale"][s - 1] for s in scaled["skipped"]],
      linestyle="none", marker="x", color="black", markersize=7,
      label=f"skipped step ({len(scaled['skipped'])}): inf/NaN gradient")
  scale_axes.set(xlabel="step", ylabel="loss scale S (log scale)",
                 title="Dynamic loss scale of fp16 + loss scaling")
  scale_axes.set_yscale("log", base=2)
  low, high = scale_axes.get_ylim()
  scale_axes.set_ylim(low, high * 4)  # Room for the legend above the line.
  scale_axes.legend(loc="upper right")

  accuracy_axes.set(xlabel="step", ylabel="test accuracy (%)",
                    title="Test accuracy (360 held-out images)")
  accuracy_axes.legend(loc="upper left")
  for axes in (loss_axes, scale_axes, accuracy_axes):
    axes.grid(True, which="major", alpha=0.3)
  figure.suptitle(title, fontsize=13)
  figure.tight_layout()
  figure.savefig(path)
  pyplot.close(figure)
