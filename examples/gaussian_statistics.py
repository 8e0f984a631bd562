r"""Fréchet means and geodesic k-means of bivariate Gaussians under the Fisher–Rao metric.

A set of Gaussians :math:`N(\mu_i, \Sigma_i)` on :math:`\mathbb{R}^2` is a set of points of the
5-dimensional statistical manifold ``ig.Gaussian(2)``.  Its Fréchet (Karcher) mean minimises
:math:`\sum_i d(x, p_i)^2` in the Fisher–Rao distance (no closed form for the full Gaussian:
Riemannian gradient descent :math:`x \leftarrow \exp_x(\sum_i w_i\log_x p_i)`, with the
full-Gaussian exp in closed form and its log by geodesic shooting).  Unlike the average of the
parameters :math:`(\bar\mu, \bar\Sigma)`, it is equivariant under affine changes of the sample
space (the Fisher–Rao metric is invariant under them), and it weighs precise distributions more:
a narrow Gaussian is far from a wide one.

Geodesic k-means (``ig.stats.KMeans``) is Lloyd's algorithm with these distances and means,
seeded by k-means++.

Figures:

* ``gaussian_statistics_mean.png`` — left, six Gaussians (grey), their Fisher–Rao mean (black)
  and the average of their parameters (dashed); right, the geodesic between two Gaussians,
  whose midpoint is the Fréchet mean of the two;
* ``gaussian_statistics_kmeans.png`` — Gaussians drawn around three prototypes, clustered by
  geodesic k-means; the centres (thick) are Fréchet means of their clusters.

Run ``python examples/gaussian_statistics.py --out figures`` (``--quick``: fewer Gaussians).
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import numpy as np

logger = logging.getLogger("infogeo.examples.gaussian_statistics")

#: prototypes of the clusters: (mean, standard deviations, angle of the first axis)
PROTOTYPES = [((-1.5, 0.0), (1.2, 0.3), 0.5), ((1.5, 1.2), (0.4, 0.4), 0.0), ((1.2, -1.5), (1.0, 0.25), -1.0)]


def _cov(std, angle):
    c, s = np.cos(angle), np.sin(angle)
    R = np.array([[c, -s], [s, c]])
    return R @ np.diag(np.square(std)) @ R.T


def _members(G, rng, n):
    """``n`` Gaussians around each prototype: perturbed means, scales and angles; labels."""
    pts, labels = [], []
    for k, (mu, std, angle) in enumerate(PROTOTYPES):
        for _ in range(n):
            m = np.asarray(mu) + 0.3 * rng.standard_normal(2)
            sd = np.asarray(std) * np.exp(0.25 * rng.standard_normal(2))
            pts.append(G.point(mean=m, cov=_cov(sd, angle + 0.25 * rng.standard_normal())))
            labels.append(k)
    return np.stack(pts), np.array(labels)


def _save(fig, axes, path: Path) -> Path:
    """Label the axes of the sample space, write the figure and close it."""
    import matplotlib.pyplot as plt
    for a in axes:
        a.set_xlabel("$x_1$")
        a.set_ylabel("$x_2$")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    logger.info("wrote %s", path)
    return path


def run(out: Path | str = "figures", quick: bool = False, seed: int = 0) -> Dict[str, Any]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import infogeo as ig

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    G = ig.Gaussian(2)
    rng = np.random.default_rng(seed)

    # -- the Fréchet mean of six Gaussians of different shapes
    six = np.stack([G.point(mean=rng.normal(0, 1.0, 2), cov=_cov(np.exp(rng.normal(0, 0.6, 2)), a))
                    for a in np.linspace(0, np.pi, 6, endpoint=False)])
    mean, info = G.frechet_mean(six, return_info=True)
    average = six.mean(axis=0)          # (mean mu, mean vech Sigma): the average of the parameters
    p, q = G.point(mean=[-2.0, 0.0], cov=np.diag([1.5, 0.05])), G.point(mean=[2.0, 0.5], cov=np.diag([0.05, 1.0]))
    path = G.geodesic(p, q)
    mid = G.frechet_mean(np.stack([p, q]), method="gradient", tol=1e-12)
    mid_error = float(np.max(np.abs(mid - path(0.5))))

    fig, axes = plt.subplots(1, 2, figsize=(12.0, 4.8), layout="constrained")
    ig.viz.plot_gaussians(G, six, ax=axes[0], color="0.55", label="Gaussians")
    ig.viz.plot_gaussians(G, mean, ax=axes[0], color="k", linewidth=2.5, label="Fisher–Rao Fréchet mean")
    ig.viz.plot_gaussians(G, average, ax=axes[0], color="C3", linewidth=1.8, linestyle="--",
                          label=r"average of $(\mu, \Sigma)$")
    axes[0].legend(loc="upper right", fontsize=8)
    axes[0].set_title(f"Fréchet mean ({info.nit} gradient steps, |grad| = {info.grad_norm:.1e})")
    ts = np.linspace(0, 1, 9)
    ig.viz.plot_gaussians(G, np.stack([path(t) for t in ts]), ax=axes[1],
                          color=[plt.cm.viridis(t) for t in ts], linewidth=1.0)
    ig.viz.plot_gaussians(G, mid, ax=axes[1], color="k", linewidth=2.5, linestyle=":",
                          label="Fréchet mean of the two ends")
    axes[1].legend(loc="upper right", fontsize=8)
    axes[1].set_title("the geodesic from left to right; its midpoint is the mean of its ends")
    fig_mean = _save(fig, axes, out / "gaussian_statistics_mean.png")

    # -- geodesic k-means
    X, truth = _members(G, rng, 3 if quick else 7)
    km = ig.stats.KMeans(G, 3, seed=seed, n_init=1 if quick else 3).fit(X)
    # agreement with the prototypes, up to renaming the clusters
    agree = sum(np.max(np.bincount(km.labels_[truth == k], minlength=3)) for k in range(3)) / len(X)
    fig, ax = plt.subplots(figsize=(7.0, 5.6), layout="constrained")
    colors = [f"C{k}" for k in km.labels_]
    ig.viz.plot_gaussians(G, X, ax=ax, color=colors, linewidth=0.9, alpha=0.8)
    ig.viz.plot_gaussians(G, km.cluster_centers_, ax=ax, color=[f"C{k}" for k in range(3)], linewidth=3.0)
    ax.set_title(f"geodesic k-means of {len(X)} Gaussians (thick: centres), inertia {km.inertia_:.2f}")
    fig_km = _save(fig, [ax], out / "gaussian_statistics_kmeans.png")
    return {"figures": [str(fig_mean), str(fig_km)], "mean": mean, "mean_info": info, "average": average,
            "midpoint_error": mid_error, "labels": km.labels_, "truth": truth, "agreement": float(agree),
            "inertia": km.inertia_, "centres": km.cluster_centers_, "points": X, "six": six}


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="figures", help="folder for the PNG figures (default: ./figures)")
    parser.add_argument("--quick", action="store_true", help="fewer Gaussians (a few seconds)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    res = run(args.out, quick=args.quick, seed=args.seed)
    info = res["mean_info"]
    print(f"Fréchet mean of six Gaussians: {info.nit} steps, |grad| = {info.grad_norm:.2e}, "
          f"mean squared distance {info.fun:.4f}")
    print(f"midpoint of the geodesic vs Fréchet mean of its ends: max difference {res['midpoint_error']:.1e}")
    print(f"geodesic k-means: inertia {res['inertia']:.3f}, agreement with the prototypes {100 * res['agreement']:.0f}%")
    return res


if __name__ == "__main__":
    main()
