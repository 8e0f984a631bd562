r"""Dirichlet distributions :math:`\mathrm{Dir}(\alpha)` on the open simplex of :math:`\mathbb{R}^k`.

Sufficient statistics :math:`t(x) = \log x`, natural parameters the concentration
:math:`\theta = \alpha` (base measure :math:`\prod_i 1/x_i`), log-partition
:math:`\psi(\alpha) = \sum_i \log\Gamma(\alpha_i) - \log\Gamma(\sum_i\alpha_i)`; the
Fisher metric :math:`\nabla^2\psi = \mathrm{diag}(\psi_1(\alpha_i)) - \psi_1(\sum\alpha)\,\mathbf 1\mathbf 1^T`.
Observations are rows on the open simplex (positive, summing to 1).
``load_manifold("dirichlet", k=4)`` picks the number of outcomes (default 3).
"""
import numpy as np

import infogeo as ig
from infogeo import backend as B
from infogeo.statistical import Chart, log_gamma_variates, simplex_from_logs


def _check(a):
    if not np.all(B.to_numpy(a) > 0):
        raise ValueError(f"concentrations must be positive, got {B.to_numpy(a).tolist()}")


def _fisher(a):
    """The Fisher matrix at points ``a`` of shape ``(..., k)``: one trigamma call per term for a whole batch."""
    if len(a.shape) == 1:   # one point (the ODE solvers' calls): B.diag differentiates faster than diag_embed
        return B.diag(B.polygamma(1, a)) - B.polygamma(1, B.sum(a))
    return B.diag_embed(B.polygamma(1, a)) - B.polygamma(1, B.sum(a, axis=-1, keepdims=True))[..., None]


class Dirichlet(ig.ExponentialFamily):
    def __init__(self, k=3, chart=None):
        if int(k) != k or k < 2:
            raise ValueError(f"a Dirichlet family needs k >= 2 outcomes, got {k!r}")
        self.k = k = int(k)
        ident = lambda a: a  # noqa: E731  (the concentration is the natural parameter)

        def log_x(x):
            x = np.asarray(x, dtype=float).reshape(-1, k)
            # the support is the open simplex: t(x) = log x alone would take any positive rows
            if np.any(x <= 0) or np.any(np.abs(x.sum(1) - 1.0) > 1e-9):
                raise ValueError(f"Dirichlet observations must lie on the open simplex: rows of {k} positive "
                                 "entries summing to 1")
            return np.log(x)

        super().__init__(
            sufficient_statistics=log_x,
            log_partition=lambda a: B.sum(B.gammaln(a)) - B.gammaln(B.sum(a)),
            dim=k, log_base_measure=lambda x: -log_x(x).sum(1),
            natural_domain=lambda a: bool(np.all(B.to_numpy(a) > 0)),
            natural_domain_description="positive concentrations",
            # in log space: at tiny concentrations rng.dirichlet returns exact 0s, outside the support
            sampler=lambda a, n, rng: simplex_from_logs(log_gamma_variates(a, n, rng)),
            standard_chart=Chart("standard", ident, ident, _check, f"{k} positive concentrations",
                                 parameters={"concentration": (k,)}, fisher=_fisher, vectorized=True),
            chart=chart, name=f"Dirichlet({k})")

    def random_point(self, rng=None, scale=1.0):
        return self.point(concentration=np.random.default_rng(rng).uniform(0.5, 5.0, size=self.k))


def make(k=3, chart=None):
    return Dirichlet(k, chart)
