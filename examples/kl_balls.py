r"""KL balls around univariate Gaussians vs the Fisher metric ellipses, :math:`\varepsilon = 0.02` (Amari & Nagaoka 2000).

Amari's natural gradient replaces the Euclidean unit ball of steepest ascent by the ball of
constant KL divergence :math:`\{q : \mathrm{KL}(p\|q) = \varepsilon\}`, whose second-order
model is the metric ellipse :math:`\tfrac12\Delta^TG(p)\Delta = \varepsilon` (Fisher = Hessian of
KL). In the chart :math:`(\mu, \sigma)`, with :math:`G = \mathrm{diag}(1, 2)/\sigma^2` and

.. math:: \mathrm{KL}(p_0\|p_1) = \log\frac{\sigma_1}{\sigma_0}
          + \frac{\sigma_0^2 + (\mu_0 - \mu_1)^2}{2\sigma_1^2} - \frac12,

* the balls shrink with :math:`\sigma`: :math:`x \mapsto a + bx` maps :math:`N(\mu, \sigma^2)` to
  :math:`N(a + b\mu, b^2\sigma^2)` and leaves KL unchanged, so the ball around
  :math:`(\mu, \sigma)` is the ball around :math:`(0, 1)` scaled by :math:`\sigma`;
* the exact ball and the ellipse differ by :math:`O(\sqrt\varepsilon)` (relative radius), so they
  nearly coincide at :math:`\varepsilon = 0.02` and visibly part at :math:`\varepsilon = 1`.

The curves come from :func:`infogeo.viz.plot_kl_ball` on the Gaussian family in the
:math:`(\mu, \sigma)` chart (``ig.Gaussian(dim=1, covariance="diagonal").in_chart("mean_std")``, the library's Fisher
metric pulled back from :math:`(\mu, \sigma^2)`).

Run ``python examples/kl_balls.py --out figures`` (``--quick`` for a fast run) to write
``kl_balls_eps0.02.png`` and ``kl_balls_eps1.png``.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import numpy as np


logger = logging.getLogger("infogeo.examples.kl_balls")

CENTRES = [(0.0, 1.0), (2.0, 1.5), (-2.0, 1.5), (1.0, 0.4), (-1.0, 0.4), (0.0, 2.2)]
EPS = 0.02
SWEEP = (0.005, 0.02, 0.08, 0.32, 1.0)


def run(out: Path | str = "figures", quick: bool = False) -> Dict[str, Any]:
    """Draw the KL balls at eps = 0.02 and eps = 1, measure ball vs ellipse over a sweep of eps."""
    import infogeo as ig

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n_rays = 48 if quick else 360
    M = ig.Gaussian(dim=1, covariance="diagonal").in_chart("mean_std")

    import matplotlib.pyplot as plt

    figures, drawn = [], []
    for centres, eps, title, name in (
            (CENTRES, EPS, rf"KL balls around $N(\mu, \sigma^2)$, $\varepsilon$ = {EPS:g}", f"kl_balls_eps{EPS:g}.png"),
            ([CENTRES[0]], 1.0, r"KL ball around $N(0, 1)$, $\varepsilon$ = 1", "kl_balls_eps1.png")):
        plt.figure(figsize=(7.0, 4.6))
        ax = ig.viz.plot_kl_ball(M, centres, eps, n_rays=n_rays, title=title)
        ax.set_aspect("equal")
        drawn.append(ax.infogeo_data)
        plt.savefig(out / name, dpi=110, bbox_inches="tight")
        plt.close()
        figures.append(str(out / name))
        logger.info("wrote %s", out / name)

    # ball vs ellipse around N(0, 1) as eps grows: the relative gap max_d |r_KL(d) / r_G(d) - 1|
    sweep = {}
    for eps in SWEEP:
        ball = ig.viz.kl_ball(M, np.array(CENTRES[0]), eps, n_rays=n_rays)
        sweep[eps] = {"forward": ball["deviation_forward"], "reverse": ball["deviation_reverse"]}
    return {"figures": figures, "balls": drawn[0], "ball_eps1": drawn[1][0],
            "deviation": sweep, "centres": CENTRES, "eps": EPS}


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="figures", help="folder for the PNG figures (default: ./figures)")
    parser.add_argument("--quick", action="store_true", help="fewer rays per ball (a few seconds)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    res = run(args.out, quick=args.quick)
    print("relative deviation of the exact KL ball from the metric ellipse around N(0, 1)")
    print(f"{'eps':>7} {'KL(p||q)':>10} {'KL(q||p)':>10} {'KL(p||q)/sqrt(eps)':>20}")
    for eps, d in res["deviation"].items():
        print(f"{eps:>7g} {100 * d['forward']:>9.2f}% {100 * d['reverse']:>9.2f}% {d['forward'] / np.sqrt(eps):>20.3f}")
    return res


if __name__ == "__main__":
    main()
