r"""Poisson distributions with rate :math:`\lambda > 0`.

:math:`t(x) = x`, :math:`\theta = \log\lambda`, :math:`\psi(\theta) = e^\theta`, base
measure :math:`1/x!`.  Standard chart :math:`\lambda`, where the Fisher metric is
:math:`1/\lambda`.  In :math:`u = 2\sqrt\lambda` the metric is :math:`du^2`, so geodesics
are straight in :math:`u`: :math:`\exp_\lambda(v) = (\sqrt\lambda + v / (2\sqrt\lambda))^2`
(defined while that root stays positive) and the Fisher–Rao distance is
:math:`2|\sqrt{\lambda_1} - \sqrt{\lambda_2}|`.
"""
import numpy as np
from scipy.special import gammaln

import infogeo as ig
from infogeo import backend as B
from infogeo.statistical import Chart, ClosedGeodesics

# every function below broadcasts over leading (batch) axes and works on numpy or torch


def _check(s):
    if not s.min() > 0:  # NaN fails too
        raise ValueError(f"the rate must be positive, got {B.to_numpy(s).min()}")


def _counts(x):
    x = np.asarray(x, dtype=float).reshape(-1)
    if np.any(x < 0) or np.any(x != np.round(x)):
        raise ValueError("Poisson observations must be non-negative integer counts")
    return x


def _exp(lam, v):
    root = B.sqrt(lam) + v / (2 * B.sqrt(lam))
    if not np.all(B.to_numpy(root) > 0):
        raise ValueError("the geodesic reaches rate 0 before t = 1; take a shorter step")
    return root ** 2


def _dist(lam, mu):
    # plain numpy arrays carry no gradient: numpy itself; else the backend's (autograd/torch) namespace, once
    xp = np if type(lam) is type(mu) is np.ndarray else B.ops_of(lam, mu)
    return 2 * xp.abs(xp.sqrt(mu[..., 0]) - xp.sqrt(lam[..., 0]))


class Poisson(ig.ExponentialFamily):
    coordinate_names = (r"$\lambda$",)

    def __init__(self, chart=None):
        super().__init__(
            sufficient_statistics=lambda x: _counts(x).reshape(-1, 1),
            log_partition=lambda th: B.exp(th[..., 0]), dim=1,
            log_base_measure=lambda x: -gammaln(_counts(x) + 1),
            sampler=lambda th, n, rng: rng.poisson(np.exp(th[0]), n),
            standard_chart=Chart("standard", B.log, B.exp, _check, "rate > 0", parameters={"rate": ()},
                                 fisher=lambda lam: (1.0 / lam)[..., None], vectorized=True),
            geodesics=ClosedGeodesics(
                "standard", exp=_exp,
                log=lambda lam, mu: 2 * B.sqrt(lam) * (B.sqrt(mu) - B.sqrt(lam)),
                dist=_dist, vectorized=True),
            vectorized=True, chart=chart, name="Poisson")

    def random_point(self, rng=None, scale=1.0):
        return self.point(rate=np.random.default_rng(rng).uniform(0.5, 8.0))


def make(chart=None):
    return Poisson(chart)
