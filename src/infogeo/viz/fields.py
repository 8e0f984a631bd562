r"""Vanilla vs natural gradient as vector fields over a 2-D chart.

At each grid point the vanilla field is :math:`-\nabla f` (the differential's
components read as a vector — what plain gradient descent does) and the
natural field is :math:`-\operatorname{grad} f = -G^{-1}\nabla f`, the metric's
sharp of the differential (Amari 1998; for the independence model in the
charts :math:`\eta` and :math:`\theta`, Malagò et al. 2011).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as np

from .. import backend as B
from ._common import axes_for, coord_labels, finish, to_np

logger = logging.getLogger(__name__)


def plot_gradient_field(M: Any, cost: Callable[[Any], Any], *, xlim: Tuple[float, float],
                        ylim: Tuple[float, float], n: int = 15, step: Optional[float] = None,
                        grid: int = 100, levels: int = 20, ax: Any = None,
                        labels: Optional[Sequence[str]] = None, title: Optional[str] = None):
    r"""Two panels over a 2-D chart: :math:`-\nabla f` and :math:`-G^{-1}\nabla f`, on contours of :math:`f`.

    Parameters
    ----------
    M : Manifold of dimension 2
        Its metric gives the natural gradient.
    cost : callable
        :math:`f`, on chart points.
    xlim, ylim : (float, float)
        The window; points outside the manifold's domain are skipped.
    n : int
        Arrows per axis.
    step : float, optional
        Draw each arrow as :math:`-\lambda\,\mathrm{grad}` with :math:`\lambda` = ``step``
        (a fixed arrow scale); default: arrows normalised to a common length per panel.

    ax : pair of matplotlib Axes, optional
        Where to draw the two panels; default: two new panels in the current figure.

    Returns
    -------
    numpy.ndarray of two matplotlib.axes.Axes
        Each with ``ax.infogeo_data``: ``points`` (m, 2), ``vanilla`` and ``natural`` (m, 2) (the
        descent directions :math:`-\nabla f` and :math:`-G^{-1}\nabla f`).
    """
    if M.dim != 2:
        raise ValueError(f"plot_gradient_field needs a 2-D manifold, got dim {M.dim}")
    axes = axes_for(ax, 2)
    gx, gy = np.meshgrid(np.linspace(*xlim, int(n)), np.linspace(*ylim, int(n)))
    pts, van, nat = [], [], []
    for x_ in np.column_stack([gx.ravel(), gy.ravel()]):
        x = B.array(x_)
        if not M.belongs(x):
            continue
        try:
            df = M.differential(cost, x)
            g = M.metric.sharp(df)
        except ValueError as exc:
            logger.debug("skipping %s: %s", x_, exc)
            continue
        pts.append(x_)
        van.append(-to_np(df.components))
        nat.append(-to_np(g.components))
    pts, van, nat = np.array(pts), np.array(van), np.array(nat)
    cx, cy = np.meshgrid(np.linspace(*xlim, grid), np.linspace(*ylim, grid))
    Z = np.full(cx.shape, np.nan)
    for a in range(grid):
        for b in range(grid):
            x = B.array([cx[a, b], cy[a, b]])
            if M.belongs(x):
                Z[a, b] = float(to_np(cost(x)))
    xl, yl = coord_labels(M, (0, 1), labels)
    for axis, V, name in zip(axes, (van, nat), (r"vanilla $-\nabla f$", r"natural $-G^{-1}\nabla f$")):
        if np.isfinite(Z).any():
            axis.contour(cx, cy, Z, levels=levels, colors="0.7", linewidths=0.7)
        if len(pts):
            if step is None:
                L = np.linalg.norm(V, axis=1, keepdims=True)
                V = V / np.where(L > 0, L, 1.0)
                axis.quiver(pts[:, 0], pts[:, 1], V[:, 0], V[:, 1], color="C0", angles="xy", pivot="tail")
            else:
                axis.quiver(pts[:, 0], pts[:, 1], step * V[:, 0], step * V[:, 1], color="C0",
                            angles="xy", scale_units="xy", scale=1.0)
        axis.set_xlim(*xlim)
        axis.set_ylim(*ylim)
        axis.set_xlabel(xl)
        axis.set_ylabel(yl)
        axis.set_title(name)
    return finish(axes, {"points": pts, "vanilla": van, "natural": nat}, title)
