r"""Dirichlet distributions :math:`\mathrm{Dir}(\alpha)` on the open simplex of :math:`\mathbb{R}^k`.

Sufficient statistics :math:`t(x) = \log x`, natural parameters the concentration
:math:`\theta = \alpha` (base measure :math:`\prod_i 1/x_i`), log-partition
:math:`\psi(\alpha) = \sum_i \log\Gamma(\alpha_i) - \log\Gamma(\sum_i\alpha_i)`; the
Fisher metric :math:`\nabla^2\psi = \mathrm{diag}(\psi_1(\alpha_i)) - \psi_1(\sum\alpha)\,\mathbf 1\mathbf 1^T`.
"""
import numpy as np
from autograd.scipy.special import gammaln

import infogeo as ig
from infogeo import backend as B


class Dirichlet(ig.ExponentialFamily):
    def __init__(self, k=3, chart=None):
        if int(k) != k or k < 2:
            raise ValueError(f"a Dirichlet family needs k >= 2 outcomes, got {k!r}")
        self.k = int(k)
        super().__init__(
            sufficient_statistics=lambda x: np.log(np.asarray(x, dtype=float)).reshape(-1, self.k),
            log_partition=lambda a: B.sum(gammaln(a)) - gammaln(B.sum(a)),
            dim=self.k, log_base_measure=lambda x: -np.log(np.asarray(x, dtype=float)).reshape(-1, self.k).sum(1),
            natural_domain=lambda a: bool(np.all(B.to_numpy(a) > 0)),
            natural_domain_description="positive concentrations",
            sampler=lambda a, n, rng: np.random.default_rng(rng).dirichlet(B.to_numpy(a), size=n),
            chart=chart, name=f"Dirichlet({self.k})")

    def point(self, coords=None, *, concentration=None):
        """A point from chart coordinates, or from ``concentration=`` (k positive numbers)."""
        if (coords is None) == (concentration is None):
            raise ValueError("give exactly one of coords or concentration=")
        if coords is not None:
            return super().point(coords)
        a = np.asarray(concentration, dtype=float).reshape(-1)
        if a.shape != (self.k,):
            raise ValueError(f"concentration must have {self.k} entries, got {a.shape[0]}")
        return self.natural_point(a)

    def parameters(self, p):
        return {"concentration": B.to_numpy(self.to_natural(p)).astype(float)}


def make(k=3, chart=None):
    return Dirichlet(k, chart)
