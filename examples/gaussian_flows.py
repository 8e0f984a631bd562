r"""Vanilla vs natural gradient flows of a stochastic relaxation over Gaussians (NES, CMA-ES).

Stochastic relaxation replaces the maximisation of :math:`f` on :math:`\mathbb{R}^d` by
the maximisation of :math:`F(\xi) = E_{p_\xi}[f]` over Gaussian search distributions.
The flows here are *ascent* flows (:math:`f \to -\infty`, so :math:`E[f]` has no
minimum; its supremum is :math:`\max f`, approached as the Gaussian shrinks onto a
maximiser):

* vanilla  :math:`\dot\xi = \nabla_\xi F(\xi)`: depends on the chart :math:`\xi`;
* natural  :math:`\dot\xi = G(\xi)^{-1}\nabla_\xi F(\xi) = (dF_\xi)^\sharp`, :math:`G` the
  Fisher metric: the same curve of distributions in every chart.

For a polynomial :math:`f`, :math:`E[f]` is exact from the moments of the normal
distribution, :math:`E[f] = \sum_m f^{(2m)}(\mu)\,\sigma^{2m} / (2^m m!)`, so the flows
are integrated exactly (``scipy.integrate.solve_ivp``) on

1. :math:`f = x - 3x^2` in the chart :math:`(\mu, \sigma)`, with a Monte Carlo natural
   gradient ascent (:func:`infogeo.solvers.mc_natural_gradient`) drawn on top: for a
   small step it follows the natural flow;
2. :math:`f = 6x + 8x^2 - x^3 - 2x^4` (two local maxima, :math:`x = \pm\sqrt2`) in :math:`(\mu, \sigma)`;
3. :math:`f = x_1 + 2x_2 - 3x_1^2 - 2x_1x_2 - 2x_2^2` with
   :math:`\Sigma_0 = \begin{pmatrix}1 & -0.5\\ -0.5 & 2\end{pmatrix}`, projected on
   :math:`(\mu_1, \mu_2)`: vanilla and natural flows of the fixed-covariance family
   (Fisher :math:`\Sigma_0^{-1}`, so :math:`\dot\mu = \Sigma_0\nabla f(\mu)`), and the natural
   flow of the full family started at :math:`(\mu_0, \Sigma_0)`, in which :math:`\Sigma`
   shrinks as well.

For :math:`f(x) = b^Tx + x^TAx` (:math:`A \prec 0`, maximiser :math:`\mu^*`) the natural flow
of the full family solves in closed form: :math:`\dot\mu = 2\Sigma A(\mu - \mu^*)`,
:math:`\dot\Sigma = 2\Sigma A\Sigma`, hence :math:`\Sigma(t)^{-1} = \Sigma_0^{-1} - 2At` and
:math:`\Sigma(t)^{-1}(\mu(t) - \mu^*)` is constant; in one dimension the natural paths in
:math:`(\mu, \sigma)` are the parabolas :math:`\mu - \mu^* \propto \sigma^2`, the vanilla paths
the straight lines :math:`\mu - \mu^* \propto \sigma`. The tests check these facts.

Run ``python examples/gaussian_flows.py --out figures`` (``--quick`` for a fast run) to
write ``gaussian_flows_quadratic.png``, ``gaussian_flows_quartic.png`` and
``gaussian_flows_2d.png``.
"""
from __future__ import annotations

import argparse
import functools
import logging
import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
from scipy.integrate import solve_ivp

import infogeo as ig

B = ig.backend
logger = logging.getLogger("infogeo.examples.gaussian_flows")

#: polynomial coefficients, lowest degree first
QUADRATIC = (0.0, 1.0, -3.0)               # f = x - 3 x^2
QUARTIC = (0.0, 6.0, 8.0, -1.0, -2.0)      # f = 6x + 8x^2 - x^3 - 2x^4
#: f(x) = b^T x + x^T A x = x1 + 2 x2 - 3 x1^2 - 2 x1 x2 - 2 x2^2
B2 = np.array([1.0, 2.0])
A2 = np.array([[-3.0, -1.0], [-1.0, -2.0]])
SIGMA0 = np.array([[1.0, -0.5], [-0.5, 2.0]])
SIGMA_MIN = 0.02   # the 1-D flows stop when sigma reaches this (the natural flow only gets there as t -> inf)


# ----------------------------------------------------------------------- E[f] in closed form
def expected_polynomial(coeffs: Sequence[float], mu: Any, sigma: Any) -> Any:
    r""":math:`E_{N(\mu, \sigma^2)}[f]` for the polynomial :math:`f(x) = \sum_k c_k x^k` (``coeffs`` from :math:`c_0`).

    Taylor's formula around :math:`\mu` is exact for a polynomial, and the odd moments of
    :math:`z \sim N(0, 1)` vanish while :math:`E[z^{2m}]/(2m)! = 1/(2^m m!)`, so

    .. math:: E[f(\mu + \sigma z)] = \sum_{m \ge 0} \frac{f^{(2m)}(\mu)}{2^m m!}\,\sigma^{2m}.

    Written with ``+`` and ``*`` only (Horner's scheme), so it works elementwise on arrays
    (level lines on a grid) and under autodiff (the flows).
    """
    var = sigma * sigma
    total = 0.0 * mu
    for m, derivative in enumerate(_even_derivatives(tuple(float(c) for c in coeffs))):
        value = 0.0 * mu + derivative[-1]
        for c in derivative[-2::-1]:   # Horner: ((a_n mu + a_{n-1}) mu + ...) + a_0
            value = value * mu + c
        total = total + value * var ** m / (2 ** m * math.factorial(m))
    return total


@functools.lru_cache(maxsize=32)
def _even_derivatives(coeffs: tuple) -> tuple:
    """Coefficients of the even derivatives of f, computed once per polynomial (the flows call E[f] often)."""
    f = np.polynomial.Polynomial(coeffs)
    return tuple(tuple(f.deriv(2 * m).coef) for m in range(f.degree() // 2 + 1))


def expected_quadratic(b: np.ndarray, A: np.ndarray, mu: Any, cov: Any) -> Any:
    r""":math:`E_{N(\mu, \Sigma)}[b^Tx + x^TAx] = b^T\mu + \mu^TA\mu + \mathrm{tr}(A\Sigma)`."""
    return B.dot(b, mu) + B.dot(mu, B.matmul(A, mu)) + B.sum(A * cov)


def quadratic_maximiser(b: np.ndarray, A: np.ndarray) -> np.ndarray:
    r"""The maximiser :math:`\mu^* = -\tfrac12 A^{-1}b` of :math:`b^Tx + x^TAx` (:math:`A \prec 0`)."""
    return -0.5 * np.linalg.solve(A, b)


# ----------------------------------------------------------------------- flows
def gradient_flow(M: ig.Manifold, F: Callable[[Any], Any], x0: Any, t_max: float, *,
                  stop: Optional[Callable[[float, np.ndarray], float]] = None,
                  rtol: float = 1e-7, atol: float = 1e-9) -> Dict[str, np.ndarray]:
    r"""Integrate the ascent flow :math:`\dot x = (dF_x)^\sharp` of ``F`` under ``M``'s metric.

    With the Euclidean metric this is the vanilla flow :math:`\dot x = \nabla F`, with the
    Fisher metric the natural flow :math:`\dot x = G^{-1}\nabla F`.

    Parameters
    ----------
    M : Manifold
        Chart and metric; ``M.gradient`` gives the field.
    F : callable
        The relaxation :math:`F(x)` on chart points (backend ops).
    x0 : array
        Start, a point of ``M``.
    t_max : float
        Integrate over :math:`[0, t_{max}]`.
    stop : callable, optional
        ``stop(t, x) -> float``: the integration ends where it crosses zero from above.
    rtol, atol : float
        Tolerances of the RK45 integrator.

    Returns
    -------
    dict
        ``t`` (n,) the solver's time steps, ``x`` (n, dim) the path, ``sol`` the dense
        output (``sol(t)`` evaluates the flow at any time inside the interval).
    """
    x0 = np.array(B.to_numpy(M.point(B.array(x0))), dtype=float)

    def field(t, x):
        return np.asarray(B.to_numpy(M.gradient(F, B.array(x)).components), dtype=float)

    events = None
    if stop is not None:
        def event(t, x):
            return stop(t, x)
        event.terminal, event.direction = True, -1    # on a wrapper: the caller's function is left alone
        events = [event]
    sol = solve_ivp(field, (0.0, float(t_max)), x0, method="RK45", rtol=rtol, atol=atol,
                    events=events, dense_output=True)
    if sol.status < 0:
        raise RuntimeError(f"the flow from {x0} could not be integrated: {sol.message}")
    return {"t": sol.t, "x": sol.y.T, "sol": sol.sol}


def _sigma_floor(t: float, x: np.ndarray) -> float:
    return x[1] - SIGMA_MIN


def mc_natural_ascent(coeffs: Sequence[float], mean: float, std: float, *, step: float, n_steps: int,
                      n_samples: int, seed: int = 0) -> np.ndarray:
    r"""Natural gradient ascent on :math:`E[f]` with Monte Carlo gradients, returned in :math:`(\mu, \sigma)`.

    Works in the standard chart :math:`(\mu, \sigma^2)` of :class:`~infogeo.Gaussian`;
    :func:`~infogeo.solvers.mc_natural_gradient` estimates
    :math:`G^{-1}\nabla F = J\,\mathrm{Cov}(f, t)` there from ``n_samples`` draws. Because the
    natural flow is the same in every chart, iterate :math:`k` approximates the flow of
    :func:`gradient_flow` in :math:`(\mu, \sigma)` at time :math:`k \cdot` ``step``.
    """
    G = ig.Gaussian(dim=1)
    rng = np.random.default_rng(seed)
    f = lambda X: np.polynomial.polynomial.polyval(X[:, 0], coeffs)  # noqa: E731
    p = G.point(mean=mean, std=std)
    path = [p]
    for _ in range(int(n_steps)):
        p = G.point(p + step * ig.solvers.mc_natural_gradient(G, p, f, n_samples, rng))
        path.append(p)
    path = np.array([B.to_numpy(q) for q in path])
    return np.column_stack([path[:, 0], np.sqrt(path[:, 1])])


# ----------------------------------------------------------------------- the three studies
def univariate_flows(coeffs: Sequence[float], starts: Sequence[Sequence[float]], t_vanilla: float,
                     t_natural: float) -> Dict[str, List[Dict[str, np.ndarray]]]:
    r"""Vanilla and natural ascent flows of :math:`E_{N(\mu,\sigma^2)}[f]` in the :math:`(\mu, \sigma)` chart."""
    natural = ig.Gaussian(dim=1, covariance="diagonal").in_chart("mean_std")   # Fisher metric in (mu, sigma)
    vanilla = natural.with_metric(ig.EuclideanMetric(2))   # same chart, Euclidean metric
    F = lambda x: expected_polynomial(coeffs, x[0], x[1])  # noqa: E731
    return {"vanilla": [gradient_flow(vanilla, F, s, t_vanilla, stop=_sigma_floor) for s in starts],
            "natural": [gradient_flow(natural, F, s, t_natural, stop=_sigma_floor) for s in starts]}


def chart_dependence(coeffs: Sequence[float], start: Sequence[float], t_end: float) -> Dict[str, float]:
    r"""Integrate both flows in :math:`(\mu, \sigma)` and in :math:`\theta = (\mu/\sigma^2, -1/(2\sigma^2))`.

    Returns the gap :math:`\max_t |(\mu, \sigma)(t) - (\mu, \sigma)_\theta(t)|` between the two
    integrations, read in :math:`(\mu, \sigma)`: tiny for the natural flow (a property of the
    distributions), large for the vanilla flow (a property of the chart).
    """
    mu_sigma = ig.Gaussian(dim=1, covariance="diagonal").in_chart("mean_std")
    theta = ig.Gaussian(dim=1).in_chart("natural")

    def to_mu_sigma(th):
        s = theta.to_chart(th, "standard")
        return B.stack([s[0], B.sqrt(s[1])])

    F_ms = lambda x: expected_polynomial(coeffs, x[0], x[1])        # noqa: E731
    F_th = lambda th: F_ms(to_mu_sigma(th))                          # noqa: E731
    th0 = theta.from_chart(B.array([start[0], start[1] ** 2]), "standard")
    times = np.linspace(0.0, t_end, 41)
    gaps = {}
    for name, metric in (("natural", None), ("vanilla", ig.EuclideanMetric(2))):
        M1, M2 = (mu_sigma, theta) if metric is None else (mu_sigma.with_metric(metric), theta.with_metric(metric))
        a = gradient_flow(M1, F_ms, start, t_end)["sol"](times).T
        th = gradient_flow(M2, F_th, th0, t_end)["sol"](times).T
        b = np.array([B.to_numpy(to_mu_sigma(B.array(x))) for x in th])
        gaps[name] = float(np.abs(a - b).max())
    return gaps


def multivariate_flows(starts: Sequence[Sequence[float]], t_vanilla: float, t_natural: float,
                       t_full: float) -> Dict[str, List[Dict[str, np.ndarray]]]:
    r"""The 2-D quadratic: vanilla and natural flows with :math:`\Sigma_0` fixed, natural flow of the full family.

    :math:`\partial F/\partial\mu = \nabla f(\mu)` does not depend on :math:`\Sigma`, so the vanilla
    flow of the full family has the same :math:`\mu`-projection as with :math:`\Sigma_0` fixed (until its
    covariance, which moves on a straight line in :math:`t`, leaves the SPD cone); it is not drawn twice.
    """
    fixed = ig.Gaussian(dim=2, covariance="fixed", cov=SIGMA0)         # points mu, Fisher Sigma0^{-1}
    full = ig.Gaussian(dim=2)                                          # points (mu, vech Sigma)
    F_fixed = lambda m: expected_quadratic(B2, A2, m, SIGMA0)          # noqa: E731
    F_full = lambda p: expected_quadratic(B2, A2, full.mean(p), full.cov(p))  # noqa: E731
    vanilla = fixed.with_metric(ig.EuclideanMetric(2))
    return {
        "vanilla": [gradient_flow(vanilla, F_fixed, s, t_vanilla) for s in starts],
        "natural": [gradient_flow(fixed, F_fixed, s, t_natural) for s in starts],
        "natural (full covariance)": [gradient_flow(full, F_full, full.point(mean=s, cov=SIGMA0), t_full)
                                      for s in starts],
    }


# ----------------------------------------------------------------------- figures
def _draw_univariate(fig: Any, flows: Dict[str, list], coeffs: Sequence[float], title: str,
                     xlim, ylim, grid: int, maximisers: Sequence[float], mc: Optional[np.ndarray] = None) -> None:
    ax = fig.add_subplot(1, 1, 1)
    mu, sigma = np.meshgrid(np.linspace(*xlim, grid), np.linspace(1e-3, ylim[1], grid))
    EF = expected_polynomial(coeffs, mu, sigma)            # the closed form is elementwise: one call per grid
    ax.contour(mu, sigma, EF, levels=np.quantile(EF, np.linspace(0.02, 1, 25)), colors="0.7", linewidths=0.7,
               linestyles="solid")
    for name, color in (("vanilla", "tab:red"), ("natural", "tab:blue")):
        for k, run in enumerate(flows[name]):
            ax.plot(run["x"][:, 0], run["x"][:, 1], color=color, lw=1.5, label=f"{name} flow" if k == 0 else None)
            ax.plot(*run["x"][0], "o", color="k", ms=4)
    if mc is not None:
        ax.plot(mc[:, 0], mc[:, 1], ".", color="tab:green", ms=3, label="Monte Carlo natural gradient")
    for m in maximisers:
        ax.plot(m, 0, "k*", ms=10)
    ax.set(xlim=xlim, ylim=(0, ylim[1]), xlabel=r"$\mu$", ylabel=r"$\sigma$", title=title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", frameon=False)  # clear of the flows


def _draw_multivariate(fig: Any, flows: Dict[str, list], grid: int) -> None:
    ax = fig.add_subplot(1, 1, 1)
    x1, x2 = np.meshgrid(np.linspace(-2, 2, grid), np.linspace(-2, 2.5, grid))
    X = np.stack([x1, x2], axis=-1)
    f = X @ B2 + np.einsum("...i,ij,...j->...", X, A2, X)
    ax.contour(x1, x2, f, levels=25, colors="0.7", linewidths=0.7, linestyles="solid")
    styles = {"vanilla": ("tab:red", "-"), "natural": ("tab:blue", "-"),
              "natural (full covariance)": ("tab:purple", "--")}
    for name, runs in flows.items():
        color, ls = styles[name]
        for k, run in enumerate(runs):
            ax.plot(run["x"][:, 0], run["x"][:, 1], color=color, ls=ls, lw=1.5,
                    label=f"{name} flow" if k == 0 else None)
            ax.plot(*run["x"][0, :2], "o", color="k", ms=4)
    ax.plot(*quadratic_maximiser(B2, A2), "k*", ms=10)
    ax.set(xlabel=r"$\mu_1$", ylabel=r"$\mu_2$", aspect="equal",
           title=r"$f = x_1 + 2x_2 - 3x_1^2 - 2x_1x_2 - 2x_2^2$, $\Sigma_0 = [[1, -0.5], [-0.5, 2]]$")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", frameon=False)  # clear of the flows


# ----------------------------------------------------------------------- driver
def run(out: Path | str = "figures", quick: bool = False) -> Dict[str, Any]:
    """Integrate every flow, draw the three figures, return the flows and the key numbers."""
    from matplotlib.figure import Figure

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    grid = 60 if quick else 200

    starts_q = [(-1.0, 1.5), (1.2, 1.0)] if quick else [(-1.0, 1.5), (1.2, 1.0), (1.0, 1.8), (-1.2, 0.5), (0.6, 0.3)]
    quad = univariate_flows(QUADRATIC, starts_q, t_vanilla=10.0, t_natural=2e3)
    mc_step, mc_steps = 0.005, 300 if quick else 1000
    mc = mc_natural_ascent(QUADRATIC, *starts_q[0], step=mc_step, n_steps=mc_steps,
                           n_samples=400 if quick else 2000, seed=1)
    exact = quad["natural"][0]["sol"](mc_step * np.arange(mc_steps + 1)).T
    mc_gap = float(np.abs(mc - exact).max())

    # from (-1, 0.8) the vanilla flow ends on the local maximum -sqrt(2), the natural flow on the global +sqrt(2)
    starts_4 = [(-1.0, 0.8), (0.5, 1.5)]
    if not quick:
        starts_4 += [(-1.5, 1.0), (-1.5, 1.5), (-2.0, 0.3), (-0.5, 0.3), (1.8, 0.6)]
    quart = univariate_flows(QUARTIC, starts_4, t_vanilla=10.0, t_natural=2e3)

    starts_2 = [(-1.5, -1.5), (1.5, 2.0)] if quick else [(-1.5, -1.5), (1.5, 2.0), (1.5, -1.5), (-1.5, 2.0)]
    multi = multivariate_flows(starts_2, t_vanilla=6.0, t_natural=4.0, t_full=20.0 if quick else 200.0)

    gaps = chart_dependence(QUADRATIC, starts_q[0], t_end=0.3)

    maxima = [r.real for r in np.polynomial.Polynomial(QUARTIC).deriv().roots()
              if abs(r.imag) < 1e-12 and np.polynomial.Polynomial(QUARTIC).deriv(2)(r.real) < 0]
    figures = []
    for name, draw in (
            ("quadratic", lambda fig: _draw_univariate(fig, quad, QUADRATIC, r"$f = x - 3x^2$", (-1.5, 1.5),
                                                       (0, 2.0), grid, [1 / 6], mc)),
            ("quartic", lambda fig: _draw_univariate(fig, quart, QUARTIC, r"$f = 6x + 8x^2 - x^3 - 2x^4$",
                                                     (-2.5, 2.5), (0, 2.2), grid, maxima)),
            ("2d", lambda fig: _draw_multivariate(fig, multi, grid))):
        fig = Figure(figsize=(8.4, 5.2), layout="constrained")
        draw(fig)
        path = out / f"gaussian_flows_{name}.png"
        fig.savefig(path, dpi=110)
        figures.append(str(path))
        logger.info("wrote %s", path)

    def ends(flows):
        return {name: [run["x"][-1] for run in runs] for name, runs in flows.items()}

    results = {
        "figures": figures,
        "flows": {"quadratic": quad, "quartic": quart, "2d": multi},
        "starts": {"quadratic": starts_q, "quartic": starts_4, "2d": starts_2},
        "end_points": {"quadratic": ends(quad), "quartic": ends(quart), "2d": ends(multi)},
        "quartic_maximisers": maxima,
        "mc_path": mc, "mc_step": mc_step, "mc_gap": mc_gap,
        "chart_gap_natural": gaps["natural"], "chart_gap_vanilla": gaps["vanilla"],
    }
    logger.info("Monte Carlo natural gradient vs exact natural flow: max gap %.3g over %d steps", mc_gap, mc_steps)
    logger.info("flow integrated in (mu, sigma) vs in theta: natural gap %.2e, vanilla gap %.2e",
                gaps["natural"], gaps["vanilla"])
    return results


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="figures", help="folder for the PNG figures (default: ./figures)")
    parser.add_argument("--quick", action="store_true", help="fewer starts and samples (a few seconds)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    res = run(args.out, quick=args.quick)
    print(f"{'problem':<10} {'flow':<26} {'start':<16} {'end':<28}")
    for problem, flows in res["flows"].items():
        for name, runs in flows.items():
            for start, r in zip(res["starts"][problem], runs):
                print(f"{problem:<10} {name:<26} {str(tuple(start)):<16} "
                      f"{np.array2string(r['x'][-1], precision=4, suppress_small=True):<28} (t = {r['t'][-1]:.4g})")
    print(f"Monte Carlo natural gradient vs exact natural flow: max gap {res['mc_gap']:.3g}")
    print(f"(mu, sigma) vs theta chart: natural flows differ by {res['chart_gap_natural']:.2e}, "
          f"vanilla flows by {res['chart_gap_vanilla']:.2e}")
    return res


if __name__ == "__main__":
    main()
