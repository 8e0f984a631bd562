r"""Multinomial distributions: counts of :math:`n` independent draws (``n`` fixed) from :math:`k` classes.

:math:`t(x) = (x_1, \dots, x_{k-1})` (the counts), natural parameters the logits
:math:`\theta_i = \log(p_i/p_k)`, :math:`\psi(\theta) = n\log(1 + \sum_i e^{\theta_i})`,
base measure :math:`n!/\prod_i x_i!`.  Everything is :math:`n` times the categorical family
(:class:`infogeo.Categorical`): the standard chart is the first :math:`k - 1` probabilities,
the Fisher metric :math:`n(\mathrm{diag}(1/p) + \mathbf 1\mathbf 1^T/p_k)`, and since a constant
factor leaves geodesics unchanged, exp and log are the categorical ones (great circles through
:math:`\sqrt p` on the sphere) and the distance is
:math:`2\sqrt n\,\arccos\sum_i\sqrt{p_i q_i}`.
``load_manifold("multinomial", k=3, n=10)`` picks the classes and draws.
"""
import numpy as np
from scipy.special import gammaln

import infogeo as ig
from infogeo import backend as B
from infogeo.geometry.points import plain
from infogeo.statistical import Chart, ClosedGeodesics


class Multinomial(ig.ExponentialFamily):
    def __init__(self, k=3, n=10, chart=None):
        if int(n) != n or n < 1:
            raise ValueError(f"the number of draws n must be a positive integer, got {n!r}")
        self.k, self.n = int(k), int(n)
        cat = ig.Categorical(self.k)          # the standard (probability) chart of one draw
        self.categorical = cat
        scale = float(self.n)

        def counts(x):
            x = np.asarray(x, dtype=float).reshape(-1, self.k)
            if np.any(x < 0) or np.any(x.sum(1) != self.n) or np.any(x != np.round(x)):
                raise ValueError(f"multinomial observations must be rows of {self.k} non-negative integer counts "
                                 f"summing to n = {self.n}")
            return x

        super().__init__(
            sufficient_statistics=lambda x: counts(x)[:, :-1],
            log_partition=lambda th: scale * cat.log_partition(th), dim=self.k - 1, vectorized=True,
            log_base_measure=lambda x: gammaln(self.n + 1.0) - gammaln(counts(x) + 1.0).sum(1),
            sampler=lambda th, m, rng: rng.multinomial(self.n, B.to_numpy(self.probs_of_natural(th)), size=m),
            # a multinomial point in the standard chart is read as categorical probabilities (plain)
            # the logits log(p_i / p_k) written out: the chart maps run inside autodiff (torch's forward mode
            # too), where the validating cat.to_natural cannot read its argument's values
            standard_chart=Chart("standard", lambda p: B.log(p) - B.log(1.0 - B.sum(p, axis=-1, keepdims=True)),
                                 cat.in_chart("natural").moments,
                                 lambda p: cat.check_point(plain(p)),
                                 f"the first {self.k - 1} of {self.k} class probabilities (positive, sum < 1)",
                                 fisher=lambda p: scale * cat.fisher(plain(p)), vectorized=True),
            geodesics=ClosedGeodesics(
                "standard", exp=lambda p, v: cat.metric.exp(plain(p), v),
                log=lambda p, q: cat.metric.log(plain(p), plain(q)),
                dist=lambda p, q: np.sqrt(scale) * cat.metric.dist(plain(p), plain(q)), vectorized=True),
            chart=chart, name=f"Multinomial(k={self.k}, n={self.n})")

    def probs_of_natural(self, theta):
        """All ``k`` class probabilities from the logits."""
        return self.categorical.probs(plain(self.categorical.in_chart("natural").to_chart(theta, "standard")))

    def point(self, coords=None, *, probs=None):
        """A point from coordinates in the current chart, or from all ``k`` class probabilities (``probs=``)."""
        if (coords is None) == (probs is None):
            raise ValueError("give exactly one of coords (in the current chart) or probs=")
        if coords is not None:
            return super().point(coords)
        return self.from_chart(plain(self.categorical.point(probs=probs)), "standard")

    def parameters(self, p):
        probs = self.categorical.probs(plain(self.to_chart(p, "standard")))
        return {"n": self.n, "probs": np.asarray(B.to_numpy(probs))}

    def random_point(self, rng=None, scale=1.0):
        return self.from_chart(plain(self.categorical.random_point(rng)), "standard")


def make(k=3, n=10, chart=None):
    return Multinomial(k, n, chart)
