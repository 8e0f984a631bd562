r"""Beta distributions :math:`\mathrm{Beta}(\alpha, \beta)` on (0, 1), with the Fisher metric.

Exponential family with sufficient statistics :math:`t(x) = (\log x, \log(1-x))`,
natural parameters :math:`\theta = (\alpha, \beta)` (base measure :math:`1/(x(1-x))`) and
log-partition :math:`\psi(\theta) = \log\Gamma(\alpha) + \log\Gamma(\beta) - \log\Gamma(\alpha+\beta)`.
The standard chart is :math:`(\alpha, \beta)` itself, where the Fisher metric is
:math:`\nabla^2\psi = \mathrm{diag}(\psi_1(\alpha), \psi_1(\beta)) - \psi_1(\alpha+\beta)\,\mathbf 1\mathbf 1^T`
(trigamma :math:`\psi_1`); moments
:math:`\eta = (\psi_0(\alpha) - \psi_0(\alpha+\beta), \psi_0(\beta) - \psi_0(\alpha+\beta))`.
Geodesics have no closed form (the generic ODE solvers apply).
Written only against infogeo's public API; copy it to prototype a family.
"""
import numpy as np

import infogeo as ig
from infogeo import backend as B
from infogeo.statistical import Chart, log_gamma_variates, simplex_from_logs


def _check(s):
    if not np.all(B.to_numpy(s) > 0):
        raise ValueError(f"alpha and beta must be positive, got {B.to_numpy(s).tolist()}")


def _fisher(a):
    """The Fisher matrix at points ``a`` of shape ``(..., 2)``: one trigamma call per term for a whole batch."""
    if len(a.shape) == 1:   # one point (the ODE solvers' calls): B.diag differentiates faster than diag_embed
        return B.diag(B.polygamma(1, a)) - B.polygamma(1, B.sum(a))
    return B.diag_embed(B.polygamma(1, a)) - B.polygamma(1, B.sum(a, axis=-1, keepdims=True))[..., None]


class Beta(ig.ExponentialFamily):
    coordinate_names = (r"$\alpha$", r"$\beta$")

    def __init__(self, chart=None):
        ident = lambda s: s  # noqa: E731  (the standard parameters are the natural ones)
        super().__init__(
            sufficient_statistics=lambda x: np.stack([np.log(x), np.log1p(-x)], axis=-1).reshape(-1, 2),
            log_partition=lambda th: B.gammaln(th[0]) + B.gammaln(th[1]) - B.gammaln(th[0] + th[1]),
            dim=2, log_base_measure=lambda x: (-np.log(x) - np.log1p(-x)).reshape(-1),
            natural_domain=lambda th: bool(np.all(B.to_numpy(th) > 0)),
            natural_domain_description="alpha > 0 and beta > 0",
            # in log space: at tiny alpha or beta, rng.beta returns exact 0s and 1s, outside the support
            sampler=lambda th, n, rng: simplex_from_logs(log_gamma_variates(th, n, rng))[..., 0],
            standard_chart=Chart("standard", ident, ident, _check, "(alpha, beta), both positive",
                                 parameters={"alpha": (), "beta": ()}, fisher=_fisher, vectorized=True),
            chart=chart, name="Beta")

    def random_point(self, rng=None, scale=1.0):
        a, b = np.random.default_rng(rng).uniform(0.5, 5.0, size=2)
        return self.point(alpha=a, beta=b)


def make(chart=None):
    return Beta(chart)
