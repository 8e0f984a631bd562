"""Shared helpers of the plotting functions."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from .. import backend as B


def to_np(a: Any) -> np.ndarray:
    return np.asarray(B.to_numpy(a), dtype=float)


def axes_for(ax: Any = None, ncols: int = 1, size: Tuple[float, float] = (5.0, 4.2)) -> List[Any]:
    """The ``ncols`` axes to draw on, as pyplot would choose them.

    The given axes (one, or a sequence of ``ncols``); otherwise the current axes
    (``plt.gca()``) for one panel, or ``ncols`` panels side by side in the current figure
    (in a new figure if the current one already holds axes).  Drawing through pyplot is
    what makes ``plt.savefig()`` and ``plt.show()`` work after a call.
    """
    if ax is not None:
        axes = list(np.ravel(np.asarray(ax, dtype=object)))
        if len(axes) != ncols or not all(hasattr(a, "plot") and hasattr(a, "figure") for a in axes):
            raise ValueError(f"ax must be {'a matplotlib Axes' if ncols == 1 else f'{ncols} matplotlib Axes'}, "
                             f"got {ax!r}")
        return axes
    import matplotlib.pyplot as plt
    if ncols == 1:
        if not plt.gcf().axes:  # a figure of our own: lay it out so that an outside legend fits
            plt.gcf().set_layout_engine("constrained")
        return [plt.gca()]
    fig = plt.gcf()
    if fig.axes:
        fig = plt.figure()
    width, height = fig.get_size_inches()
    if width < size[0] * ncols:  # widen a default-sized figure for the panels; never shrink a chosen size
        fig.set_size_inches(size[0] * ncols, max(height, size[1]))
    fig.set_layout_engine("constrained")
    return list(np.ravel(fig.subplots(1, ncols)))


def finish(axes: List[Any], data: Any, title: Optional[str] = None):
    """Attach the numbers behind the picture (``ax.infogeo_data``) and return what the caller gets.

    One panel: its Axes; several: an array of them (as ``plt.subplots``).  ``title`` becomes
    the figure's suptitle for several panels and the axes title for one.
    """
    for axis in axes:
        axis.infogeo_data = data
    if len(axes) == 1:
        if title:
            axes[0].set_title(title)
        return axes[0]
    if title:
        axes[0].figure.suptitle(title)
    return np.array(axes, dtype=object)


def legend_outside(axis: Any) -> None:
    """A legend to the right of the axes, clear of everything drawn inside them."""
    if axis.get_legend_handles_labels()[0]:
        axis.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize="small",
                    frameon=False)


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
