r"""Exponential distributions :math:`p(x) = \lambda e^{-\lambda x}` on :math:`x > 0`, rate :math:`\lambda > 0`.

:math:`t(x) = x`, :math:`\theta = -\lambda`, :math:`\psi(\theta) = -\log(-\theta)`, base measure 1.
Standard chart :math:`\lambda`, where the Fisher metric is :math:`1/\lambda^2`.  In
:math:`u = \log\lambda` the metric is :math:`du^2`: :math:`\exp_\lambda(v) = \lambda e^{v/\lambda}`,
:math:`\log_\lambda(\mu) = \lambda\log(\mu/\lambda)`, distance :math:`|\log(\lambda_1/\lambda_2)|`
(the family is a complete line).
"""
import numpy as np

import infogeo as ig
from infogeo import backend as B
from infogeo.statistical import Chart, ClosedGeodesics


# every function below broadcasts over leading (batch) axes and works on numpy or torch
def _check(s):
    if not s.min() > 0:  # NaN fails too
        raise ValueError(f"the rate must be positive, got {B.to_numpy(s).min()}")


def _check_support(x):
    x = np.asarray(x, dtype=float).reshape(-1)
    if np.any(x < 0):
        raise ValueError("exponential observations must be non-negative")
    return x


def _log_ratio(mu, lam):
    """log(mu / lam): the ratio's log where it is a normal float, log mu - log lam where it over- or underflows."""
    # plain numpy arrays carry no gradient: numpy itself; else the backend's (autograd/torch) namespace, once
    xp = np if type(lam) is type(mu) is np.ndarray else B.ops_of(lam, mu)
    with np.errstate(over="ignore", under="ignore"):
        r = mu / lam
    normal = (r > 1e-300) & (r < 1e300)
    return xp.where(normal, xp.log(xp.where(normal, r, 1.0 + 0.0 * lam)), xp.log(mu) - xp.log(lam))


def _dist(lam, mu):
    return abs(_log_ratio(mu[..., 0], lam[..., 0]))


class Exponential(ig.ExponentialFamily):
    coordinate_names = (r"$\lambda$",)

    def __init__(self, chart=None):
        neg = lambda s: -s  # noqa: E731  (lambda <-> theta = -lambda)
        super().__init__(
            sufficient_statistics=lambda x: _check_support(x).reshape(-1, 1),
            log_partition=lambda th: -B.log(-th[..., 0]), dim=1,
            natural_domain=lambda th: bool(np.all(B.to_numpy(th)[..., 0] < 0)),
            natural_domain_description="theta = -rate < 0",
            sampler=lambda th, n, rng: rng.exponential(-1.0 / th[0], n),
            standard_chart=Chart("standard", neg, neg, _check, "rate > 0", parameters={"rate": ()},
                                 fisher=lambda lam: (1.0 / lam ** 2)[..., None], vectorized=True),
            geodesics=ClosedGeodesics(
                "standard", exp=lambda lam, v: lam * B.exp(v / lam),
                log=lambda lam, mu: lam * _log_ratio(mu, lam),
                dist=_dist, vectorized=True),
            vectorized=True, chart=chart, name="Exponential")

    def random_point(self, rng=None, scale=1.0):
        return self.point(rate=np.random.default_rng(rng).uniform(0.2, 5.0))


def make(chart=None):
    return Exponential(chart)
