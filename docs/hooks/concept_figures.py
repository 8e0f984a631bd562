"""Pictures of the concept pages, drawn by ``infogeo.viz`` when the docs are built.

Run by the gallery hook as ``python docs/hooks/concept_figures.py --out DIR --quick``; writes

* ``kl_ball.png`` — KL balls (:math:`\\varepsilon = 0.02` and 1) around univariate Gaussians in
  :math:`(\\mu, \\sigma)` next to the metric ellipses that approximate them (Amari & Nagaoka 2000);
* ``geodesics.png`` — fans of Fisher–Rao geodesics (closed form) of the univariate Gaussian
  and of the categorical simplex;
* ``gradient_field_<chart>.png`` — vanilla vs natural gradient of
  :math:`E_p[x_1 + 2x_2 + 3x_1x_2]` on the independence model, in two charts;
* ``pullback.png`` — Rosenbrock as a composite problem: gradient descent vs Gauss-Newton
  (natural gradient under the pulled-back metric :math:`J^TJ`), in input and output space.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo.demo import rosenbrock_runs  # noqa: E402

B = ig.backend


def independence_cost(M):
    """The stochastic relaxation of f = x1 + 2 x2 + 3 x1 x2 (Malagò et al. 2011), in expectation, as a function of chart points of ``M``."""
    def F(p):
        e = M.to_chart(p, "mean")
        return e[0] + 2 * e[1] + 3 * e[0] * e[1]
    return F


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the PNG figures")
    ap.add_argument("--quick", action="store_true", help="fewer rays and arrows")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rays = 90 if a.quick else 360

    def two_panels():
        return plt.subplots(1, 2, figsize=(12.0, 4.4), layout="constrained")

    def save(name):
        """Write the current figure (what the viz calls drew on) and close it."""
        plt.savefig(out / name, dpi=100, bbox_inches="tight")
        plt.close()

    M = ig.Gaussian(dim=1, covariance="diagonal").in_chart("mean_std")
    fig, axes = two_panels()
    ig.viz.plot_kl_ball(M, [[0.0, 1.0], [1.5, 0.5], [-1.5, 2.0]], 0.02, n_rays=rays, ax=axes[0],
                        title=r"$\varepsilon = 0.02$: KL balls $\approx$ metric ellipses")
    ig.viz.plot_kl_ball(M, [[0.0, 1.0]], 1.0, n_rays=rays, ax=axes[1],
                        title=r"$\varepsilon = 1$: the exact balls are lopsided")
    save("kl_ball.png")

    fig, axes = two_panels()
    G1 = ig.Gaussian(dim=1)  # closed-form geodesics in (mu, sigma^2)
    ig.viz.plot_geodesics(G1, G1.point(mean=0.0, var=1.0), q=[G1.point(mean=2.0, var=1.0)], n=16, radius=1.5,
                          n_t=30, ax=axes[0], labels=(r"$\mu$", r"$\sigma^2$"),
                          title=r"univariate Gaussian, chart $(\mu, \sigma^2)$")
    C = ig.Categorical(3)
    ig.viz.plot_geodesics(C, C.point(probs=[1 / 3, 1 / 3, 1 / 3]), q=[C.point(probs=[0.8, 0.1, 0.1])],
                          n=16, radius=1.0, n_t=30, ax=axes[1], title="Categorical(3) simplex")
    save("geodesics.png")

    windows = {"standard": ((0.03, 0.97), (0.03, 0.97)), "natural": ((-2.5, 2.5), (-2.5, 2.5))}
    labels = {"standard": (r"$\mu_1 = P(x_1 = 1)$", r"$\mu_2$"), "natural": (r"$\theta_1$", r"$\theta_2$")}
    for chart, (xlim, ylim) in windows.items():
        P = ig.IndependenceModel(2, chart=chart)
        plt.figure(figsize=(10.0, 4.4))
        ig.viz.plot_gradient_field(P, independence_cost(P), xlim=xlim, ylim=ylim, n=9 if a.quick else 13,
                                   grid=80, labels=labels[chart], title=f"independence model, {chart} chart")
        save(f"gradient_field_{chart}.png")

    r = rosenbrock_runs(quick=True)
    plt.figure(figsize=(12.0, 4.6))
    ig.viz.plot_trajectories(r["runs"], r["cost"], output_map=r["f"], output_cost=r["loss"],
                             optimum=[1.0, 1.0], log_levels=True,
                             title="Rosenbrock: the same runs in input space and output space")
    save("pullback.png")


if __name__ == "__main__":
    main()
