"""Pictures of what the layers hold: a probe report's per-layer accuracy and mix weights, and a trained head's mixes.

matplotlib comes with the ``demo`` extra; it is imported when a picture is drawn, with its non-interactive backend.
The file's suffix (``.png``, ``.svg``, ``.pdf``) picks the format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .layer_probe import ProbeReport, layer_names

PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def _pyplot():
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError("drawing needs matplotlib: pip install 'elmo-hf[demo]'") from error
    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def _checked_path(path: str | Path) -> Path:
    path = Path(path)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise ValueError(f"{path}: a picture's name must end in one of {', '.join(PLOT_SUFFIXES)}")
    return path


def _short_names(count: int) -> list[str]:
    return [name.split(" (")[1].rstrip(")") for name in layer_names(count)]


def plot_probe_report(report: ProbeReport, path: str | Path, title: str | None = None) -> Path:
    """Two panels: each layer's probe accuracy (the mix's and the baselines as lines), and the mix's softmax(w)."""
    path = _checked_path(path)
    pyplot = _pyplot()
    count = len(report.layers)
    names = _short_names(count)
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(8, 3.2))
    left.bar(range(count), [100 * layer["accuracy"] for layer in report.layers], color="tab:blue")
    left.axhline(100 * report.mix["accuracy"], color="tab:orange", label=f"scalar mix {100 * report.mix['accuracy']:.1f}%")
    for (name, value), style in zip(report.baselines.items(), (":", "--")):
        left.axhline(100 * value, color="gray", linestyle=style, label=f"{name.replace('_', ' ')} {100 * value:.1f}%")
    low = min([100 * layer["accuracy"] for layer in report.layers] + [100 * v for v in report.baselines.values()])
    left.set_ylim(max(0.0, low - 5), 100)
    left.set_xticks(range(count), names)
    left.set_ylabel("test accuracy (%)")
    left.legend(fontsize=7, loc="lower right")
    right.bar(range(count), report.mix["layer_weights"], color="tab:orange")
    right.set_xticks(range(count), names)
    right.set_ylabel("softmax(w)")
    right.set_title(f"learned mix (gamma {report.mix['gamma']:.2f})", fontsize=9)
    figure.suptitle(title or f"linear probes, {len(report.tags)} tags, {report.test_words:,} test words", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
    return path


def plot_mix_weights(mixes: dict[str, dict[str, Any]], path: str | Path, title: str | None = None) -> Path:
    """A trained head's mixes (``model.mix_layer_weights()``: ``{position: {"layer_weights", "gamma"}}``) as bars."""
    path = _checked_path(path)
    if not mixes:
        raise ValueError("the model has no learned mixes (a head with task_use_elmo=False): nothing to draw")
    pyplot = _pyplot()
    count = len(next(iter(mixes.values()))["layer_weights"])
    width = 0.8 / len(mixes)
    figure, axis = pyplot.subplots(figsize=(4.5, 3.2))
    for offset, (position, mix) in enumerate(mixes.items()):
        axis.bar([layer + width * offset for layer in range(count)], mix["layer_weights"], width=width,
                 label=f"{position} mix (gamma {mix['gamma']:.2f})")
    axis.set_xticks([layer + width * (len(mixes) - 1) / 2 for layer in range(count)], _short_names(count))
    axis.set_ylabel("softmax(w)")
    axis.set_title(title or "learned ELMo layer weights", fontsize=9)
    axis.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
    return path


__all__ = ["PLOT_SUFFIXES", "plot_mix_weights", "plot_probe_report"]
