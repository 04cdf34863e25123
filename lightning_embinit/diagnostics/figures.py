"""Figures of the diagnostics (matplotlib, Agg canvas; no pyplot state, nothing global changed).

Figures are built as ``matplotlib.figure.Figure`` objects on an Agg canvas, so they render the
same under any backend the user has selected and never open a window; :func:`close` releases one
(TensorBoard's ``add_figure`` closes what it renders).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

MAX_HISTOGRAM_VALUES = 200_000


def new_figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def close(figure: Figure) -> None:
    """Release a figure's memory (its artists and canvas)."""
    figure.clear()


def sample_values(matrix: torch.Tensor, limit: int = MAX_HISTOGRAM_VALUES, seed: int = 0) -> torch.Tensor:
    """At most ``limit`` elements of ``matrix`` (float32, CPU), drawn with a private generator."""
    flat = matrix.detach().reshape(-1)
    if flat.numel() > limit:
        index = torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(seed))[:limit]
        flat = flat[index.to(flat.device)]
    return flat.to("cpu", torch.float32)


def value_histogram(
    token_values: torch.Tensor, positional_values: torch.Tensor | None, *, title: str, bins: int = 100
) -> Figure:
    """Histogram of the scaled token values (s · X) against the positional values (P) on shared bins ([K])."""
    tokens = sample_values(token_values)
    figure = new_figure(6.4, 3.6)
    axes = figure.add_subplot()
    series = [("token values s·X", tokens, "tab:blue")]
    if positional_values is not None:
        series.append(("positional values P", sample_values(positional_values), "tab:orange"))
    low = min(float(values.min()) for _, values, _ in series)
    high = max(float(values.max()) for _, values, _ in series)
    edges = torch.linspace(low, high if high > low else low + 1.0, bins + 1).numpy()
    for label, values, color in series:
        axes.hist(
            values.numpy(),
            bins=edges,
            density=True,
            alpha=0.55,
            color=color,
            label=f"{label} (std {float(values.std(unbiased=False)):.3g})",
        )
    axes.set_yscale("log")
    axes.set_xlabel("value")
    axes.set_ylabel("density")
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8)
    return figure


def pca_2d(vectors: torch.Tensor) -> torch.Tensor:
    """(K, 2) coordinates of ``vectors`` on their two leading principal axes (exact SVD, sign fixed)."""
    centred = vectors.detach().to("cpu", torch.float64)
    centred = centred - centred.mean(dim=0)
    _, _, right = torch.linalg.svd(centred, full_matrices=False)
    axes = right[:2].T
    signs = torch.sign(axes.gather(0, axes.abs().argmax(dim=0, keepdim=True)))
    return centred @ (axes * torch.where(signs == 0, 1.0, signs))


def pca_scatter(panels: Mapping[str, torch.Tensor], words: Sequence[str], *, title: str) -> Figure:
    """One 2-D PCA scatter per panel of the same words' vectors, labelled ([KB] Fig. 2)."""
    figure = new_figure(4.2 * len(panels), 4.0)
    for column, (name, vectors) in enumerate(panels.items(), start=1):
        axes = figure.add_subplot(1, len(panels), column)
        points = pca_2d(vectors).numpy()
        axes.scatter(points[:, 0], points[:, 1], s=12, color="tab:blue")
        for word, (x, y) in zip(words, points):
            axes.annotate(word, (x, y), fontsize=7, xytext=(2, 2), textcoords="offset points")
        axes.set_title(name, fontsize=9)
        axes.set_xticks([])
        axes.set_yticks([])
    figure.suptitle(title, fontsize=10)
    return figure


def learning_curves(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]],
    *,
    threshold: float,
    metric: str,
    crossings: Mapping[str, float | None] | None = None,
) -> Figure:
    """Raw (faint) and smoothed curves against training examples, the threshold, and each first crossing
    ([KB] Table 2)."""
    figure = new_figure(6.4, 3.8)
    axes = figure.add_subplot()
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
    for (name, (examples, raw, smoothed)), color in zip(curves.items(), colors * len(curves)):
        axes.plot(examples, raw, color=color, alpha=0.25, linewidth=1)
        axes.plot(examples, smoothed, color=color, linewidth=1.6, label=name)
        crossing = (crossings or {}).get(name)
        if crossing is not None:
            axes.axvline(crossing, color=color, linestyle=":", linewidth=1)
    axes.axhline(threshold, color="grey", linestyle="--", linewidth=1, label=f"threshold {threshold:g}")
    axes.set_xlabel("training examples seen")
    axes.set_ylabel(metric)
    axes.legend(fontsize=8)
    return figure
