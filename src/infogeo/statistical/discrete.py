r"""Finite exponential families: categorical, Bernoulli, the independence model.

Charts (all share one :class:`~infogeo.statistical.ExponentialFamily` machinery):

=============  ===============================  ===============================  ==========================
family         natural                          mean                             standard
=============  ===============================  ===============================  ==========================
Categorical    logits :math:`\log(p_i/p_k)`     :math:`(p_1..p_{k-1})`           = mean (probabilities)
Bernoulli      logit :math:`\log(p/(1-p))`      :math:`p`                        = mean
Independence   :math:`\theta_i`                 :math:`E[x_i] = \tanh\theta_i`   :math:`P(x_i = +1)`
=============  ===============================  ===============================  ==========================

Fisher–Rao geometry: :math:`p \mapsto 2\sqrt{p}` maps the simplex isometrically
onto a piece of the sphere of radius 2, so
:math:`d(p, q) = 2\arccos\sum_i\sqrt{p_i q_i}`; the independence model is a product of
one-dimensional Bernoulli factors, flat in :math:`\phi_i = 2\arcsin\sqrt{\mu_i}`.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Dict, Optional

import numpy as np

from .. import backend as B
from . import _spaces
from .exponential_family import Chart, ExponentialFamily

__all__ = ["FiniteFamily", "Categorical", "Bernoulli", "IndependenceModel"]

SIMPLEX_TOL = 1e-9


class FiniteFamily(ExponentialFamily):
    """An exponential family on a finite sample space: expectations are exact sums."""

    def support(self) -> np.ndarray:
        """All outcomes, with a leading axis."""
        raise NotImplementedError

    def probabilities(self, p: Any):
        """Probabilities of the outcomes of :meth:`support` (differentiable in ``p``)."""
        return B.exp(self.log_prob(p, self.support()))

    def expectation(self, f: Callable[[Any], Any], p: Any):
        r""":math:`E_p[f] = \sum_x p(x) f(x)`; ``f`` maps the support (leading axis) to values."""
        X = self.support()
        return B.sum(self.probabilities(p) * B.array(f(X), like=p))


class Categorical(FiniteFamily):
    r"""Categorical distributions on :math:`\{0, \dots, k-1\}` (class :math:`k-1` is the reference).

    :math:`t(x) = (\mathbb{1}[x = 0], \dots, \mathbb{1}[x = k-2])`,
    :math:`\psi(\theta) = \log(1 + \sum_i e^{\theta_i})`; Fisher
    :math:`\mathrm{diag}(p) - pp^T` in logits, :math:`\mathrm{diag}(1/p) + \mathbf{1}\mathbf{1}^T/p_k`
    in probabilities.

    Parameters
    ----------
    k : int
        Number of classes (at least 2).
    chart : {"standard", "mean", "natural"}
    """

    geometry_chart = "mean"

    def __init__(self, k: int, chart: Optional[str] = None, name: Optional[str] = None):
        if int(k) != k or k < 2:
            raise ValueError(f"a categorical distribution needs k >= 2 classes, got {k!r}")
        self.k = int(k)
        super().__init__(dim=self.k - 1, chart=chart, name=name or f"Categorical({self.k})")

    # ------------------------------------------------------------ family
    def log_partition(self, theta):
        return B.logsumexp(B.concatenate([theta, B.zeros(1, like=theta)]))

    def moments(self, theta):
        return B.softmax(B.concatenate([theta, B.zeros(1, like=theta)]))[:-1]

    def sufficient_statistics(self, x):
        x = np.asarray(B.to_numpy(x)).astype(int).reshape(-1)
        return (x[:, None] == np.arange(self.k - 1)[None, :]).astype(float)

    def support(self):
        return np.arange(self.k)

    def _make_charts(self) -> Dict[str, Chart]:
        def to_nat(p):
            last = 1.0 - B.sum(p)
            return B.log(p) - B.log(last)

        nat = Chart("natural", lambda th: th, lambda th: th, None, "logits log(p_i / p_k), any real vector")
        mean = Chart("mean", to_nat, self.moments, self._check_probs,
                     f"the first {self.k - 1} class probabilities, positive with sum < 1")
        std = Chart("standard", to_nat, self.moments, self._check_probs, mean.description)
        return {"natural": nat, "mean": mean, "standard": std}

    def _direct_map(self, source, target):
        if {source, target} == {"mean", "standard"}:
            return lambda x: x
        return None

    def _check_probs(self, p) -> None:
        q = B.to_numpy(p)
        if np.any(q <= 0) or q.sum() >= 1:
            raise ValueError(f"probabilities off the simplex: got {q.tolist()} (remaining mass {1 - q.sum():.3g}); "
                             f"expected the first {self.k - 1} of {self.k} positive probabilities summing to less than 1")

    def probs(self, p: Any):
        """All ``k`` class probabilities of the point ``p``."""
        eta = self.to_chart(p, "mean")
        return B.concatenate([eta, B.reshape(1.0 - B.sum(eta), (1,))])

    def point(self, coords: Any = None, *, probs: Any = None):
        """A point from coordinates in the current chart, or from all ``k`` probabilities (``probs=``)."""
        if (coords is None) == (probs is None):
            raise ValueError("give exactly one of coords (in the current chart) or probs=")
        if probs is None:
            return super().point(coords)
        q = np.array(B.to_numpy(B.array(probs)), dtype=float).reshape(-1)
        if q.shape != (self.k,):
            raise ValueError(f"probs must have {self.k} entries, got {q.shape[0]}")
        if np.any(q <= 0) or abs(q.sum() - 1) > SIMPLEX_TOL:
            raise ValueError(f"probabilities off the simplex: {q.tolist()} (sum {q.sum():.12g}); "
                             "expected strictly positive entries summing to 1")
        return self.from_chart(B.array(q[:-1]), "mean")

    def sample(self, p, n, rng=None):
        self.check_point(p)
        return np.random.default_rng(rng).choice(self.k, size=int(n), p=B.to_numpy(self.probs(p)))

    def random_point(self, rng=None, scale: float = 1.0):
        q = np.random.default_rng(rng).dirichlet(np.full(self.k, 2.0))
        return self.point(probs=q)

    # ------------------------------------------------------------ closed forms
    def _fisher_closed(self, x):
        p = self.to_chart(x, "mean")
        if self.chart == "natural":
            return B.diag(p) - B.outer(p, p)
        if self.chart in ("mean", "standard"):
            last = 1.0 - B.sum(p)
            return B.diag(1.0 / p) + B.ones((self.dim, self.dim), like=x) / last
        return None

    def kl(self, p, q):
        r""":math:`\sum_i p_i \log(p_i / q_i)`."""
        a, b = self.probs(p), self.probs(q)
        return B.sum(a * (B.log(a) - B.log(b)))

    # ------------------------------------------------------------ sphere geometry (mean chart)
    def _full(self, eta):
        return np.append(eta, 1.0 - eta.sum())

    def _geo_exp(self, eta, v):
        u = np.sqrt(self._full(eta))
        dp = np.append(v, -v.sum())
        u1 = _spaces.sphere_exp(u, dp / (2 * u))
        if np.any(u1 <= 0):
            raise ValueError("the geodesic leaves the probability simplex before t = 1 "
                             "(some probability reaches 0); take a shorter step")
        p1 = u1 ** 2
        return p1[:-1] / p1.sum()

    def _geo_log(self, eta, zeta):
        u, w = np.sqrt(self._full(eta)), np.sqrt(self._full(zeta))
        du = _spaces.sphere_log(u, w)
        return (2 * u * du)[:-1]

    def _geo_dist(self, eta, zeta):
        return 2.0 * _spaces.sphere_dist(np.sqrt(self._full(eta)), np.sqrt(self._full(zeta)))


class Bernoulli(Categorical):
    r"""Bernoulli distributions on :math:`\{0, 1\}`: :math:`t(x) = x`, :math:`\psi = \log(1 + e^\theta)`.

    The categorical family with :math:`k = 2` and outcome 0 as reference class;
    points are the success probability (standard/mean) or the logit (natural).
    """

    def __init__(self, chart: Optional[str] = None):
        super().__init__(2, chart=chart, name="Bernoulli")

    def sufficient_statistics(self, x):
        x = np.asarray(B.to_numpy(x), dtype=float).reshape(-1)
        if not np.all((x == 0) | (x == 1)):
            raise ValueError("Bernoulli observations must be 0 or 1")
        return x[:, None]

    def support(self):
        return np.array([1.0, 0.0])

    def probs(self, p):
        """``[P(x = 1), P(x = 0)]``."""
        return super().probs(p)

    def point(self, coords: Any = None, *, prob: Any = None, probs: Any = None):
        """A point from coordinates in the current chart, or from the success probability ``prob=``."""
        if prob is not None:
            if coords is not None or probs is not None:
                raise ValueError("give exactly one of coords, prob= or probs=")
            q = float(B.to_numpy(B.array(prob)))
            if not 0 < q < 1:
                raise ValueError(f"a Bernoulli probability must lie strictly between 0 and 1, got {q}")
            return self.from_chart(B.array([q]), "mean")
        return super().point(coords, probs=probs)

    def sample(self, p, n, rng=None):
        self.check_point(p)
        q = float(B.to_numpy(self.to_chart(p, "mean"))[0])
        return (np.random.default_rng(rng).random(int(n)) < q).astype(float)

    def random_point(self, rng=None, scale: float = 1.0):
        return self.point(prob=np.random.default_rng(rng).uniform(0.05, 0.95))


class IndependenceModel(FiniteFamily):
    r"""Independent :math:`\pm 1` variables (seed 003): :math:`x \in \{-1, +1\}^n`.

    :math:`p(x;\theta) = \exp(\sum_i \theta_i x_i - \psi(\theta))`,
    :math:`\psi(\theta) = \sum_i \log(e^{\theta_i} + e^{-\theta_i})`.  Charts:
    natural :math:`\theta`, mean :math:`E[x_i] = \tanh\theta_i`, standard the
    marginal probabilities :math:`\mu_i = P(x_i = +1)` (seed 003's :math:`\mu`).
    Fisher in :math:`\mu`: :math:`\mathrm{diag}(1/(\mu_i(1-\mu_i)))`; the metric is flat
    in :math:`\phi_i = 2\arcsin\sqrt{\mu_i}`.
    """

    geometry_chart = "standard"

    def __init__(self, n: int, chart: Optional[str] = None):
        if int(n) != n or n < 1:
            raise ValueError(f"the independence model needs n >= 1 variables, got {n!r}")
        super().__init__(dim=int(n), chart=chart, name=f"IndependenceModel({int(n)})")

    def log_partition(self, theta):
        return B.sum(B.logsumexp(B.stack([theta, -theta]), axis=0))

    def moments(self, theta):
        return B.tanh(theta)

    def sufficient_statistics(self, x):
        x = np.asarray(B.to_numpy(x), dtype=float).reshape(-1, self.dim)
        if not np.all(np.abs(x) == 1):
            raise ValueError("independence-model observations must have entries -1 or +1")
        return x

    def support(self):
        return np.array(list(itertools.product([-1.0, 1.0], repeat=self.dim)))

    def _make_charts(self):
        def check_open(lo, what):
            def check(z):
                a = B.to_numpy(z)
                if np.any(a <= lo) or np.any(a >= 1):
                    raise ValueError(f"{what} must lie strictly inside ({lo}, 1), got {a.tolist()}")
            return check
        nat = Chart("natural", lambda th: th, lambda th: th, None, "any real vector")
        mean = Chart("mean", lambda e: 0.5 * (B.log1p(e) - B.log1p(-e)), B.tanh,
                     check_open(-1, "mean parameters E[x_i]"), "E[x_i] in (-1, 1)")
        std = Chart("standard", lambda m: 0.5 * (B.log(m) - B.log1p(-m)),
                    lambda th: 0.5 * (B.tanh(th) + 1.0), check_open(0, "marginal probabilities P(x_i = +1)"),
                    "P(x_i = +1) in (0, 1)")
        return {"natural": nat, "mean": mean, "standard": std}

    def _direct_map(self, source, target):
        if (source, target) == ("mean", "standard"):
            return lambda e: 0.5 * (e + 1.0)
        if (source, target) == ("standard", "mean"):
            return lambda m: 2.0 * m - 1.0
        return None

    def point(self, coords: Any = None, *, probs: Any = None):
        """A point from coordinates in the current chart, or from the marginals ``P(x_i = +1)`` (``probs=``)."""
        if (coords is None) == (probs is None):
            raise ValueError("give exactly one of coords (in the current chart) or probs=")
        if probs is None:
            return super().point(coords)
        m = np.array(B.to_numpy(B.array(probs)), dtype=float).reshape(-1)
        if m.shape != (self.dim,):
            raise ValueError(f"probs must have {self.dim} entries, got {m.shape[0]}")
        self._charts["standard"].check(m)
        return self.from_chart(B.array(m), "standard")

    def sample(self, p, n, rng=None):
        self.check_point(p)
        m = B.to_numpy(self.to_chart(p, "standard"))
        return np.where(np.random.default_rng(rng).random((int(n), self.dim)) < m, 1.0, -1.0)

    def _fisher_closed(self, x):
        e = self.to_chart(x, "mean")
        if self.chart == "natural":
            return B.diag(1.0 - e * e)
        if self.chart == "mean":
            return B.diag(1.0 / (1.0 - e * e))
        m = self.to_chart(x, "standard")
        return B.diag(1.0 / (m * (1.0 - m)))

    def kl(self, p, q):
        a, b = self.to_chart(p, "standard"), self.to_chart(q, "standard")
        return B.sum(a * (B.log(a) - B.log(b)) + (1 - a) * (B.log1p(-a) - B.log1p(-b)))

    # flat coordinates phi = 2 arcsin sqrt(mu)
    @staticmethod
    def _phi(m):
        return 2.0 * np.arcsin(np.sqrt(m))

    def _geo_exp(self, m, v):
        phi = self._phi(m) + v / np.sqrt(m * (1 - m))
        if np.any(phi <= 0) or np.any(phi >= np.pi):
            raise ValueError("the geodesic leaves the model (a marginal probability reaches 0 or 1) "
                             "before t = 1; take a shorter step")
        return np.sin(0.5 * phi) ** 2

    def _geo_log(self, m, m2):
        return (self._phi(m2) - self._phi(m)) * np.sqrt(m * (1 - m))

    def _geo_dist(self, m, m2):
        return float(np.linalg.norm(self._phi(m2) - self._phi(m)))
