r"""KL balls and the metric ellipses that approximate them (Amari & Nagaoka 2000: Fisher = Hessian of KL).

Around a point :math:`p`, in a 2-D chart (or a 2-D slice of a larger chart),

* the **exact** level set :math:`\{q : \mathrm{KL}(p\|q) = \varepsilon\}` (and the
  reverse :math:`\mathrm{KL}(q\|p) = \varepsilon`) is found ray by ray: along each
  unit direction :math:`d` of the chart, :math:`r \mapsto \mathrm{KL}(p\|p + r d)`
  increases from 0, and a bracketing root-finder solves it for :math:`\varepsilon`;
* the **metric ellipse** :math:`\tfrac12\Delta^T G(p)\Delta = \varepsilon` has radius
  :math:`r_G(d) = \sqrt{2\varepsilon / d^T G(p) d}` along the same ray — the
  second-order Taylor term of KL (Fisher = Hessian of KL).

For small :math:`\varepsilon` the two agree to :math:`O(\sqrt{\varepsilon})` relative
error; for large :math:`\varepsilon` the exact ball is visibly lopsided.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable, Optional, Sequence

import numpy as np
from scipy.optimize import brentq

from .. import backend as B
from ._common import as_points, axes_for, check_coords, coord_labels, finish, legend_outside, to_np

logger = logging.getLogger(__name__)


def _kl_fn(M: Any) -> Callable[[Any, Any], float]:
    kl = getattr(M, "kl", None)
    if not callable(kl):
        raise TypeError(f"{getattr(M, 'name', type(M).__name__)} has no kl(p, q) method; "
                        "KL balls need a statistical manifold (or any manifold with kl)")
    return lambda p, q: float(to_np(kl(B.array(p), B.array(q))))


def _ray_root(g: Callable[[float], float], inside: Callable[[float], bool], r0: float,
              max_doublings: int = 60) -> float:
    """Smallest-bracket root of increasing ``g`` on ``r > 0`` (``g(0) < 0``); NaN if the ray leaves the domain first."""
    lo, hi = 0.0, r0
    for _ in range(max_doublings):
        if not inside(hi):
            # the domain ends between lo and hi: find its edge, then test whether g gets positive before it
            a, b = lo, hi
            for _ in range(60):
                m = 0.5 * (a + b)
                a, b = (m, b) if inside(m) else (a, m)
            if a > lo and g(a) > 0:
                hi = a
                break
            return math.nan
        if g(hi) > 0:
            break
        lo, hi = hi, 2.0 * hi
    else:
        return math.nan
    return brentq(g, lo, hi, xtol=1e-14, rtol=1e-12)


def kl_ball(M: Any, p: Any, eps: float, *, coords: Sequence[int] = (0, 1), n_rays: int = 180,
            reverse: bool = True) -> dict:
    r"""Exact KL level sets and the metric ellipse around one point, ray by ray.

    Parameters
    ----------
    M : Manifold with ``kl(p, q)``
        Points are in ``M``'s chart; the picture is the 2-D slice through ``p``
        spanned by coordinates ``coords`` (the other coordinates stay at ``p``'s).
    p : array, shape ``(M.dim,)``
    eps : float
        Level :math:`\varepsilon > 0`.
    n_rays : int
        Number of directions :math:`d_k = (\cos\phi_k, \sin\phi_k)`.
    reverse : bool
        Also solve :math:`\mathrm{KL}(q\|p) = \varepsilon`.

    Returns
    -------
    dict
        ``center``, ``eps``, ``coords``, ``angles``, ``directions`` (n, 2),
        ``r_metric``, ``r_forward`` (and ``r_reverse``) radii along each ray,
        the corresponding curves ``ellipse``, ``forward`` (``reverse``) as (n, 2)
        arrays of the two plotted coordinates, and ``deviation_forward``
        (``deviation_reverse``): :math:`\max_d |r_{KL}(d)/r_G(d) - 1|`.
        Rays along which the level is not reached inside the domain give NaN.
    """
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a positive number, got {eps!r}")
    if int(n_rays) < 8:
        raise ValueError(f"n_rays must be at least 8, got {n_rays}")
    i, j = check_coords(coords, M.dim)
    kl = _kl_fn(M)
    p = as_points(p, M.dim)[0]
    M.check_point(B.array(p))
    G = to_np(M.metric.matrix(B.array(p)))[np.ix_([i, j], [i, j])]
    angles = np.linspace(0.0, 2 * np.pi, int(n_rays), endpoint=False)
    dirs = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    r_metric = np.sqrt(2.0 * eps / np.einsum("ni,ij,nj->n", dirs, G, dirs))

    def q_of(d, r):
        q = p.copy()
        q[i] += r * d[0]
        q[j] += r * d[1]
        return q

    def inside(d):
        return lambda r: bool(M.belongs(B.array(q_of(d, r))))

    out = {"center": p, "eps": float(eps), "coords": (i, j), "angles": angles, "directions": dirs,
           "r_metric": r_metric, "ellipse": p[[i, j]] + r_metric[:, None] * dirs}
    which = [("forward", lambda d: lambda r: kl(p, q_of(d, r)) - eps)]
    if reverse:
        which.append(("reverse", lambda d: lambda r: kl(q_of(d, r), p) - eps))
    for name, make_g in which:
        radii = np.array([_ray_root(make_g(d), inside(d), r0) for d, r0 in zip(dirs, r_metric)])
        out[f"r_{name}"] = radii
        out[name] = p[[i, j]] + radii[:, None] * dirs
        out[f"deviation_{name}"] = float(np.nanmax(np.abs(radii / r_metric - 1.0)))
        if np.isnan(radii).any():
            logger.info("KL(%s) = %g not reached inside the domain along %d of %d rays",
                        name, eps, int(np.isnan(radii).sum()), len(radii))
    return out


def plot_kl_ball(M: Any, p: Any, eps: Any, *, coords: Sequence[int] = (0, 1), n_rays: int = 180,
                 reverse: bool = True, ax: Any = None, labels: Optional[Sequence[str]] = None,
                 title: Optional[str] = None, transform: Optional[Callable[[np.ndarray], np.ndarray]] = None):
    r"""Draw exact KL balls next to their metric ellipses around one or several centres.

    Parameters
    ----------
    M : Manifold with ``kl(p, q)``
        e.g. a univariate Gaussian in the :math:`(\mu, \sigma)` chart, an
        independence model of two Bernoullis, or any family (a 2-D slice).
    p : point or sequence of points
        The centres.
    eps : float or sequence of floats
        One level for all centres, or one per centre.
    coords : pair of int
        Which two chart coordinates span the picture.
    reverse : bool
        Also draw :math:`\mathrm{KL}(q\|p) = \varepsilon` (dotted).
    ax : matplotlib Axes, optional
        Where to draw; default: the current axes (``plt.gca()``).
    transform : callable, optional
        Maps an (n, 2) array of plotted coordinates to display coordinates
        (e.g. to draw in another chart); the attached curves stay in the chart.

    Returns
    -------
    matplotlib.axes.Axes
        With ``ax.infogeo_data``: one :func:`kl_ball` dict per centre.
    """
    centres = as_points(p, M.dim)
    eps_list = list(np.broadcast_to(np.asarray(eps, dtype=float), (len(centres),)))
    (axis,) = axes_for(ax)
    tr = transform or (lambda a: a)
    curves = []
    for k, (c, e) in enumerate(zip(centres, eps_list)):
        ball = kl_ball(M, c, float(e), coords=coords, n_rays=n_rays, reverse=reverse)
        curves.append(ball)
        close = lambda a: tr(np.vstack([a, a[:1]]))  # noqa: E731
        el, fw = close(ball["ellipse"]), close(ball["forward"])
        axis.plot(el[:, 0], el[:, 1], color="C0", lw=1.2, label=r"$\frac{1}{2}\Delta^T G\Delta=\varepsilon$" if k == 0 else None)
        axis.plot(fw[:, 0], fw[:, 1], color="C3", lw=1.5, ls="--", label=r"KL$(p\|q)=\varepsilon$" if k == 0 else None)
        if reverse:
            rv = close(ball["reverse"])
            axis.plot(rv[:, 0], rv[:, 1], color="C2", lw=1.2, ls=":", label=r"KL$(q\|p)=\varepsilon$" if k == 0 else None)
        cc = tr(ball["center"][list(ball["coords"])][None])[0]
        axis.plot(*cc, "k.", ms=4)
    xl, yl = coord_labels(M, check_coords(coords, M.dim), labels)
    axis.set_xlabel(xl)
    axis.set_ylabel(yl)
    axis.set_title(title or (f"KL balls, $\\varepsilon$ = {eps_list[0]:g}" if len(set(eps_list)) == 1
                             else "KL balls"))
    legend_outside(axis)
    return finish([axis], curves)
