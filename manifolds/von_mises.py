r"""Von Mises distributions on the circle, with location :math:`\mu` and concentration :math:`\kappa > 0`.

:math:`p(x) = e^{\kappa\cos(x - \mu)} / (2\pi I_0(\kappa))` on :math:`[-\pi, \pi)`: sufficient
statistics :math:`t(x) = (\cos x, \sin x)`, natural parameters
:math:`\theta = \kappa(\cos\mu, \sin\mu)` (base measure 1), log-partition
:math:`\psi(\theta) = \log 2\pi + \log I_0(|\theta|)`, moments
:math:`\eta = A(\kappa)(\cos\mu, \sin\mu)` with :math:`A = I_1/I_0`.  The standard chart
:math:`(\mu, \kappa)` is polar coordinates around the uniform distribution :math:`\theta = 0`
(excluded here); there the Fisher metric is :math:`\mathrm{diag}(\kappa A(\kappa), A'(\kappa))`,
:math:`A' = 1 - A/\kappa - A^2`.  :math:`\mu` is an angle: the chart is the universal cover,
and points whose locations differ by :math:`2\pi` are the same distribution.  Computed in numpy only
(scipy's Bessel functions): torch tensors are refused with a ``TypeError``.
"""
import numpy as np
from autograd.numpy import arctan2
from autograd.scipy.special import ive

import infogeo as ig
from infogeo import backend as B
from infogeo.statistical import Chart


def log_i0(r):
    r""":math:`\log I_0(r)` without overflow: :math:`I_0(r) = e^r\,\mathrm{ive}(0, r)` (differentiable to any order)."""
    return B.log(ive(0, r)) + r


def bessel_ratio(kappa):
    r""":math:`A(\kappa) = I_1(\kappa)/I_0(\kappa)`, the mean resultant length."""
    return ive(1, kappa) / ive(0, kappa)


def _numpy_only(x):
    if B.is_torch(x):
        raise TypeError("VonMises is computed in numpy only (scipy's Bessel functions take no torch tensors); "
                        "pass numpy arrays")


def _in_domain(th):
    _numpy_only(th)
    return bool(np.all(np.isfinite(B.to_numpy(th))) and np.any(B.to_numpy(th) != 0))


def _check(s):
    _numpy_only(s)
    if not float(B.to_numpy(s)[1]) > 0:
        raise ValueError(f"the concentration must be positive, got (loc, concentration) = {B.to_numpy(s).tolist()}")


def _fisher(s):
    kappa = s[1]
    a = bessel_ratio(kappa)
    zero = 0.0 * kappa
    return B.stack([B.stack([kappa * a, zero]), B.stack([zero, 1.0 - a / kappa - a ** 2])])


class VonMises(ig.ExponentialFamily):
    coordinate_names = (r"location $\mu$", r"concentration $\kappa$")

    def __init__(self, chart=None):
        super().__init__(
            sufficient_statistics=lambda x: np.stack([np.cos(x), np.sin(x)], -1).reshape(-1, 2),
            log_partition=lambda th: np.log(2 * np.pi) + log_i0(B.sqrt(B.sum(th * th))), dim=2,
            natural_domain=_in_domain,
            natural_domain_description="theta != 0 (the uniform distribution is the chart's pole)",
            sampler=lambda th, n, rng: rng.vonmises(np.arctan2(th[1], th[0]), np.hypot(*th), n),
            standard_chart=Chart(
                "standard", lambda s: s[1] * B.stack([B.cos(s[0]), B.sin(s[0])]),
                lambda th: B.stack([arctan2(th[1], th[0]), B.sqrt(B.sum(th * th))]),
                _check, "(loc, concentration) with concentration > 0",
                parameters={"loc": (), "concentration": ()}, fisher=_fisher),
            chart=chart, name="VonMises")

    def random_point(self, rng=None, scale=1.0):
        rng = np.random.default_rng(rng)
        return self.point(loc=rng.uniform(-2.5, 2.5), concentration=rng.uniform(0.3, 4.0))


def make(chart=None):
    return VonMises(chart)
