"""Rosenbrock as a composite problem: Gauss-Newton as natural gradient under a pullback metric.

The Rosenbrock cost is J(x) = |f(x)|^2 with f(x) = (1 - x1, 10 (x2 - x1^2)).
We compare, in input space and in output space:

* gradient descent on the inputs (Euclidean metric): bounces across the valley;
* gradient descent on the outputs (possible here because f is invertible);
* natural gradient under the pulled-back Euclidean metric G = J^T J (Gauss-Newton);
* the exact proximal point method with the pulled-back output distance,
  which is implicit gradient descent on the outputs.

Run ``python examples/rosenbrock.py --out figures`` (``--quick`` for a fast run) to write
``rosenbrock_fig1.png`` and ``rosenbrock_fig2.png``.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np

import infogeo as ig

B = ig.backend
logger = logging.getLogger("infogeo.examples.rosenbrock")
X0 = np.array([-1.5, 2.0])


def rosen(x):
    return B.stack([1 - x[0], 10 * (x[1] - x[0] ** 2)])


def cost(x):
    return B.sum(rosen(x) ** 2)


def rosen_inverse(z):
    """f^{-1}: outputs back to inputs (f is a bijection of the plane)."""
    x1 = 1 - z[..., 0]
    return np.stack([x1, z[..., 1] / 10 + x1 ** 2], axis=-1)


def run(out: Path | str = "figures", iterations: int = 200, step: float = 0.1) -> dict:
    """Solve with the four methods, draw both figures, return the numbers."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    M = ig.Euclidean(2)
    G = ig.PullbackMetric(rosen, output_metric=ig.EuclideanMetric(2))
    N = M.with_metric(G)

    gd = ig.solvers.GradientDescent(step_size=2e-3, max_iter=iterations, grad_tol=1e-12).minimize(M, cost, X0)
    gn = ig.solvers.GradientDescent(step_size=step, max_iter=iterations, grad_tol=1e-12).minimize(N, cost, X0)
    gn_fast = ig.solvers.GradientDescent(step_size=0.5, max_iter=50).minimize(N, cost, X0)
    # exact proximal point with the pulled-back output distance; lam chosen so that its output
    # contraction lam / (lam + 2) equals the natural-gradient step's first-order 1 - 2 * step
    lam = 2 * (1 - 2 * step) / (2 * step)
    prox = ig.solvers.ProximalPoint(lam=lam, divergence=ig.pullback(rosen, ig.SquaredEuclidean()),
                                    max_iter=min(iterations, 40), grad_tol=1e-10).minimize(M, cost, X0)
    # gradient descent on the outputs: z <- z - step * 2 z, mapped back through f^{-1}
    z0 = B.to_numpy(rosen(X0))
    z_out = np.array([z0 * (1 - 2 * step) ** k for k in range(min(iterations, 40) + 1)])
    x_out = rosen_inverse(z_out)

    paths = {"GD on inputs": gd.path(), "GD on outputs": x_out,
             "natural gradient (Gauss-Newton)": gn.path(), "exact proximal point": prox.path()}
    colors = {"GD on inputs": "tab:red", "GD on outputs": "tab:green",
              "natural gradient (Gauss-Newton)": "tab:blue", "exact proximal point": "tab:green"}

    xs, ys = np.meshgrid(np.linspace(-2, 2, 300), np.linspace(-1, 3, 300))
    J = (1 - xs) ** 2 + 100 * (ys - xs ** 2) ** 2
    zz = np.linspace(-3, 3, 200)
    Z1, Z2 = np.meshgrid(zz, np.linspace(-10, 10, 200))

    def input_panel(ax, names, title):
        ax.contour(xs, ys, np.log10(J + 1e-3), levels=25, cmap="Greys", linewidths=0.6)
        for name in names:
            p = paths[name]
            ax.plot(p[:, 0], p[:, 1], ".-", ms=3, lw=1, color=colors[name], label=name)
        ax.plot(1, 1, "k*", ms=10)
        ax.set(title=title, xlabel="$x_1$", ylabel="$x_2$", xlim=(-2, 2), ylim=(-1, 3))
        ax.legend(loc="lower left", fontsize=7)

    def output_panel(ax, names, title):
        ax.contour(Z1, Z2, Z1 ** 2 + Z2 ** 2, levels=20, cmap="Greys", linewidths=0.6)
        for name in names:
            z = np.array([B.to_numpy(rosen(p)) for p in paths[name]])
            ax.plot(z[:, 0], z[:, 1], ".-", ms=3, lw=1, color=colors[name], label=name)
        ax.plot(0, 0, "k*", ms=10)
        ax.set(title=title, xlabel="$z_1$", ylabel="$z_2$")
        ax.legend(loc="lower left", fontsize=7)

    fig1, axes = plt.subplots(2, 2, figsize=(10, 9))
    input_panel(axes[0, 0], ["GD on inputs"], "(a) gradient descent, input space")
    output_panel(axes[0, 1], ["GD on inputs"], "(b) same trajectory, output space")
    input_panel(axes[1, 0], ["GD on outputs"], "(c) gradient descent on the outputs, input space")
    output_panel(axes[1, 1], ["GD on outputs"], "(d) same trajectory, output space")
    fig1.tight_layout()
    fig1.savefig(out / "rosenbrock_fig1.png", dpi=110)

    # Figure 2(a): exact pulled-back dissimilarity vs its quadratic model 1/2 d^T G d around x0
    fig2, axes = plt.subplots(1, 3, figsize=(15, 5.4), layout="constrained")
    rho = ig.pullback(rosen, ig.SquaredEuclidean())
    G0 = np.asarray(B.to_numpy(G.matrix(X0)))
    # two levels: a small one, where the quadratic model is exact to second order, and a large one,
    # where the exact level set bends with the valley; the window holds the large model ellipse
    levels = [0.05, 2.0]
    half = 1.25 * np.sqrt(2 * levels[-1] * np.diag(np.linalg.inv(G0)))
    x0 = np.asarray(B.to_numpy(X0))
    gx, gy = np.meshgrid(np.linspace(x0[0] - half[0], x0[0] + half[0], 400),
                         np.linspace(x0[1] - half[1], x0[1] + half[1], 400))
    exact = np.vectorize(lambda a, b: float(rho(np.array([a, b]), X0)))(gx, gy)
    d = np.stack([gx - x0[0], gy - x0[1]], axis=-1)
    quad = 0.5 * np.einsum("...i,ij,...j->...", d, G0, d)
    for values, color, style in ((exact, "tab:green", "-"), (quad, "tab:blue", "--")):
        cs = axes[0].contour(gx, gy, values, levels=levels, colors=color, linestyles=style, linewidths=1.6)
        axes[0].clabel(cs, fmt=lambda c: f"{c:g}", fontsize=8)
    axes[0].plot(*x0, "k.", ms=8)
    axes[0].legend(handles=[Line2D([], [], color="tab:green", lw=1.6, label=r"exact $\rho(f(x), f(x_0))$"),
                            Line2D([], [], color="tab:blue", lw=1.6, ls="--",
                                   label=r"metric $\frac{1}{2}\Delta^T G(x_0)\Delta$"),
                            Line2D([], [], color="k", marker=".", ls="", label="$x_0$")],
                   loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8, frameon=False)
    axes[0].set(title="(a) level sets 0.05 and 2 around $x_0$", xlabel="$x_1$", ylabel="$x_2$")
    input_panel(axes[1], ["natural gradient (Gauss-Newton)", "exact proximal point"], "(b) input space")
    output_panel(axes[2], ["natural gradient (Gauss-Newton)", "exact proximal point"], "(c) output space")
    fig2.savefig(out / "rosenbrock_fig2.png", dpi=110)
    plt.close(fig1)
    plt.close(fig2)

    results = {
        "gd_error": float(np.abs(gd.x - 1).max()), "gd_iterations": gd.nit,
        "gauss_newton_error": float(np.abs(gn_fast.x - 1).max()), "gauss_newton_iterations": gn_fast.nit,
        "natural_gradient_small_step_error": float(np.abs(gn.x - 1).max()),
        "proximal_error": float(np.abs(prox.x - 1).max()), "proximal_iterations": prox.nit,
        "figures": [str(out / "rosenbrock_fig1.png"), str(out / "rosenbrock_fig2.png")],
    }
    logger.info("Rosenbrock: %s", results)
    return results


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="figures", help="folder for the PNG figures (default: ./figures)")
    parser.add_argument("--quick", action="store_true", help="60 iterations per method (a few seconds)")
    parser.add_argument("--iterations", type=int, default=None,
                        help="iterations per method (default: 200, or 60 with --quick)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    iterations = args.iterations if args.iterations is not None else (60 if args.quick else 200)
    res = run(args.out, iterations)
    for key, value in res.items():
        print(f"{key}: {value}")
    return res


if __name__ == "__main__":
    main()
