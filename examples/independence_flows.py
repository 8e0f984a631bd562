r"""Vanilla vs natural gradient on the independence model, in the mean and natural charts.

Minimise :math:`F(p) = E_p[f]`, :math:`f(x) = x_1 + 2x_2 + 3x_1x_2` on :math:`\{-1, +1\}^2`,
over the independence model :math:`p(x) = p_1(x_1)p_2(x_2)`; the minimum :math:`-4` is the
point mass on :math:`x = (+1, -1)`. In the marginal probabilities
:math:`\mu_i = P(x_i = +1)`, :math:`F(\mu) = -4\mu_1 - 2\mu_2 + 12\mu_1\mu_2`; in the natural
parameters :math:`\theta` (:math:`E[x_i] = \tanh\theta_i`),
:math:`\nabla_\theta F = \mathrm{Cov}_\theta(f, x)`.

* In :math:`\mu` the vanilla gradient runs into the boundary of the square (a projection
  would be needed) instead of reaching the optimum;
* in :math:`\theta` it vanishes on the plateaux (:math:`1 - \tanh^2\theta_i \to 0`);
* the natural gradient (the Fisher metric's sharp of :math:`dF`) is the same vector field in
  both charts; in :math:`\theta` it is the vanilla gradient in the mean chart
  :math:`\eta = E[x]` (Legendre duality), :math:`(1 + 3\eta_2, 2 + 3\eta_1)`.

The fields are drawn with :func:`infogeo.viz.plot_gradient_field` with fixed arrow scales
(:math:`\lambda = 0.025` in :math:`\mu`, :math:`0.15` in :math:`\theta`), and the descent paths
are those of the demo (:func:`infogeo.demo.independence_runs`: gradient descent with Armijo
steps, Euclidean vs Fisher metric, started at :math:`\mu = (0.6, 0.7)`).

Run ``python examples/independence_flows.py --out figures`` (``--quick`` for a fast run) to write
``independence_mu.png`` and ``independence_theta.png``.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import numpy as np

from infogeo.demo import independence_runs

logger = logging.getLogger("infogeo.examples.independence_flows")

#: chart -> (file name, chart symbol, window, arrow scale lambda)
CHARTS = {
    "standard": ("independence_mu.png", r"\mu", ((0.03, 0.97), (0.03, 0.97)), 0.025),
    "natural": ("independence_theta.png", r"\theta", ((-3.0, 3.0), (-3.0, 3.0)), 0.15),
}


def run(out: Path | str = "figures", quick: bool = False) -> Dict[str, Any]:
    """Draw the vanilla and natural fields with the descent paths in both charts; return fields and end points."""
    import matplotlib.pyplot as plt

    import infogeo as ig

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    studies = independence_runs(quick)
    results: Dict[str, Any] = {"figures": [], "fields": {}, "runs": {}}
    for chart, (name, symbol, (xlim, ylim), lam) in CHARTS.items():
        study = studies[chart]
        labels = (f"${symbol}_1$", f"${symbol}_2$")
        fig, axes = plt.subplots(1, 2, figsize=(11.0, 5.0), layout="constrained")
        ig.viz.plot_gradient_field(study["M"], study["F"], xlim=xlim, ylim=ylim, n=9 if quick else 15,
                                   step=lam, grid=40 if quick else 100, labels=labels, ax=axes,
                                   title=f"$E_p[x_1 + 2x_2 + 3x_1x_2]$ in the chart ${symbol}$, "
                                         rf"arrows $\lambda$ = {lam:g}")
        for axis, method in zip(axes, ("vanilla", "natural")):
            path = study["runs"][method].path()
            axis.plot(path[:, 0], path[:, 1], ".-", color="tab:red", ms=3, lw=1.2,
                      label=f"{method} gradient descent ({len(path) - 1} it.)")
            # below the panel, clear of the arrows and the path
            axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize="small", frameon=False)
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        logger.info("wrote %s", out / name)
        results["figures"].append(str(out / name))
        results["fields"][chart] = axes[0].infogeo_data
        results["runs"][chart] = {
            method: {"x": np.asarray(r.x), "probs": np.asarray(study["M"].to_chart(r.x, "standard")),
                     "fun": float(r.fun), "nit": r.nit}
            for method, r in study["runs"].items()}
    return results


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="figures", help="folder for the PNG figures (default: ./figures)")
    parser.add_argument("--quick", action="store_true", help="40 iterations and coarse grids (a few seconds)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    res = run(args.out, quick=args.quick)
    print(f"{'chart':<9} {'method':<8} {'iterations':>10} {'final E[f]':>12}  final P(x_i = +1)")
    for chart, runs in res["runs"].items():
        for method, r in runs.items():
            print(f"{chart:<9} {method:<8} {r['nit']:>10d} {r['fun']:>12.6f}  {np.round(r['probs'], 4)}")
    return res


if __name__ == "__main__":
    main()
