r"""The end-to-end demo behind ``python -m infogeo demo``.

Five short studies, each a figure plus lines of a Markdown report:

1. **Gaussian fit** — the maximum-likelihood 2-D Gaussian by natural gradient
   (Fisher metric) vs plain gradient descent in the same chart.
2. **Rosenbrock** (Rosenbrock 1960; Gauss-Newton as a pullback metric: Martens 2020) — :math:`h = \|f(x)\|^2` with
   :math:`f(x) = (1 - x_1, 10(x_2 - x_1^2))`: gradient descent in input space, gradient
   descent on the outputs, and natural gradient under the pullback metric
   :math:`J^TJ` (Gauss-Newton), in input and output space.
3. **Independence model** (stochastic relaxation: Malagò et al. 2011) — :math:`E_p[x_1 + 2x_2 + 3x_1x_2]` on
   :math:`\{-1,+1\}^2`: vanilla vs natural gradient in the marginal-probability
   chart :math:`\mu` and the natural chart :math:`\theta`.
4. **KL balls** (:math:`\varepsilon = 0.02`; Fisher = Hessian of KL: Amari & Nagaoka 2000) around univariate Gaussians in
   :math:`(\mu, \sigma)`, and at :math:`\varepsilon = 1`.
5. **Geodesics** of the univariate Gaussian and of the categorical simplex.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Dict, List

import numpy as np

from . import backend as B
from .geometry.manifold import Euclidean
from .geometry.metric import EuclideanMetric
from .geometry.pullback import PullbackMetric
from .divergences import SquaredEuclidean
from .solvers import GradientDescent

logger = logging.getLogger(__name__)

__all__ = ["run_demo", "rosenbrock_runs"]


def _f(a: Any) -> float:
    return float(B.to_numpy(a))


# ----------------------------------------------------------------------------- studies
def gaussian_fit(quick: bool) -> Dict[str, Any]:
    from .statistical import Gaussian
    rng = np.random.default_rng(0)
    mu_true, cov_true = np.array([1.0, -2.0]), np.array([[2.0, 0.6], [0.6, 0.5]])
    data = rng.multivariate_normal(mu_true, cov_true, size=500 if quick else 5000)
    M = Gaussian(dim=2)
    mle = M.point(mean=data.mean(0), cov=np.cov(data.T, bias=True))
    cost = lambda p: -M.log_likelihood(p, data)  # noqa: E731
    x0 = M.point(mean=[0.0, 0.0], cov=np.eye(2))
    n = 60 if quick else 200
    ngd = GradientDescent(step_size=0.5, max_iter=n, grad_tol=1e-10).minimize(M, cost, x0)
    gd = GradientDescent(0.05, max_iter=n, grad_tol=1e-10).minimize(M.with_metric(EuclideanMetric(M.dim)), cost, x0)
    return {"M": M, "mle": mle, "data": data, "x0": x0,
            "runs": {"natural gradient (Fisher)": ngd, "gradient descent": gd},
            "dist": {k: _f(M.dist(r.x, mle)) for k, r in {"natural gradient (Fisher)": ngd, "gradient descent": gd}.items()}}


def rosenbrock_runs(quick: bool, a: float = 1.0, b: float = 100.0) -> Dict[str, Any]:
    r"""GD on inputs, GD on outputs, Gauss-Newton natural gradient (pullback of the output metric)."""
    sb = float(np.sqrt(b))
    f = lambda x: B.stack([a - x[0], sb * (x[1] - x[0] ** 2)])  # noqa: E731
    loss = lambda z: B.sum(z * z)  # noqa: E731
    cost = lambda x: loss(f(x))  # noqa: E731
    finv = lambda z: np.array([a - z[0], (a - z[0]) ** 2 + z[1] / sb])  # noqa: E731
    x0 = B.array([-1.5, 1.5])
    n_gd = 400 if quick else 5000
    gd = GradientDescent(1.5e-3, max_iter=n_gd, grad_tol=1e-8).minimize(Euclidean(2), cost, x0)
    out = GradientDescent(0.1, max_iter=60, grad_tol=1e-8).minimize(Euclidean(2), loss, f(x0))
    out_path = np.stack([finv(z) for z in out.path()])   # the output iterates pulled back to inputs
    gn = GradientDescent(step_size=0.1, metric=PullbackMetric(f, SquaredEuclidean()), max_iter=60,
                         grad_tol=1e-8).minimize(Euclidean(2), cost, x0)
    return {"f": f, "loss": loss, "cost": cost, "x0": x0,
            "runs": {"GD on inputs": gd, "GD on outputs": out_path, "natural gradient (pullback, Gauss-Newton)": gn},
            "results": {"GD on inputs": gd, "GD on outputs": out, "natural gradient (pullback, Gauss-Newton)": gn}}


def independence_runs(quick: bool) -> Dict[str, Any]:
    from .statistical import IndependenceModel
    out: Dict[str, Any] = {}
    for chart, step in (("standard", 0.025), ("natural", 0.15)):
        M = IndependenceModel(2, chart=chart)

        def F(p, M=M):
            e = M.to_chart(p, "mean")               # E[x_i]
            return e[0] + 2 * e[1] + 3 * e[0] * e[1]
        x0 = M.point(probs=[0.6, 0.7])
        n = 40 if quick else 200
        van = GradientDescent(step, max_iter=n, line_search="armijo").minimize(
            M.with_metric(EuclideanMetric(2)), F, x0)
        nat = GradientDescent(step, max_iter=n, line_search="armijo").minimize(M, F, x0)
        out[chart] = {"M": M, "F": F, "runs": {"vanilla": van, "natural": nat}}
    return out


# ----------------------------------------------------------------------------- pictures
def _ellipse(mean: np.ndarray, cov: np.ndarray, k: float = 2.0, n: int = 200) -> np.ndarray:
    """The ``k``-standard-deviation ellipse of a 2-D Gaussian, as an (n, 2) closed curve."""
    w, V = np.linalg.eigh(cov)
    a = np.linspace(0.0, 2 * np.pi, n)
    return mean + k * (np.stack([np.cos(a), np.sin(a)], 1) * np.sqrt(w)) @ V.T


def kl_to_mle(g: Dict[str, Any]) -> Dict[str, np.ndarray]:
    """KL(MLE ‖ iterate) along each run of :func:`gaussian_fit`."""
    return {label: np.array([_f(g["M"].kl(g["mle"], B.array(x))) for x in res.path()])
            for label, res in g["runs"].items()}


def gaussian_fit_figure(g: Dict[str, Any], kl: Dict[str, np.ndarray], early: int = 5):
    """(a) KL(MLE ‖ iterate) per iteration, log scale; (b) the fitted densities after ``early`` iterations."""
    import matplotlib.pyplot as plt
    M, mle = g["M"], g["mle"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11.0, 4.4), layout="constrained")
    for k, label in enumerate(g["runs"]):
        a.semilogy(np.maximum(kl[label], 1e-16), color=f"C{k}", lw=1.6, label=label)
    a.set_xlabel("iteration")
    a.set_ylabel(r"KL$(p_\mathrm{MLE}\,\|\,p_k)$")
    a.set_title("(a) distance to the maximum-likelihood fit")
    a.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize="small", frameon=False)
    a.grid(True, which="both", alpha=0.3)
    data = g["data"]
    b.plot(data[:, 0], data[:, 1], ".", color="0.75", ms=2, zorder=0)
    curve = _ellipse(_np(M.mean(mle)), _np(M.cov(mle)))
    b.plot(curve[:, 0], curve[:, 1], "k-", lw=2.0, label="maximum likelihood")
    for k, (label, res) in enumerate(g["runs"].items()):
        x = B.array(res.path()[min(early, len(res.path()) - 1)])
        curve = _ellipse(_np(M.mean(x)), _np(M.cov(x)))
        b.plot(curve[:, 0], curve[:, 1], color=f"C{k}", lw=1.6, ls="--", label=f"{label}, iteration {early}")
    curve = _ellipse(_np(M.mean(g["x0"])), _np(M.cov(g["x0"])))
    b.plot(curve[:, 0], curve[:, 1], color="0.4", lw=1.0, ls=":", label="start")
    b.set_xlabel("$x_1$")
    b.set_ylabel("$x_2$")
    b.set_aspect("equal", adjustable="datalim")
    b.set_title(f"(b) 2-sd ellipses of the fits after {early} iterations")
    b.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", frameon=False)
    fig.suptitle("Gaussian fit: natural gradient vs gradient descent")
    return fig


def _status(res: Any) -> str:
    """A table cell: the outcome, with the solver's reason when the run did not converge."""
    return res.outcome if res.success else f"**{res.outcome}**: {res.message}"


def _np(a: Any) -> np.ndarray:
    return np.asarray(B.to_numpy(a), dtype=float)


# ----------------------------------------------------------------------------- driver
def run_demo(out: str = "infogeo-demo", quick: bool = False, progress: Any = None) -> str:
    """Run every study, write PNGs and ``report.md`` into ``out``; return the report path.

    ``progress``: a progress bar over the studies; ``None`` (default) shows it only when
    stderr is a terminal, ``True``/``False`` force it on/off.
    """
    import matplotlib.pyplot as plt

    from .solvers.base import progress_bar
    from .viz import View, plot_geodesics, plot_kl_ball, plot_trajectories
    os.makedirs(out, exist_ok=True)
    report: List[str] = ["# infogeo demo", "", f"Mode: {'quick' if quick else 'full'}.", ""]
    t_start = time.perf_counter()

    def save(name: str, fig: Any = None) -> str:
        """Write the current figure (or ``fig``) to ``out/name`` and close it."""
        fig = fig or plt.gcf()
        path = os.path.join(out, name)
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        logger.info("wrote %s", path)
        return name

    def section(title: str, columns: List[str], rows: List[List[Any]]) -> None:
        """A report section: heading and a Markdown table."""
        report.extend([f"## {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)])
        report.extend("| " + " | ".join(map(str, r)) + " |" for r in rows)

    def s_gauss():
        g = gaussian_fit(quick)
        kl = kl_to_mle(g)

        def first_below(values, tol=1e-6):
            hits = np.flatnonzero(values < tol)
            return str(hits[0]) if len(hits) else f"> {len(values) - 1}"
        section("Gaussian fit (2-D, maximum likelihood)",
                ["method", "iterations", "status", "final cost", "Fisher-Rao distance to the MLE",
                 "KL(MLE ‖ fit) < 1e-6 at"],
                [[k, r.nit, _status(r), f"{r.fun:.10f}", f"{g['dist'][k]:.3e}", first_below(kl[k])]
                 for k, r in g["runs"].items()])
        report.extend(["", "The figure shows the table's point: (a) KL(MLE ‖ iterate) per iteration on a log scale, "
                           "(b) the fitted Gaussians (2-sd ellipses) after 5 iterations.",
                       "", f"![Gaussian fit]({save('gaussian_fit.png', gaussian_fit_figure(g, kl))})", ""])

    def s_rosen():
        r = rosenbrock_runs(quick)
        section("Rosenbrock: input space, output space, pullback metric (Gauss-Newton: Martens 2020)",
                ["method", "iterations", "status", "final cost"],
                [[k, res.nit, _status(res), f"{res.fun:.3e}"] for k, res in r["results"].items()])
        plt.figure(figsize=(12.0, 4.6))
        plot_trajectories(r["runs"], r["cost"], output_map=r["f"], output_cost=r["loss"], optimum=[1.0, 1.0],
                          log_levels=True, title="Rosenbrock")
        report.extend(["", f"![Rosenbrock]({save('rosenbrock.png')})", ""])

    def s_indep():
        ind = independence_runs(quick)
        section("Independence model, E[x1 + 2 x2 + 3 x1 x2] (stochastic relaxation: Malagò et al. 2011)",
                ["chart", "method", "iterations", "status", "final E[f]"],
                [[chart, k, res.nit, _status(res), f"{res.fun:.6f}"] for chart, d in ind.items()
                 for k, res in d["runs"].items()])
        fig, axes = plt.subplots(1, 2, figsize=(12.0, 4.6), layout="constrained")
        for axis, (chart, d) in zip(axes, ind.items()):
            lab = (r"$\mu_1$", r"$\mu_2$") if chart == "standard" else (r"$\theta_1$", r"$\theta_2$")
            lims = ((0.01, 0.99), (0.01, 0.99)) if chart == "standard" else ((-3, 3), (-3, 3))
            plot_trajectories(d["runs"], views=[View(f"chart: {chart}", cost=d["F"], xlim=lims[0], ylim=lims[1],
                                                     labels=lab)], ax=axis, grid=80)
        fig.suptitle("Independence model: vanilla vs natural gradient")
        report.extend(["", f"![Independence model]({save('independence.png', fig)})", ""])

    def s_balls():
        from .statistical import Gaussian
        M = Gaussian(dim=1, covariance="diagonal").in_chart("mean_std")
        centres = [[0.0, 1.0], [1.5, 0.5], [-1.5, 2.0]]
        plt.figure(figsize=(6.4, 4.4))
        b1 = plot_kl_ball(M, centres, 0.02, n_rays=90 if quick else 360).infogeo_data
        name1 = save("kl_balls_eps0.02.png")
        plt.figure(figsize=(6.4, 4.4))
        b2 = plot_kl_ball(M, [[0.0, 1.0]], 1.0, n_rays=90 if quick else 360).infogeo_data
        name2 = save("kl_ball_eps1.png")
        section("KL balls around univariate Gaussians in (mu, sigma) (Amari & Nagaoka 2000)",
                ["eps", "centre", "max deviation KL(p‖q) vs ellipse", "max deviation KL(q‖p)"],
                [[f"{c['eps']:g}", f"({c['center'][0]:g}, {c['center'][1]:g})",
                  f"{100 * c['deviation_forward']:.1f} %", f"{100 * c['deviation_reverse']:.1f} %"]
                 for c in b1 + b2])
        report.extend(["", f"![KL balls eps=0.02]({name1}) ![KL ball eps=1]({name2})", ""])

    def s_geo():
        from .statistical import Categorical, Gaussian
        M = Gaussian(dim=1, covariance="diagonal").in_chart("mean_std")
        p, q = B.array([0.0, 1.0]), B.array([2.0, 1.0])
        plt.figure(figsize=(6.4, 4.4))
        d1 = plot_geodesics(M, p, q=[q], n=8 if quick else 16, radius=1.5, n_t=30,
                            circle_rays=48 if quick else 120).infogeo_data
        name1 = save("geodesics_gaussian.png")
        C = Categorical(3)
        plt.figure(figsize=(6.4, 4.4))
        d2 = plot_geodesics(C, C.point(probs=[1 / 3, 1 / 3, 1 / 3]), q=[C.point(probs=[0.8, 0.1, 0.1])],
                            n=8 if quick else 16, radius=1.0, n_t=30, circle_rays=48 if quick else 120).infogeo_data
        name2 = save("geodesics_simplex.png")
        section("Geodesics", ["manifold", "from", "to", "distance"],
                [["Gaussian (mu, sigma)", "N(0, 1)", "N(2, 1)", f"{d1['distances'][0]:.6f}"],
                 ["Categorical(3)", "(1/3, 1/3, 1/3)", "(0.8, 0.1, 0.1)", f"{d2['distances'][0]:.6f}"]])
        report.extend(["", f"![Gaussian geodesics]({name1}) ![Simplex geodesics]({name2})", ""])

    steps = [s_gauss, s_rosen, s_indep, s_balls, s_geo]
    names = ["Gaussian fit", "Rosenbrock", "independence model", "KL balls", "geodesics"]
    for name, step in progress_bar(list(zip(names, steps)), progress, desc="infogeo demo"):
        logger.info("demo: %s", name)
        step()
    report.append(f"Total time: {time.perf_counter() - t_start:.1f} s.")
    path = os.path.join(out, "report.md")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(report) + "\n")
    return path
