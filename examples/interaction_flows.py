r"""Natural-gradient flows of a stochastic relaxation with and without the interaction statistic.

Minimise :math:`F(\theta) = E_\theta[f]`, :math:`f(x) = x_1 + 2x_2 + 3x_1x_2` on :math:`\{-1, +1\}^2`
(minimum :math:`-4` at :math:`x = (+1, -1)`), by the exact natural-gradient flow
:math:`\dot\theta = -F(\theta)^{-1}\nabla_\theta E_\theta[f]` over two exponential families:

* the independence model, statistics :math:`x_1, x_2` (``ig.IsingModel(2)``): :math:`f` is not in
  the span of its statistics, and the flow ends at the vertex :math:`(+1, -1)` or at the
  vertex :math:`(-1, +1)` (where :math:`f = -2`) depending on where it starts;
* the interaction model, statistics :math:`x_1, x_2, x_1x_2` (``ig.IsingModel(2, edges=[(0, 1)])``):
  :math:`f` is in the span, the natural gradient is the constant :math:`(1, 2, 3)`, and every flow
  is a straight line in :math:`\theta` to the point mass on the minimum (Malagò & Pistone 2015).

Each family starts from the same 25 distributions (a grid of marginals, no interaction), and each flow
(:func:`infogeo.solvers.natural_gradient_flow`) runs until one outcome has probability
:math:`1 - 10^{-4}`.  The figures show the paths in the natural parameters :math:`(\theta_1, \theta_2)`
and in the mean parameters :math:`(\eta_1, \eta_2) = (E[x_1], E[x_2])` (the first two coordinates
of :math:`\theta` and :math:`\eta` for the interaction model), coloured by the vertex they reach, over
the level sets of :math:`E[f]` on the independence model.

Run ``python examples/interaction_flows.py --out figures`` (``--quick``: 9 starts, coarser paths) to write
``interaction_flows_theta.png`` and ``interaction_flows_eta.png``.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import numpy as np

logger = logging.getLogger("infogeo.examples.interaction_flows")


def f_seed(X):
    return X[:, 0] + 2 * X[:, 1] + 3 * X[:, 0] * X[:, 1]


def flows(quick: bool = False) -> Dict[str, Any]:
    """Both families' flows from a grid of starts: paths in theta and eta, the vertex each reaches."""
    import infogeo as ig
    from infogeo.solvers import natural_gradient_flow

    grid = np.linspace(-2.0, 2.0, 3 if quick else 5)
    starts = [np.array([a, b]) for a in grid for b in grid]
    families = {"independence": ig.IsingModel(2), "interaction": ig.IsingModel(2, edges=[(0, 1)])}
    out: Dict[str, Any] = {}
    for name, M in families.items():
        runs = []
        for s in starts:
            theta0 = np.r_[s, np.zeros(M.dim - 2)]
            r = natural_gradient_flow(M, f_seed, theta0, tol=1e-4, max_step=0.2 if quick else 0.05)
            runs.append({"start": s, "theta": r.thetas[:, :2], "eta": np.asarray(M.moments(r.thetas))[:, :2],
                         "mode": r.mode, "at_minimum": r.at_minimum, "success": r.success})
        out[name] = runs
    return out


def run(out: Path | str = "figures", quick: bool = False) -> Dict[str, Any]:
    """Draw the flows of both families in theta and in eta; return the runs and the figure paths."""
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    res = flows(quick)
    colours = {True: "tab:green", False: "tab:red"}
    figures = []
    for chart, lim, level in (("theta", 5.5, lambda a, b: np.tanh(a) + 2 * np.tanh(b) + 3 * np.tanh(a) * np.tanh(b)),
                              ("eta", 1.05, lambda a, b: a + 2 * b + 3 * a * b)):
        symbol = r"\theta" if chart == "theta" else r"\eta"
        fig, axes = plt.subplots(1, 2, figsize=(11.0, 5.2), layout="constrained", sharex=True, sharey=True)
        span = np.linspace(-lim if chart == "theta" else -1, lim if chart == "theta" else 1, 200)
        A, Bm = np.meshgrid(span, span)
        for ax, (name, runs) in zip(axes, res.items()):
            cs = ax.contourf(A, Bm, level(A, Bm), levels=np.linspace(-4, 6, 21), cmap="Greys", alpha=0.45)
            for r in runs:
                p = r[chart]
                ax.plot(p[:, 0], p[:, 1], "-", color=colours[r["at_minimum"]], lw=1.3)
                ax.plot(p[0, 0], p[0, 1], "o", color="k", ms=3)
            n_ok = sum(r["at_minimum"] for r in runs)
            stats = "$x_1, x_2$" if name == "independence" else "$x_1, x_2, x_1x_2$"
            ax.set_title(f"{name} model ({stats}): {n_ok}/{len(runs)} flows reach the minimum", fontsize=10)
            ax.set_xlabel(f"${symbol}_1$")
            ax.set_ylabel(f"${symbol}_2$")
            ax.set_xlim(-lim, lim)
            ax.set_ylim(-lim, lim)
            if chart == "eta":
                for v, fv in (((1, -1), -4), ((-1, 1), -2), ((-1, -1), 0), ((1, 1), 6)):
                    ax.text(0.85 * v[0], 0.93 * v[1], f"f = {fv}", fontsize=8, ha="center", va="center",
                        bbox=dict(fc="white", ec="none", alpha=0.7))
        fig.colorbar(cs, ax=axes, shrink=0.8, label="$E[f]$ on the independence model")
        axes[0].plot([], [], color="tab:green", label="reaches the minimum $(+1, -1)$, $f = -4$")
        axes[0].plot([], [], color="tab:red", label="ends at $(-1, +1)$, $f = -2$")
        axes[0].plot([], [], "o", color="k", ms=3, label="start")
        fig.legend(loc="outside lower center", ncols=3, fontsize=9, frameon=False)
        fig.suptitle(f"natural-gradient flows of $E[x_1 + 2x_2 + 3x_1x_2]$ in the chart ${symbol}$")
        path = out / f"interaction_flows_{chart}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        logger.info("wrote %s", path)
        figures.append(str(path))
    res["figures"] = figures
    return res


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="figures", help="folder for the PNG figures (default: ./figures)")
    parser.add_argument("--quick", action="store_true", help="9 starts instead of 25, coarser paths")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    res = run(args.out, quick=args.quick)
    for name in ("independence", "interaction"):
        runs = res[name]
        print(f"{name:<12} model: {sum(r['at_minimum'] for r in runs)}/{len(runs)} flows reach the minimum; "
              f"the others end at {sorted({tuple(int(s) for s in r['mode']) for r in runs if not r['at_minimum']})}")
    return res


if __name__ == "__main__":
    main()
