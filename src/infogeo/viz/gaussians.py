r"""Bivariate Gaussians drawn as their covariance ellipses.

The ellipse of :math:`N(\mu, \Sigma)` at ``n_std`` standard deviations is
:math:`\{\mu + k L u : |u| = 1\}`, :math:`\Sigma = LL^T`, :math:`k` = ``n_std``: the
contour of the density through the points at Mahalanobis distance :math:`k`.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ._common import axes_for, finish, to_np

__all__ = ["plot_gaussians"]


def plot_gaussians(G: Any, points: Any, *, ax: Any = None, n_std: float = 1.0, color: Any = None,
                   linewidth: float = 1.0, linestyle: str = "-", alpha: float = 1.0, label: Optional[str] = None,
                   centers: bool = True, title: Optional[str] = None, n: int = 100):
    """Draw the Gaussians ``points`` of the family ``G`` (sample dimension 2, any chart) as ellipses.

    Parameters
    ----------
    G : Gaussian family with ``sample_dim == 2``
        ``G.mean`` and ``G.cov`` read each point.
    points : array (dim,) or (k, dim)
    ax : matplotlib Axes, optional
    n_std : float
        Radius of the ellipse in standard deviations (Mahalanobis distance).
    color : color or list of colors, optional
        One color, or a list with one per point.
    linewidth, linestyle, alpha, label
        Passed to ``Axes.plot``; ``label`` goes to the first ellipse only.
    centers : bool
        Mark each mean with a dot.
    title : str, optional
    n : int
        Vertices per ellipse.

    Returns
    -------
    Axes, with ``ax.infogeo_data = {"means": (k, 2), "covs": (k, 2, 2)}``.
    """
    if getattr(G, "sample_dim", None) != 2:
        raise ValueError(f"plot_gaussians draws Gaussians on R^2; got a family with sample_dim = "
                         f"{getattr(G, 'sample_dim', None)}")
    if not n_std > 0:
        raise ValueError(f"n_std must be > 0, got {n_std}")
    P = to_np(points).reshape(-1, G.dim)
    mus, covs = to_np(G.mean(P)).reshape(-1, 2), to_np(G.cov(P)).reshape(-1, 2, 2)
    (axis,) = axes_for(ax)
    colors: Sequence[Any] = color if isinstance(color, list) else [color] * len(P)
    if len(colors) != len(P):
        raise ValueError(f"color: give one color, or a list of {len(P)} (one per point), got {len(colors)}")
    t = np.linspace(0.0, 2 * np.pi, n)
    circle = np.stack([np.cos(t), np.sin(t)])
    for i, (mu, S) in enumerate(zip(mus, covs)):
        curve = mu[:, None] + n_std * np.linalg.cholesky(S) @ circle
        line, = axis.plot(curve[0], curve[1], color=colors[i], lw=linewidth, ls=linestyle, alpha=alpha,
                          label=label if i == 0 else None)
        if centers:
            axis.plot(mu[0], mu[1], "o", ms=2.5 + linewidth, color=line.get_color(), alpha=alpha)
    axis.set_aspect("equal", adjustable="datalim")
    return finish([axis], {"means": mus, "covs": covs}, title)
