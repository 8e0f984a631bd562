r"""Solver trajectories over cost contours, in several views side by side.

A *view* maps chart points to a 2-D picture: the chart itself, another chart
of the same manifold (e.g. natural vs mean parameters), or the output space of
a pullback metric :math:`z = f(x)` (as for Gauss-Newton, Martens 2020: input space and output
space).  Each view may carry a cost written in its own coordinates for the
contour lines.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple

import numpy as np

from .. import backend as B
from ._common import axes_for, finish, legend_outside, to_np


@dataclass
class View:
    """One panel of :func:`plot_trajectories`.

    Attributes
    ----------
    title : str
    map : callable, optional
        Chart point (shape ``(dim,)``) to the 2 plotted numbers; default: the first two coordinates.
    cost : callable, optional
        Function of the 2 plotted numbers (array of shape ``(2,)``) whose contours are drawn.
    xlim, ylim : (float, float), optional
        Window; default: the trajectories' extent, padded.
    labels : (str, str)
        Axis labels.
    log_levels : bool
        Log-spaced contour levels (for positive costs spanning decades).
    """

    title: str = "chart"
    map: Optional[Callable[[np.ndarray], Any]] = None
    cost: Optional[Callable[[Any], Any]] = None
    xlim: Optional[Tuple[float, float]] = None
    ylim: Optional[Tuple[float, float]] = None
    labels: Tuple[str, str] = ("$x_1$", "$x_2$")
    log_levels: bool = False


def _path(run: Any) -> np.ndarray:
    if hasattr(run, "path") and callable(run.path):
        return run.path()
    arr = np.asarray(run, dtype=float)
    if arr.ndim != 2:
        raise ValueError(f"a trajectory must be an OptimizeResult or an (n, dim) array, got shape {arr.shape}")
    return arr


def _contour(axis: Any, view: View, xlim, ylim, grid: int, levels: int) -> None:
    gx, gy = np.meshgrid(np.linspace(*xlim, grid), np.linspace(*ylim, grid))
    Z = np.full(gx.shape, np.nan)
    for a in range(grid):
        for b in range(grid):
            try:
                Z[a, b] = float(to_np(view.cost(B.array([gx[a, b], gy[a, b]]))))
            except (ValueError, ArithmeticError):
                pass
    Z[~np.isfinite(Z)] = np.nan
    if np.all(np.isnan(Z)):
        return
    if view.log_levels:
        zmin = np.nanmin(Z)
        shift = 0.0 if zmin > 0 else (1e-3 - zmin)
        lv = np.geomspace(np.nanmin(Z) + shift, np.nanmax(Z) + shift, levels) - shift
    else:
        lv = np.linspace(np.nanmin(Z), np.nanmax(Z), levels)
    axis.contour(gx, gy, Z, levels=np.unique(lv), colors="0.65", linewidths=0.7)


def _outcome(run: Any) -> str:
    """``", failed"``-style suffix of a legend entry for a result that did not converge (none for arrays)."""
    from ..solvers.result import OUTCOMES
    status = run.get("status") if isinstance(run, dict) else None
    return "" if status in (None, 0) else f", {OUTCOMES.get(status, f'status {status}')}"


def plot_trajectories(runs: Mapping[str, Any], cost: Optional[Callable[[Any], Any]] = None, *,
                      views: Optional[Sequence[View]] = None, output_map: Optional[Callable[[Any], Any]] = None,
                      output_cost: Optional[Callable[[Any], Any]] = None, optimum: Any = None,
                      grid: int = 120, levels: int = 20, log_levels: bool = False, ax: Any = None,
                      title: Optional[str] = None):
    r"""Draw solver histories over cost contours, one panel per view.

    Parameters
    ----------
    runs : mapping label -> OptimizeResult or (n, dim) array
        The trajectories (``result.path()`` is used for results).  The legend gives each run's
        iteration count and, for a result that did not converge, its outcome
        (``"vanilla (29 it., failed)"``), so a run stopped at a boundary is not read as a finished one.
    cost : callable, optional
        Cost on the chart, for the contours of the default first view.
    views : sequence of View, optional
        Panels; default: the chart (with ``cost``), plus the output space when
        ``output_map`` is given.
    output_map, output_cost : callable, optional
        For pullback metrics: :math:`z = f(x)` and the output loss :math:`\mathcal L(z)`.
    optimum : point, optional
        Marked with a star in every view.
    log_levels : bool
        Log-spaced contour levels in the default views.
    ax : matplotlib Axes or sequence of them (one per view), optional
        Where to draw; default: the current axes for one view, else new panels in the current figure.

    Returns
    -------
    matplotlib.axes.Axes, or numpy.ndarray of them (one per view)
        With ``ax.infogeo_data``: ``{view title: {label: (n, 2) array}}``.
    """
    if not runs:
        raise ValueError("runs is empty: pass {label: OptimizeResult or (n, dim) array}")
    if views is None:
        views = [View("input space", cost=cost, log_levels=log_levels)]
        if output_map is not None:
            views.append(View("output space", map=output_map, cost=output_cost, labels=("$z_1$", "$z_2$"),
                              log_levels=log_levels))
    elif output_map is not None:
        raise ValueError("give either views or output_map, not both")
    axes = axes_for(ax, len(views))
    paths = {label: _path(run) for label, run in runs.items()}
    data: dict = {}
    for axis, view in zip(axes, views):
        fmap = view.map or (lambda x: np.asarray(x)[:2])
        mapped = {label: np.stack([to_np(fmap(B.array(x))) for x in P]) for label, P in paths.items()}
        data[view.title] = mapped
        allp = np.vstack(list(mapped.values()))
        lo, hi = allp.min(0), allp.max(0)
        pad = 0.15 * np.maximum(hi - lo, 1e-3)
        xlim = view.xlim or (lo[0] - pad[0], hi[0] + pad[0])
        ylim = view.ylim or (lo[1] - pad[1], hi[1] + pad[1])
        if view.cost is not None:
            _contour(axis, view, xlim, ylim, grid, levels)
        for k, (label, P) in enumerate(mapped.items()):
            axis.plot(P[:, 0], P[:, 1], "-", color=f"C{k}", lw=1.3, marker=".", ms=3,
                      label=f"{label} ({len(P) - 1} it.{_outcome(runs[label])})")
            axis.plot(P[0, 0], P[0, 1], "o", color=f"C{k}", ms=5)
        if optimum is not None:
            o = to_np(fmap(B.array(to_np(optimum))))
            axis.plot(o[0], o[1], "k*", ms=10, label="optimum")
        axis.set_xlim(*xlim)
        axis.set_ylim(*ylim)
        axis.set_xlabel(view.labels[0])
        axis.set_ylabel(view.labels[1])
        axis.set_title(view.title)
    legend_outside(axes[-1])
    return finish(axes, data, title)
