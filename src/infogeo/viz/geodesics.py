r"""Geodesics: a fan from a point, geodesics between points, distance contours.

The fan shoots geodesics :math:`t \mapsto \exp_p(t\,r\,u_k)` with initial
velocities :math:`u_k` of unit metric norm, so the points at time :math:`t` on
all rays form the geodesic circle of radius :math:`t r` — the distance contours
drawn (exact as long as the geodesics stay minimizing).  ``contours="grid"``
instead evaluates ``M.dist`` on a grid (use it only where distance has a closed
form).  Categorical distributions on three outcomes are drawn on the
probability triangle in barycentric coordinates.
"""
from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

import numpy as np

from .. import backend as B
from ..geometry.vectors import TangentVector
from ._common import as_points, axes_for, check_coords, coord_labels, finish, legend_outside, to_np

logger = logging.getLogger(__name__)

_TRIANGLE = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3.0) / 2.0]])


def barycentric(probs: Any) -> np.ndarray:
    r"""Probabilities :math:`(p_1, p_2, p_3)` (shape ``(..., 3)``) to points of the equilateral triangle."""
    q = np.asarray(probs, dtype=float)
    if q.shape[-1] != 3:
        raise ValueError(f"barycentric coordinates need 3 probabilities, got shape {q.shape}")
    return q @ _TRIANGLE


def _simplex_map(M: Any):
    """Chart points -> triangle, for a family over three outcomes (``M.probs`` gives all probabilities)."""
    probs = getattr(M, "probs", None)
    if callable(probs):
        return lambda pts: barycentric(np.stack([to_np(probs(B.array(x))) for x in np.atleast_2d(pts)]))
    if M.dim == 2:  # assume the chart is the first two probabilities
        return lambda pts: barycentric(np.column_stack([np.atleast_2d(pts), 1 - np.atleast_2d(pts).sum(1)]))
    raise ValueError("simplex=True needs a family over 3 outcomes (with a probs(x) method)")


def plot_geodesics(M: Any, p: Any, q: Any = None, *, n: int = 12, radius: float = 1.0, n_circles: int = 4,
                   circle_rays: int = 120,
                   contours: Optional[str] = "circles", coords: Sequence[int] = (0, 1), simplex: Optional[bool] = None,
                   n_t: int = 60, grid: int = 40, lims: Optional[Sequence[Sequence[float]]] = None, ax: Any = None,
                   labels: Optional[Sequence[str]] = None, title: Optional[str] = None):
    r"""Draw a fan of geodesics from ``p``, geodesics from ``p`` to ``q``, and distance contours.

    Parameters
    ----------
    M : Manifold
        Any metric; geodesics come from ``M.geodesic`` (closed form or ODE).
    p : point
    q : point or sequence of points, optional
        Draw the geodesic from ``p`` to each (by ``M.log``), labelled with its length ``M.dist(p, q)``.
    n : int
        Number of geodesics in the fan (0 for none).
    radius : float
        Metric length of each fan geodesic.
    n_circles : int
        Geodesic circles (distance contours) drawn at radii ``radius * k / n_circles``.
    circle_rays : int
        Geodesics shot (not drawn) to trace each circle: its number of vertices.
    contours : {"circles", "grid", None}
        Distance contours from the fan, from ``M.dist`` on a grid, or none.
    coords : pair of int
        Chart coordinates to draw (a 2-D projection when ``M.dim > 2``).
    simplex : bool, optional
        Draw on the probability triangle; default: when ``M`` is a family on 3 outcomes.
    lims : ((xmin, xmax), (ymin, ymax)), optional
        Window for ``contours="grid"`` (default: around the fan).
    ax : matplotlib Axes, optional
        Where to draw; default: the current axes (``plt.gca()``).

    Returns
    -------
    matplotlib.axes.Axes
        With ``ax.infogeo_data``: ``fan`` (list of (n_t, dim) chart paths), ``velocities``,
        ``circles`` (list of (radius, (n, dim) points)), ``paths_to`` and ``distances`` (to each ``q``).
    """
    if radius <= 0:
        raise ValueError(f"radius must be > 0, got {radius}")
    p0 = as_points(p, M.dim)[0]
    x = B.array(p0)
    M.check_point(x)
    if simplex is None:
        simplex = getattr(M, "k", None) == 3 and callable(getattr(M, "probs", None))
    i, j = check_coords(coords, M.dim)
    if simplex:
        to2d = _simplex_map(M)
    else:
        to2d = lambda pts: np.atleast_2d(pts)[:, [i, j]]  # noqa: E731
    (axis,) = axes_for(ax)
    t = np.linspace(0.0, 1.0, n_t)
    data: dict = {"center": p0, "fan": [], "velocities": [], "circles": [], "paths_to": [], "distances": []}

    def shoot(angle: float, times: np.ndarray):
        """The geodesic of metric length ``radius`` leaving ``p`` at ``angle`` in the drawn plane, at ``times``."""
        u = np.zeros(M.dim)
        u[i], u[j] = np.cos(angle), np.sin(angle)
        v = TangentVector(x, B.array(u), M.chart)
        v = v * (radius / float(to_np(M.metric.norm(v))))
        try:
            return v, to_np(M.geodesic(x, v=v)(times))
        except Exception as exc:  # a geodesic that leaves the domain ends the ray; draw the others
            logger.info("the geodesic at angle %.3g could not be integrated: %s", angle, exc)
            return v, None

    # fan: directions spread evenly in the plane of the two drawn coordinates, unit metric norm
    for k in range(int(n)):
        v, path = shoot(2 * np.pi * k / n, t)
        if path is None:
            continue
        data["fan"].append(path)
        data["velocities"].append(to_np(v.components))
        xy = to2d(path)
        axis.plot(xy[:, 0], xy[:, 1], color="C0", lw=0.9, alpha=0.8, label="geodesics" if not data["fan"][1:] else None)

    if contours == "circles":
        # the circles come from their own, denser set of rays: smooth curves whatever the fan's size
        t_c = np.arange(1, int(n_circles) + 1) / int(n_circles)
        rays = [path for path in (shoot(a, t_c)[1] for a in np.linspace(0, 2 * np.pi, int(circle_rays), endpoint=False))
                if path is not None]
        for c in range(len(t_c) if len(rays) >= 3 else 0):
            ring = np.stack([r[c] for r in rays])
            data["circles"].append((radius * t_c[c], ring))
            xy = to2d(np.vstack([ring, ring[:1]]))
            axis.plot(xy[:, 0], xy[:, 1], color="0.5", lw=0.8, ls="--",
                      label="geodesic circles" if c == 0 else None)
    elif contours == "grid":
        if simplex:
            raise ValueError("contours='grid' is not available on the simplex; use contours='circles'")
        if lims is None:
            allp = np.vstack(data["fan"]) if data["fan"] else p0[None]
            lo, hi = allp[:, [i, j]].min(0), allp[:, [i, j]].max(0)
            pad = 0.1 * (hi - lo + 1e-12)
            lims = ((lo[0] - pad[0], hi[0] + pad[0]), (lo[1] - pad[1], hi[1] + pad[1]))
        gx, gy = np.meshgrid(np.linspace(*lims[0], grid), np.linspace(*lims[1], grid))
        D = np.full(gx.shape, np.nan)
        for a in range(grid):
            for b in range(grid):
                y = p0.copy()
                y[i], y[j] = gx[a, b], gy[a, b]
                if M.belongs(B.array(y)):
                    D[a, b] = float(to_np(M.dist(x, B.array(y))))
        data["grid"] = (gx, gy, D)
        cs = axis.contour(gx, gy, D, levels=8, colors="0.5", linewidths=0.8)
        axis.clabel(cs, fontsize="x-small")
    elif contours not in (None, "circles"):
        raise ValueError(f"contours must be 'circles', 'grid' or None, got {contours!r}")

    if q is not None:
        for k, qq in enumerate(as_points(q, M.dim)):
            y = B.array(qq)
            M.check_point(y)
            path = to_np(M.geodesic(x, y)(t))
            d = float(to_np(M.dist(x, y)))
            data["paths_to"].append(path)
            data["distances"].append(d)
            xy = to2d(path)
            axis.plot(xy[:, 0], xy[:, 1], color="C3", lw=1.8, label="geodesic to q" if k == 0 else None)
            axis.plot(*to2d(qq[None])[0], "C3o", ms=4)
            axis.annotate(f"d = {d:.3g}", to2d(path[n_t // 2][None])[0], fontsize="small", color="C3")

    axis.plot(*to2d(p0[None])[0], "ko", ms=4)
    if simplex:
        tri = np.vstack([_TRIANGLE, _TRIANGLE[:1]])
        axis.plot(tri[:, 0], tri[:, 1], "k-", lw=0.8)
        for lab, vert, off in zip(("$x=1$", "$x=2$", "$x=3$"), _TRIANGLE, ((-0.05, -0.05), (0.01, -0.05), (-0.02, 0.02))):
            axis.annotate(lab, vert + np.array(off), fontsize="small", annotation_clip=False)
        axis.set_aspect("equal")
        axis.set(xlim=(-0.08, 1.08), ylim=(-0.08, 0.94))  # room for the vertex labels
        axis.axis("off")
    else:
        xl, yl = coord_labels(M, (i, j), labels)
        axis.set_xlabel(xl)
        axis.set_ylabel(yl)
    axis.set_title(title or f"Geodesics of {getattr(M, 'name', 'M')}")
    legend_outside(axis)
    return finish([axis], data)
