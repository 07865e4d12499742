"""The digits demo's picture: loss, accuracy, loss scale, zero gradients.

`plot_runs` draws the histories `examples/digits_demo.py` records into one
PNG with four panels:

1. training loss per step of every run (log scale);
2. test accuracy (%) of every run at each evaluation step;
3. the loss scale of the dynamically scaled run per step, with each skipped
   step (non-finite gradients, update not applied) marked;
4. the share (%) of gradient entries that were exactly zero in the run's
   16-bit type (float16, bfloat16) but not in float32, per run at each
   evaluation step.

The title is given by the caller (computed from the run's numbers), and the
results travel with the picture as PNG text metadata.
"""

from typing import Dict, Sequence

import matplotlib

matplotlib.use("Agg")  # Files only: no display needed.
from matplotlib import pyplot  # pylint: disable=wrong-import-position

SCALED = "fp16 + loss scaling"
COLORS = {"fp32": "tab:blue", "fp16": "tab:red", SCALED: "tab:green",
          "bf16": "tab:purple"}
# fp32 wide and pale under a dashed fp16 + loss scaling: where the two
# coincide, both stay visible.
STYLES = {"fp32": dict(linewidth=4.5, alpha=0.5),
          "fp16": dict(linewidth=1.8),
          SCALED: dict(linewidth=1.8, linestyle="--"),
          "bf16": dict(linewidth=1.8, linestyle=":")}


def smooth(values: Sequence[float], window: int) -> list:
  """Trailing mean over `window` values (the first ones average fewer)."""
  out, total = [], 0.0
  for i, value in enumerate(values):
    total += value
    if i >= window:
      total -= values[i - window]
    out.append(total / min(i + 1, window))
  return out


def _scale_panel(axes, scaled: dict) -> None:
  """The dynamic loss scale per step, skipped steps marked."""
  steps = range(1, len(scaled["scale"]) + 1)
  axes.plot(steps, scaled["scale"], color=COLORS[SCALED], linewidth=1.8,
            label="loss scale S")
  axes.plot(scaled["skipped"],
            [scaled["scale"][s - 1] for s in scaled["skipped"]],
            linestyle="none", marker="x", color="black", markersize=7,
            label=f"skipped step ({len(scaled['skipped'])}): inf/NaN gradient")
  axes.set(xlabel="step", ylabel="loss scale S (log scale)",
           title=f"Dynamic loss scale of {SCALED}")
  axes.set_yscale("log", base=2)
  axes.legend(loc="lower right")


def plot_runs(histories: Dict[str, dict], path: str, title: str,
              metadata: Dict[str, str]) -> None:
  """Writes the four-panel PNG of the demo's runs to `path`.

  Args:
    histories: Run name -> dict with lists `loss` and `scale` (one value per
      step, step 1 first), `skipped` (the steps whose update was skipped),
      and `eval_steps` with `accuracy` and `zeros` (test accuracy and zero
      gradient entries, in %, at those steps).
    path: Where to write the PNG.
    title: The figure's title.
    metadata: PNG text chunks to store with the picture.
  """
  figure, axes = pyplot.subplots(2, 2, figsize=(13, 8.6), dpi=80)
  (loss_axes, accuracy_axes), (scale_axes, zeros_axes) = axes
  for name, history in histories.items():
    steps = range(1, len(history["loss"]) + 1)
    style = dict(STYLES.get(name, {}), color=COLORS.get(name), label=name)
    loss_axes.plot(steps, history["loss"], color=style["color"], alpha=0.15,
                   linewidth=0.8)
    loss_axes.plot(steps, smooth(history["loss"], 25), **style)
    accuracy_axes.plot(history["eval_steps"], history["accuracy"], **style)
    if name != "fp32":
      zeros_axes.plot(history["eval_steps"], history["zeros"], **style)
  loss_axes.set(yscale="log", xlabel="step",
                ylabel="training loss (cross-entropy, log scale)",
                title="Loss (faint: every step; bold: mean of 25)")
  accuracy_axes.set(xlabel="step", ylabel="test accuracy (%)", ylim=(0, 100),
                    title="Test accuracy (360 held-out images), %")
  _scale_panel(scale_axes, histories[SCALED])
  zeros_axes.set(xlabel="step", ylim=(-3, 103),
                 ylabel="gradient entries zero in 16 bits (%)",
                 title="Underflow: gradient entries zero in float16/bfloat16 "
                       "but not in float32, %")
  for panel in (loss_axes, accuracy_axes, zeros_axes):
    panel.legend(loc="center right")
  for panel in axes.flat:
    panel.grid(True, which="major", alpha=0.3)
  figure.suptitle(title, fontsize=12)
  figure.tight_layout()
  figure.savefig(path, metadata=metadata)
  pyplot.close(figure)
