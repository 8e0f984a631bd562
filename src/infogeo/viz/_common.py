"""Shared helpers of the plotting functions."""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np
from matplotlib.figure import Figure

from .. import backend as B


def to_np(a: Any) -> np.ndarray:
    return np.asarray(B.to_numpy(a), dtype=float)


def new_axes(ncols: int = 1, ax: Any = None, size: Tuple[float, float] = (5.0, 4.2)):
    """A fresh figure with ``ncols`` axes, or the figure of a given axes."""
    if ax is not None:
        axes = list(np.atleast_1d(ax))
        if len(axes) != ncols:
            raise ValueError(f"expected {ncols} axes, got {len(axes)}")
        return axes[0].figure, axes
    fig = Figure(figsize=(size[0] * ncols, size[1]), layout="constrained")
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def as_points(p: Any, dim: int) -> list:
    """One point or a sequence of points (list / 2-D array) as a list of numpy points of shape (dim,)."""
    arr = np.asarray(B.to_numpy(p) if not isinstance(p, (list, tuple)) else [to_np(q) for q in p], dtype=float)
    if arr.ndim == 1:
        arr = arr[None]
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise ValueError(f"expected a point of shape ({dim},) or a list of them, got shape {arr.shape}")
    return [row for row in arr]


def check_coords(coords: Sequence[int], dim: int) -> Tuple[int, int]:
    i, j = (int(c) for c in coords)
    if dim < 2:
        raise ValueError("a 2-D picture needs a manifold of dimension >= 2")
    if not (0 <= i < dim and 0 <= j < dim and i != j):
        raise ValueError(f"coords must be two distinct coordinate indices in [0, {dim}), got {tuple(coords)}")
    return i, j


def coord_labels(M: Any, coords: Tuple[int, int], labels: Optional[Sequence[str]]) -> Tuple[str, str]:
    if labels is not None:
        return tuple(labels)  # type: ignore[return-value]
    names = getattr(M, "coordinate_names", None)
    if names is not None and len(names) == M.dim:
        return names[coords[0]], names[coords[1]]
    return f"$x_{{{coords[0]}}}$", f"$x_{{{coords[1]}}}$"
