r"""Gamma distributions with shape :math:`k > 0` and rate :math:`r > 0`.

:math:`p(x) = \frac{r^k}{\Gamma(k)} x^{k-1} e^{-rx}`: sufficient statistics
:math:`t(x) = (\log x, x)`, natural parameters :math:`\theta = (k, -r)` (base measure
:math:`1/x`), log-partition :math:`\psi(\theta) = \log\Gamma(\theta_1) - \theta_1\log(-\theta_2)`.
The standard chart is :math:`(k, r)`; Fisher there is
:math:`\begin{pmatrix}\psi_1(k) & -1/r\\ -1/r & k/r^2\end{pmatrix}`.
Geodesics have no closed form (the generic ODE solvers apply).
"""
import numpy as np

import infogeo as ig
from infogeo import backend as B
from infogeo.statistical import Chart


def _check(s):
    if not np.all(B.to_numpy(s) > 0):
        raise ValueError(f"shape and rate must be positive, got {B.to_numpy(s).tolist()}")


def _fisher(s):
    k, r = s[0], s[1]
    return B.stack([B.stack([B.polygamma(1, k), -1.0 / r]), B.stack([-1.0 / r, k / r ** 2])])


class Gamma(ig.ExponentialFamily):
    coordinate_names = ("shape $k$", "rate $r$")

    def __init__(self, chart=None):
        flip = lambda s: B.stack([s[0], -s[1]])  # noqa: E731  (k, r) <-> (k, -r)
        super().__init__(
            sufficient_statistics=lambda x: np.stack([np.log(x), np.asarray(x, dtype=float)], -1).reshape(-1, 2),
            log_partition=lambda th: B.gammaln(th[0]) - th[0] * B.log(-th[1]),
            dim=2, log_base_measure=lambda x: -np.log(np.asarray(x, dtype=float)).reshape(-1),
            natural_domain=lambda th: bool(B.to_numpy(th)[0] > 0 and B.to_numpy(th)[1] < 0),
            natural_domain_description="theta_1 = shape > 0 and theta_2 = -rate < 0",
            sampler=lambda th, n, rng: rng.gamma(th[0], -1.0 / th[1], n),
            standard_chart=Chart("standard", flip, flip, _check, "(shape, rate), both positive",
                                 parameters={"shape": (), "rate": ()}, fisher=_fisher),
            chart=chart, name="Gamma")

    def random_point(self, rng=None, scale=1.0):
        k, r = np.random.default_rng(rng).uniform(0.5, 5.0, size=2)
        return self.point(shape=k, rate=r)


def make(chart=None):
    return Gamma(chart)
