r"""Poisson distributions with rate :math:`\lambda > 0`.

:math:`t(x) = x`, :math:`\theta = \log\lambda`, :math:`\psi(\theta) = e^\theta`, base
measure :math:`1/x!`.  Standard chart :math:`\lambda`, where the Fisher metric is
:math:`1/\lambda` and the Fisher-Rao distance :math:`2|\sqrt{\lambda_1} - \sqrt{\lambda_2}|`.
"""
import numpy as np
from scipy.special import gammaln as _gammaln_np

import infogeo as ig
from infogeo import backend as B
from infogeo.statistical import Chart


class Poisson(ig.ExponentialFamily):
    coordinate_names = (r"$\lambda$",)

    def __init__(self, chart=None):
        super().__init__(
            sufficient_statistics=lambda x: np.asarray(x, dtype=float).reshape(-1, 1),
            log_partition=lambda th: B.exp(th[0]), dim=1,
            log_base_measure=lambda x: -_gammaln_np(np.asarray(x, dtype=float).reshape(-1) + 1),
            sampler=lambda th, n, rng: np.random.default_rng(rng).poisson(np.exp(B.to_numpy(th)[0]), n),
            chart=chart, name="Poisson")

    def _make_charts(self):
        charts = super()._make_charts()

        def check(s):
            if not float(B.to_numpy(s)[0]) > 0:
                raise ValueError(f"the rate must be positive, got {B.to_numpy(s).tolist()}")
        charts["standard"] = Chart("standard", lambda s: B.log(s), lambda th: B.exp(th), check, "rate > 0")
        return charts

    def point(self, coords=None, *, rate=None):
        """A point from chart coordinates, or from ``rate=``."""
        if (coords is None) == (rate is None):
            raise ValueError("give exactly one of coords or rate=")
        if coords is not None:
            return super().point(coords)
        return self.from_chart(B.array([np.log(float(rate))]), "natural") if rate > 0 else \
            self.natural_point([float("nan")])

    def parameters(self, p):
        return {"rate": float(B.to_numpy(self.to_chart(p, "standard"))[0])}


def make(chart=None):
    return Poisson(chart)
