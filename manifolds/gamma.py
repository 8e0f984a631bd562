r"""Gamma distributions with shape :math:`k > 0` and rate :math:`r > 0`.

:math:`p(x) = \frac{r^k}{\Gamma(k)} x^{k-1} e^{-rx}`: sufficient statistics
:math:`t(x) = (\log x, x)`, natural parameters :math:`\theta = (k, -r)` (base measure
:math:`1/x`), log-partition :math:`\psi(\theta) = \log\Gamma(\theta_1) - \theta_1\log(-\theta_2)`.
The standard chart is :math:`(k, r)`; Fisher there is
:math:`\begin{pmatrix}\psi_1(k) & -1/r\\ -1/r & k/r^2\end{pmatrix}`.
"""
import numpy as np
from autograd.scipy.special import gammaln

import infogeo as ig
from infogeo import backend as B
from infogeo.statistical import Chart


class Gamma(ig.ExponentialFamily):
    coordinate_names = ("shape $k$", "rate $r$")

    def __init__(self, chart=None):
        super().__init__(
            sufficient_statistics=lambda x: np.stack([np.log(x), np.asarray(x, dtype=float)], -1).reshape(-1, 2),
            log_partition=lambda th: gammaln(th[0]) - th[0] * B.log(-th[1]),
            dim=2, log_base_measure=lambda x: -np.log(np.asarray(x, dtype=float)).reshape(-1),
            natural_domain=lambda th: bool(B.to_numpy(th)[0] > 0 and B.to_numpy(th)[1] < 0),
            natural_domain_description="theta_1 = shape > 0 and theta_2 = -rate < 0",
            sampler=lambda th, n, rng: np.random.default_rng(rng).gamma(B.to_numpy(th)[0], -1 / B.to_numpy(th)[1], n),
            chart=chart, name="Gamma")

    def _make_charts(self):
        charts = super()._make_charts()

        def check(s):
            a = B.to_numpy(s)
            if not np.all(a > 0):
                raise ValueError(f"shape and rate must be positive, got {a.tolist()}")
        flip = lambda s: B.stack([s[0], -s[1]])  # noqa: E731  (k, r) <-> (k, -r)
        charts["standard"] = Chart("standard", flip, flip, check, "(shape, rate), both positive")
        return charts

    def point(self, coords=None, *, shape=None, rate=None):
        """A point from chart coordinates, or from ``shape=`` and ``rate=``."""
        if coords is not None:
            return super().point(coords)
        if shape is None or rate is None:
            raise ValueError("give coords, or both shape= and rate=")
        return self.natural_point([float(shape), -float(rate)])

    def parameters(self, p):
        k, r = B.to_numpy(self.to_chart(p, "standard"))
        return {"shape": float(k), "rate": float(r)}


def make(chart=None):
    return Gamma(chart)
