r"""Default strategy parameters of the IGO / CMA-ES search on Gaussians.

The constants are the published defaults of Hansen's CMA-ES tutorial (2016,
Table 1 and Eqs. 49-58), which come from the IGO learning rates divided by the
number of free parameters they update, plus the cumulation constants of the
evolution paths (Hansen & Ostermeier 2001) and the separable learning rates of
Ros & Hansen (2008).  Nothing here is tuned to a benchmark.  The step-size
cumulation rate :math:`c_\sigma` departs from the tutorial in two ways, both as
in the reference implementation (the ``cma`` package; the tests compare the
values): its denominator has ``+ 3`` where the tutorial has ``+ 5`` (the path
forgets slightly faster), and it is bounded by :math:`1/2`, so that
:math:`p_\sigma` averages over a backward horizon :math:`1/c_\sigma` of at least
two iterations.  The bound is inactive for the default population
(:math:`c_\sigma > 1/2` needs :math:`\mu_\mathrm{eff} > d - 1`) and matters for
the large populations of IPOP/BIPOP restarts, where the unbounded value tends
to 1 and step-size control reacts to single-iteration noise (see the ``cma``
package's issue #231 on CSA with large populations).  The damping
:math:`d_\sigma` is the tutorial's; ``cma`` damps more for populations far
above the default, which only the restarts use.

With :math:`d` the dimension, :math:`\lambda = 4 + \lfloor 3\ln d\rfloor` and the
quantile weights :math:`w'_i` (:func:`~infogeo.solvers.igo.quantile_weights`):

* :math:`\mu_\mathrm{eff} = (\sum_{w'_i>0} w'_i)^2/\sum_{w'_i>0} w_i'^2`, the
  variance-effective selection mass;
* :math:`c_\sigma = \min\big(\tfrac12, (\mu_\mathrm{eff} + 2)/(d + \mu_\mathrm{eff} + 3)\big)`,
  :math:`d_\sigma = 1 + 2\max(0, \sqrt{(\mu_\mathrm{eff} - 1)/(d + 1)} - 1) + c_\sigma`;
* :math:`c_c = (4 + \mu_\mathrm{eff}/d)/(d + 4 + 2\mu_\mathrm{eff}/d)`;
* :math:`c_1 = 2/((d + 1.3)^2 + \mu_\mathrm{eff})`,
  :math:`c_\mu = \min(1 - c_1, 2(\tfrac14 + \mu_\mathrm{eff} + 1/\mu_\mathrm{eff} - 2)/((d + 2)^2 + \mu_\mathrm{eff}))`;
  for the diagonal family both are multiplied by :math:`(d + 2)/3`, the ratio of
  free covariance parameters (Ros & Hansen 2008);
* positive weights normalised to sum 1; negative weights (active CMA,
  Jastrebski & Arnold 2006) scaled to total mass
  :math:`\min(1 + c_1/c_\mu,\ 1 + 2\mu^-_\mathrm{eff}/(\mu_\mathrm{eff} + 2),\ (1 - c_1 - c_\mu)/(d c_\mu))`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .igo import quantile_weights

__all__ = ["StrategyParameters", "default_popsize"]


def default_popsize(dim: int) -> int:
    r""":math:`\lambda = 4 + \lfloor 3 \ln d \rfloor`."""
    return 4 + int(3 * math.log(dim))


@dataclass(frozen=True)
class StrategyParameters:
    r"""Learning rates, weights and cumulation constants for dimension ``dim`` and population ``popsize``.

    Attributes
    ----------
    weights : (popsize,) array
        Rank weights, best first; the first ``mu`` are positive and sum to 1.
    mu : int
        Number of positive weights (the parents of the mean update).
    mueff : float
    c_m, c_sigma, d_sigma, c_c, c_1, c_mu : float
        Mean learning rate, step-size cumulation and damping, covariance-path
        cumulation, rank-one and rank-:math:`\mu` learning rates.
    chi_n : float
        :math:`E\|N(0, I_d)\| \approx \sqrt d\,(1 - 1/(4d) + 1/(21d^2))`.
    """

    dim: int
    popsize: int
    weights: np.ndarray
    mu: int
    mueff: float
    c_m: float
    c_sigma: float
    d_sigma: float
    c_c: float
    c_1: float
    c_mu: float
    chi_n: float

    @classmethod
    def default(cls, dim: int, popsize: Optional[int] = None, *, diagonal: bool = False,
                c_m: float = 1.0, c_mu: Optional[float] = None, active: bool = True,
                free_entries: Optional[int] = None) -> "StrategyParameters":
        r"""The published defaults (see the module docstring); ``c_mu`` overrides the rank-mu rate.

        ``free_entries``: the number of free covariance parameters of a sub-model (a precision
        pattern); the rates grow by :math:`\max(1, \tfrac{d + 2}{3}\,d/m)`, the diagonal family's
        factor for its :math:`m = d`.
        """
        n = int(dim)
        if n < 1:
            raise ValueError(f"dim must be a positive integer, got {dim}")
        lam = default_popsize(n) if popsize is None else int(popsize)
        raw = quantile_weights(lam)
        mu = lam // 2
        pos, neg = raw[:mu], raw[mu:]
        mueff = pos.sum() ** 2 / (pos ** 2).sum()
        mueff_neg = neg.sum() ** 2 / (neg ** 2).sum() if neg.size and np.any(neg != 0) else 0.0
        c_sigma = min(0.5, (mueff + 2) / (n + mueff + 3))
        d_sigma = 1 + 2 * max(0.0, math.sqrt((mueff - 1) / (n + 1)) - 1) + c_sigma
        c_c = (4 + mueff / n) / (n + 4 + 2 * mueff / n)
        c_1 = 2 / ((n + 1.3) ** 2 + mueff)
        cmu = min(1 - c_1, 2 * (0.25 + mueff + 1 / mueff - 2) / ((n + 2) ** 2 + mueff))
        if diagonal or free_entries is not None:  # fewer free entries than d(d+1)/2: larger rates
            scale = (n + 2) / 3 if diagonal else max(1.0, (n + 2) / 3 * n / int(free_entries))
            c_1 = min(1.0, c_1 * scale)
            cmu = min(1 - c_1, cmu * scale)
        if c_mu is not None:
            if not 0 <= c_mu <= 1 - c_1:
                raise ValueError(f"c_mu must lie in [0, 1 - c_1] = [0, {1 - c_1:.4g}], got {c_mu}")
            cmu = float(c_mu)
        if not 0 < c_m <= 1:
            raise ValueError(f"c_m (mean learning rate) must lie in (0, 1], got {c_m}")
        w = np.empty(lam)
        w[:mu] = pos / pos.sum()
        if active and neg.size and cmu > 0:
            alpha_mu = 1 + c_1 / cmu
            alpha_mueff = 1 + 2 * mueff_neg / (mueff + 2)
            alpha_posdef = (1 - c_1 - cmu) / (n * cmu)
            w[mu:] = min(alpha_mu, alpha_mueff, alpha_posdef) * neg / np.abs(neg).sum()
        else:
            w[mu:] = 0.0
        chi_n = math.sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n * n))
        return cls(dim=n, popsize=lam, weights=w, mu=mu, mueff=float(mueff), c_m=float(c_m),
                   c_sigma=c_sigma, d_sigma=d_sigma, c_c=c_c, c_1=c_1, c_mu=cmu, chi_n=chi_n)

    @property
    def eigen_interval(self) -> int:
        r"""Iterations between eigendecompositions of :math:`C`: :math:`\max(1, \lfloor 1/(10 d (c_1 + c_\mu))\rfloor)`.

        The covariance moves by :math:`O(c_1 + c_\mu)` per iteration, so a decomposition
        this stale changes the sampled distribution by a negligible amount (tutorial, B.2).
        """
        rate = self.c_1 + self.c_mu
        return max(1, int(1 / (10 * self.dim * rate))) if rate > 0 else 10**9
