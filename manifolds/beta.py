r"""Beta distributions :math:`\mathrm{Beta}(\alpha, \beta)` on (0, 1), with the Fisher metric.

Exponential family with sufficient statistics :math:`t(x) = (\log x, \log(1-x))`,
natural parameters :math:`\theta = (\alpha, \beta)` (base measure :math:`1/(x(1-x))`) and
log-partition :math:`\psi(\theta) = \log\Gamma(\alpha) + \log\Gamma(\beta) - \log\Gamma(\alpha+\beta)`.
The standard chart is :math:`(\alpha, \beta)` itself; Fisher :math:`= \nabla^2\psi`
(trigamma terms), moments :math:`\eta = (\psi_0(\alpha) - \psi_0(\alpha+\beta), \psi_0(\beta) - \psi_0(\alpha+\beta))`.
Written only against infogeo's public API; copy it to prototype a family.
"""
import numpy as np
from autograd.scipy.special import gammaln

import infogeo as ig
from infogeo import backend as B


class Beta(ig.ExponentialFamily):
    coordinate_names = (r"$\alpha$", r"$\beta$")

    def __init__(self, chart=None):
        super().__init__(
            sufficient_statistics=lambda x: np.stack([np.log(x), np.log1p(-x)], axis=-1).reshape(-1, 2),
            log_partition=lambda th: gammaln(th[0]) + gammaln(th[1]) - gammaln(th[0] + th[1]),
            dim=2, log_base_measure=lambda x: -np.log(x) - np.log1p(-x),
            natural_domain=lambda th: bool(np.all(B.to_numpy(th) > 0)),
            natural_domain_description="alpha > 0 and beta > 0",
            sampler=lambda th, n, rng: np.random.default_rng(rng).beta(*B.to_numpy(th), size=n),
            chart=chart, name="Beta")

    def point(self, coords=None, *, alpha=None, beta=None):
        """A point from chart coordinates, or from ``alpha=`` and ``beta=``."""
        if coords is not None:
            return super().point(coords)
        if alpha is None or beta is None:
            raise ValueError("give coords, or both alpha= and beta=")
        return self.natural_point([float(alpha), float(beta)])

    def parameters(self, p):
        a, b = B.to_numpy(self.to_natural(p))
        return {"alpha": float(a), "beta": float(b)}


def make(chart=None):
    return Beta(chart)
