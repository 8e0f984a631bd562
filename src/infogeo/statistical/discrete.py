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
one-dimensional Bernoulli factors, flat in :math:`\phi_i = 2\arcsin\sqrt{\mu_i}`
(Amari & Nagaoka 2000, Sec. 2.5).  Every operation takes batches of points,
shape ``(..., dim)``, on either backend.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Dict, Optional

import numpy as np

from .. import backend as B
from ..geometry import points as _points
from ..geometry.charts import Chart
from . import _stable
from ._inputs import check_fits, observations_of
from .exponential_family import ExponentialFamily

__all__ = ["FiniteFamily", "Categorical", "Bernoulli", "IndependenceModel"]

SIMPLEX_TOL = 1e-9
#: the smallest ratio u_i(1)/u_i of a square-root probability along a geodesic that :meth:`Categorical._exp_in_chart`
#: computes in the logits (below it the ratio has lost four of its digits and more)
_END_RATIO = 1e-4


def _rowsum(x, xp=B):
    """Sum over the last axis as a product with ones (a BLAS call: much faster than a reduction
    along a short last axis); a last axis of length 1 is read directly (a matmul over it is slow).
    ``xp``: the backend namespace when the caller has resolved it already."""
    if x.shape[-1] == 1:
        return x[..., 0]
    return xp.matmul(x, xp.ones(x.shape[-1], like=x))


def _last(p):
    """The remaining mass ``1 - sum(p)`` over the last axis, keeping it."""
    return 1.0 - _rowsum(p)[..., None]


def _all_classes(eta):
    """All ``k`` probabilities from the first ``k - 1``."""
    return B.concatenate([eta, _last(eta)], axis=-1)


def _safe_ratio(num, n):
    """``num / n`` with ``0 / 0 = 0`` (a zero tangent vector), broadcast over the last axis."""
    xp = B.ops_of(num, n)
    pos = n > 0
    return xp.where(pos, num / xp.where(pos, n, 1.0 + 0.0 * n), 0.0 * num)


class FiniteFamily(ExponentialFamily):
    """An exponential family on a finite sample space: expectations are exact sums."""

    _vectorized = True
    _geo_vectorized = True

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
    event_shape = ()

    def __init__(self, k: int, chart: Optional[str] = None, name: Optional[str] = None):
        self.k = _points.positive_int(k, "k (the number of classes of a categorical distribution)", minimum=2)
        check_fits(self.k, f"Categorical({self.k}) (a point holds a probability per class)")
        super().__init__(dim=self.k - 1, chart=chart, name=name or f"Categorical({self.k})")

    # ------------------------------------------------------------ family
    def log_partition(self, theta):
        return B.logsumexp(self._with_reference(theta), axis=-1)

    def moments(self, theta):
        return B.softmax(self._with_reference(theta), axis=-1)[..., :-1]

    @staticmethod
    def _with_reference(theta):
        return B.concatenate([theta, B.zeros(tuple(theta.shape[:-1]) + (1,), like=theta)], axis=-1)

    def sufficient_statistics(self, x):
        x = observations_of(self, x).reshape(-1)
        if np.any(x != np.round(x)) or np.any(x < 0) or np.any(x >= self.k):
            raise ValueError(f"categories of {self.name} must be integers in 0..{self.k - 1}, "
                             f"got {np.unique(x[(x != np.round(x)) | (x < 0) | (x >= self.k)])[:5].tolist()}")
        return (x[:, None] == np.arange(self.k - 1)[None, :]).astype(float)

    def support(self):
        return np.arange(self.k)

    def _make_charts(self) -> Dict[str, Chart]:
        def to_nat(p):
            return B.log(p) - B.log(_last(p))

        nat = Chart("natural", lambda th: th, lambda th: th, None, "logits log(p_i / p_k), any real vector",
                    vectorized=True)
        desc = f"the first {self.k - 1} class probabilities, positive with sum < 1"
        mean = Chart("mean", to_nat, self.moments, self._check_probs, desc, vectorized=True)
        std = Chart("standard", to_nat, self.moments, self._check_probs, desc, vectorized=True)
        return {"natural": nat, "mean": mean, "standard": std}

    def _direct_map(self, source, target):
        if {source, target} == {"mean", "standard"}:
            return lambda x: x
        return None

    def _check_probs(self, p) -> None:
        q = _points.numpy_view(p)
        last = 1.0 - _rowsum(q, np)
        if q.min() <= 0 or last.min() <= 0:
            bad = np.argmin(np.minimum(q.min(-1), last)) if q.ndim > 1 else None
            row = q if bad is None else q.reshape(-1, q.shape[-1])[bad]
            raise ValueError(f"probabilities off the simplex: got {row.tolist()} (remaining mass "
                             f"{1 - row.sum():.3g}); expected the first {self.k - 1} of {self.k} positive "
                             "probabilities summing to less than 1")

    def probs(self, p: Any):
        """All ``k`` class probabilities of the point ``p`` (shape ``(..., k)``)."""
        return _all_classes(self.to_chart(p, "mean"))

    def point(self, coords: Any = None, *, probs: Any = None):
        """A point from coordinates in the current chart, or from all ``k`` probabilities (``probs=``, ``(..., k)``)."""
        if (coords is None) == (probs is None):
            raise ValueError("give exactly one of coords (in the current chart) or probs=")
        if probs is None:
            return super().point(coords)
        q = _points.as_coordinates(probs, self.k, "probability vector", self.name)
        a = B.to_numpy(q)   # float64
        # the sum within the rounding of the k entries in the dtype given (float32 probabilities sum to 1 to ~1e-7)
        eps = float(np.finfo(np.float32 if getattr(q.dtype, "itemsize", 8) <= 4 else np.float64).eps)
        if a.min() <= 0 or np.max(np.abs(a.sum(-1) - 1)) > max(SIMPLEX_TOL, 2 * self.k * eps):
            raise ValueError(f"probabilities off the simplex: {a.tolist() if a.size < 50 else '...'} "
                             f"(sums {np.unique(a.sum(-1))[:3].tolist()}); expected strictly positive entries "
                             "summing to 1")
        # the last class as the mean chart's first k-1 probabilities hold it: refused where that moves it by more than
        # a part in 10^6 (a float32 vector's own rounding aside), as it moved a given 1e-16 to 1.11e-16 (KL 0.15 % off)
        held = 1.0 - a[..., :-1].sum(-1)
        tol = max(1e-6, 1e4 * eps)
        if np.min(held) <= 0 or np.max(np.abs(held - a[..., -1]) / a[..., -1]) > tol:
            raise ValueError(f"the last class's probability ({a[..., -1].min():.3g}) is below what the mean chart's "
                             f"first {self.k - 1} probabilities resolve (1 minus their sum rounds it): order the classes "
                             f"with a large one last, or give the point in the natural chart (logits "
                             f"log(p_i / p_k)), which holds it")
        return self.from_chart(q[..., :-1], "mean")

    def _sample(self, p, n, rng):
        # renormalised in float64: float32 probabilities (a torch point) miss numpy's sum-to-one tolerance
        q = np.asarray(B.to_numpy(self.probs(p)), dtype=np.float64)
        return rng.choice(self.k, size=n, p=q / q.sum())

    def random_point(self, rng=None, scale: float = 1.0):
        q = _points.random_generator(rng).dirichlet(np.full(self.k, 2.0))
        return self.point(probs=q)

    # ------------------------------------------------------------ closed forms
    def _fisher_closed(self, x):
        if self.chart == "natural":
            # diag(p) - pp^T, its diagonal p_i (1 - p_i) with 1 - p_i summed from the others (p_i - p_i^2 rounds to 0):
            # the total less p_i where p_i <= 1/2, else (one class at most) the sum that leaves it out; O(k) here
            check_fits(self.dim ** 2, f"the Fisher matrix of Categorical({self.k})")
            probs = B.softmax(self._with_reference(x), axis=-1)
            p = probs[..., :-1]
            big = p > 0.5
            rest = B.sum(B.where(B.concatenate([big, probs[..., -1:] < 0], axis=-1), 0.0 * probs, probs), axis=-1)
            others = B.where(big, rest[..., None], B.sum(probs, axis=-1)[..., None] - p)
            outer = p[..., :, None] * p[..., None, :]
            return B.diag_embed(p * others) - (outer - B.diag_embed(p * p))   # the diagonal of the second term: 0
        p = self._to_chart(x, "mean")
        if self.chart in ("mean", "standard"):
            return B.diag_embed(1.0 / p) + (1.0 / _last(p))[..., None] * B.ones((self.dim, self.dim), like=x)
        return None

    def _log_probs_and_ratios(self, p, q, xp):
        r"""``(log p_i, log(q_i / p_i))`` over all ``k`` classes from the logits ``p``, ``q`` (natural chart).

        :math:`\log(q_i/p_i) = \delta_i - (\mathrm{lse}(t_q) - \mathrm{lse}(t_p))`, :math:`\delta = t_q - t_p`; for
        logits within 1 of each other the lse difference is :math:`\log(1 + \sum_j p_j(e^{\delta_j} - 1))`
        (``log1p``/``expm1``), exact to rounding where the difference of the two lse would lose
        :math:`|\mathrm{lse}|` ulps."""
        ta, tb = self._with_reference(p), self._with_reference(q)
        lse_a = xp.logsumexp(ta, axis=-1, keepdims=True)
        log_a = ta - lse_a
        delta = tb - ta
        small = xp.sum(xp.where(xp.abs(delta) < 1.0, 0.0, 1.0), axis=-1, keepdims=True) == 0
        ds = xp.where(small, delta, 0.0 * delta)
        dlse = xp.where(small, xp.log1p(xp.sum(xp.exp(log_a) * xp.expm1(ds), axis=-1, keepdims=True)),
                        xp.logsumexp(tb, axis=-1, keepdims=True) - lse_a)
        return log_a, delta - dlse

    def _dist_in_chart(self, p, q):
        r"""Distance from the logits (natural chart; ``None`` in the others):
        :math:`4\arcsin(\|\sqrt p - \sqrt q\| / 2)` with :math:`\sqrt{p_i} - \sqrt{q_i} = -\sqrt{p_i}\,
        \mathrm{expm1}(\tfrac12\log(q_i/p_i))` from :meth:`_log_probs_and_ratios` (no cancellation), its norm
        summed in logs (no underflow of the squares, no overflow of the exponential).  The mean chart rounds a last class of
        :math:`e^{-40}` to 0: the distance was NaN or wrong."""
        if self.chart != "natural":
            return None
        xp = B.ops_of(p, q)
        log_a, log_r = self._log_probs_and_ratios(p, q, xp)
        # |sqrt p_i - sqrt q_i| = sqrt p_i |expm1(h_i)|, h = log(q_i/p_i) / 2, in logs: its squares underflow for
        # classes of e^-800 (and e^h overflows); log|expm1(h)| = h + log(-expm1(-h)) for h > 0, log(-expm1(h))
        # for h < 0, and a zero term (h = 0) is e^-1e300
        h = 0.5 * log_r
        pos, zero = h > 0, h == 0
        hp = xp.where(pos, h, 1.0 + 0.0 * h)
        hn = xp.where(pos | zero, -1.0 + 0.0 * h, h)
        log_g = xp.where(pos, hp + xp.log(-xp.expm1(-hp)), xp.log(-xp.expm1(hn)))
        log_diff = xp.where(zero, -1e300 + 0.0 * h, 0.5 * log_a + log_g)
        chord = xp.exp(0.5 * xp.logsumexp(2.0 * log_diff, axis=-1))
        return 4.0 * xp.arcsin(0.5 * chord)          # chord <= sqrt 2 (the positive orthant of the sphere)

    def _log_in_chart(self, p, q):
        r""":math:`\log_p q` from the logits (natural chart; ``None`` in the others, or where it overflows):
        the mean chart's log pushed to the logits without the differences of probabilities, which round (a
        relative error of :math:`\epsilon/|q - p|`: 1.8e-6 for logits 1e-10 apart).  With
        :math:`g_i = \mathrm{expm1}(\tfrac12\log(q_i/p_i))` (:meth:`_log_probs_and_ratios`), the chord between
        :math:`\sqrt p` and :math:`\sqrt q` is :math:`d = \sqrt p\odot g`, the component of :math:`d` normal to
        :math:`\sqrt p` has length :math:`n = |d|\sqrt{1 - |d|^2/4}`, the angle is
        :math:`\theta = \mathrm{atan2}(n, 1 - |d|^2/2)`, and the logits move by
        :math:`v_i = 2(\theta/n)(g_i - g_k)` (:math:`k` the reference class)."""
        if self.chart != "natural":
            return None
        xp = B.ops_of(p, q)
        log_a, log_r = self._log_probs_and_ratios(p, q, xp)
        with np.errstate(over="ignore", invalid="ignore"):
            g = xp.expm1(0.5 * log_r)
            d2 = xp.sum(xp.exp(log_a) * g * g, axis=-1, keepdims=True)
            n = xp.sqrt(d2 * (1.0 - 0.25 * d2))
            theta = xp.arctan2(n, 1.0 - 0.5 * d2)
            scale = xp.where(n > 0, theta / xp.where(n > 0, n, 1.0 + 0.0 * n), 1.0 + 0.0 * n)
            v = 2.0 * scale * (g[..., :-1] - g[..., -1:])
        return v if _points.all_finite(v) else None   # logits far apart: the mean chart's route

    def _exp_in_chart(self, p, v):
        r"""The geodesic's end point from the logits ``p`` and a velocity ``v`` of the logits (natural chart; ``None`` in
        the others, or where the great circle may leave the simplex: the mean chart's route says so).  On the sphere
        of :math:`u = \sqrt p` the velocity is :math:`\dot u = u\odot w`, :math:`w_i = (v_i - p\cdot v)/2`
        (:math:`v_k = 0`), of length :math:`n`; :math:`u_i(1) = u_i(\cos n + w_i\sin n/n)`, so the logits move by
        :math:`2[\log(1 + c + s w_i) - \log(1 + c + s w_k)]` with :math:`c = \cos n - 1 = -2\sin^2(n/2)`,
        :math:`s = \sin n/n` (``log1p``): no probability is formed, which rounds a step of 1e-10 by a part in 1e5."""
        if self.chart != "natural":
            return None
        xp = B.ops_of(p, v)
        ta = self._with_reference(p)
        prob = xp.exp(ta - xp.logsumexp(ta, axis=-1, keepdims=True))
        vk = self._with_reference(v)
        w = 0.5 * (vk - xp.sum(prob * vk, axis=-1, keepdims=True))
        n = xp.sqrt(xp.sum(prob * w * w, axis=-1, keepdims=True))
        # coordinate i of the circle first reaches 0 at n t = pi/2 + atan2(w_i, n): refused by the mean chart's route
        if bool(np.any(B.to_numpy(n) >= B.to_numpy(np.pi / 2 + xp.arctan2(w, n)))) or not _points.all_finite(n):
            return None
        c = -2.0 * xp.sin(0.5 * n) ** 2
        sinc = xp.where(n > 0, xp.sin(n) / xp.where(n > 0, n, 1.0 + 0.0 * n), 1.0 + 0.0 * n)
        # u_i(1)/u_i = 1 + c + s w_i is rounded to a part in 1e16 of 1 + |s w_i|: where it ends near 0 (a class
        # whose probability falls by 1e8 or more) the logits would lose their digits, as the probabilities do
        if bool(np.any(B.to_numpy(1.0 + c + sinc * w) < _END_RATIO * (1.0 + B.to_numpy(xp.abs(sinc * w))))):
            return None
        grow = xp.log1p(c + sinc * w)
        return p + 2.0 * (grow[..., :-1] - grow[..., -1:])

    def _kl(self, p, q):
        r""":math:`\sum_i p_i \log(p_i / q_i) = \sum_i (q_i - p_i - p_i\log(q_i/p_i))`, a sum of terms
        :math:`\ge 0` (:func:`._stable.kl_terms`): the plain sum cancels between classes and went
        negative for nearby points.  :math:`q_i/p_i - 1` is formed from the differences of the
        probabilities (mean chart; the last class's as minus the sum of the others', exact where
        :math:`1 - \sum` rounds) or as ``expm1`` of the difference of the log-softmaxes (natural chart)."""
        xp = B.ops_of(p, q)
        if self.chart == "natural":
            log_a, log_r = self._log_probs_and_ratios(p, q, xp)
            a = xp.exp(log_a)
            b = xp.exp(log_a + log_r)
            z = xp.expm1(xp.minimum(log_r, 1.0 + 0.0 * log_r))   # only |z| < 1/2 is read: no overflow
        else:
            eta, zeta = self._to_chart(p, "mean"), self._to_chart(q, "mean")
            a, b = _all_classes(eta), _all_classes(zeta)
            diff = zeta - eta
            diff = xp.concatenate([diff, -_rowsum(diff, xp)[..., None]], axis=-1)
            z, log_r = diff / a, _stable.log_ratio(b, a, xp)
        return xp.sum(_stable.kl_terms(a, b, z, log_r, xp), axis=-1)

    # ------------------------------------------------------------ sphere geometry (mean chart)
    # u = sqrt(p) lies on the unit sphere; the Fisher metric is 4 times its round metric
    def _sphere(self, eta):
        return B.sqrt(_all_classes(eta))

    def _geo_exp(self, eta, v):
        u = self._sphere(eta)
        w = B.concatenate([v, -B.sum(v, axis=-1, keepdims=True)], axis=-1) / (2 * u)
        n = B.norm(w, axis=-1)[..., None]
        # coordinate i of the great circle is R_i cos(n t - phi_i) with phi_i = atan2(w_i, n u_i) in (-pi/2, pi/2):
        # it first reaches 0 at n t = pi/2 + phi_i.  A circle that left the orthant before t = 1 is refused even
        # where it has come back into it at t = 1
        exit_angle = np.pi / 2 + B.arctan2(w, n * u)
        if bool(np.any(B.to_numpy(n) >= B.to_numpy(exit_angle))):
            t_exit = float(np.min(B.to_numpy(exit_angle) / np.maximum(B.to_numpy(n), 1e-300)))
            raise ValueError(f"the geodesic leaves the probability simplex at t = {min(t_exit, 1.0):.3g} < 1 "
                             "(some probability reaches 0); take a shorter step")
        u1 = B.cos(n) * u + B.sin(n) * _safe_ratio(w, n)
        p1 = u1 * u1
        return p1[..., :-1] / B.sum(p1, axis=-1, keepdims=True)

    def _geo_log(self, eta, zeta):
        u, w = self._sphere(eta), self._sphere(zeta)
        c = B.sum(u * w, axis=-1, keepdims=True)
        perp = w - c * u
        n = B.norm(perp, axis=-1)[..., None]
        # atan2 keeps full accuracy for nearby points, where arccos(c) does not
        du = B.arctan2(n, c) * _safe_ratio(perp, n)
        return (2 * u * du)[..., :-1]

    def _geo_dist(self, eta, zeta):
        # chord |u - w| between the square roots: the angle 2 arcsin(chord / 2), accurate when near (arccos of
        # u.w is not).  sqrt(p) - sqrt(q) as (p - q) / (sqrt(p) + sqrt(q)): the difference of two rounded
        # square roots cancels; the last class's p - q as minus the others' (1 - sum rounds), so p <-> 1 - p
        # is an isometry to the last bit for the Bernoulli family
        xp = B.ops_of(eta, zeta)  # one dispatch per call
        dp = eta - zeta
        diff = dp / (xp.sqrt(eta) + xp.sqrt(zeta))
        last = -_rowsum(dp, xp) / (xp.sqrt(1.0 - _rowsum(eta, xp)) + xp.sqrt(1.0 - _rowsum(zeta, xp)))
        return 4.0 * xp.arcsin(0.5 * xp.sqrt(_rowsum(diff * diff, xp) + last * last))


class Bernoulli(Categorical):
    r"""Bernoulli distributions on :math:`\{0, 1\}`: :math:`t(x) = x`, :math:`\psi = \log(1 + e^\theta)`.

    The categorical family with :math:`k = 2` and outcome 0 as reference class;
    points are the success probability (standard/mean) or the logit (natural).
    """

    def __init__(self, chart: Optional[str] = None):
        super().__init__(2, chart=chart, name="Bernoulli")

    def sufficient_statistics(self, x):
        x = observations_of(self, x).reshape(-1)
        if not np.all((x == 0) | (x == 1)):
            raise ValueError("Bernoulli observations must be 0 or 1")
        return x[:, None]

    def support(self):
        return np.array([1.0, 0.0])

    def probs(self, p):
        """``[P(x = 1), P(x = 0)]``."""
        return super().probs(p)

    def point(self, coords: Any = None, *, prob: Any = None, probs: Any = None):
        """A point from coordinates in the current chart, or from the success probability ``prob=`` (any shape)."""
        if prob is not None:
            if coords is not None or probs is not None:
                raise ValueError("give exactly one of coords, prob= or probs=")
            q = _points.as_coordinates(prob, None, "probability", self.name)
            a = B.to_numpy(q)
            if a.size == 0 or a.min() <= 0 or a.max() >= 1:
                raise ValueError(f"a Bernoulli probability must lie strictly between 0 and 1, got "
                                 f"{a.tolist() if a.size < 50 else '...'}")
            return self.from_chart(q[..., None], "mean")
        return super().point(coords, probs=probs)

    def _sample(self, p, n, rng):
        q = float(B.to_numpy(self._to_chart(p, "mean"))[0])
        return (rng.random(n) < q).astype(float)

    def random_point(self, rng=None, scale: float = 1.0):
        return self.point(prob=_points.random_generator(rng).uniform(0.05, 0.95))


_BERNOULLI: Dict[str, Any] = {}


def _bernoulli(chart: str) -> "Bernoulli":
    """A shared Bernoulli family in ``chart`` (the factors of the independence model)."""
    if chart not in _BERNOULLI:
        _BERNOULLI[chart] = Bernoulli(chart=chart)
    return _BERNOULLI[chart]


def _norm_scaled(d):
    """Euclidean norm over the last axis, scaled in logs so that squares of tiny distances do not underflow."""
    pos = d > 0
    logs = B.where(pos, B.log(B.where(pos, d, 1.0 + 0.0 * d)), -1e300 + 0.0 * d)
    return B.exp(0.5 * B.logsumexp(2.0 * logs, axis=-1))


class IndependenceModel(FiniteFamily):
    r"""Independent :math:`\pm 1` variables (Amari, Kurata & Nagaoka 1992): :math:`x \in \{-1, +1\}^n`.

    :math:`p(x;\theta) = \exp(\sum_i \theta_i x_i - \psi(\theta))`,
    :math:`\psi(\theta) = \sum_i \log(e^{\theta_i} + e^{-\theta_i})`.  Charts:
    natural :math:`\theta`, mean :math:`E[x_i] = \tanh\theta_i`, standard the
    marginal probabilities :math:`\mu_i = P(x_i = +1)` .
    Fisher in :math:`\mu`: :math:`\mathrm{diag}(1/(\mu_i(1-\mu_i)))`; the metric is flat
    in :math:`\phi_i = 2\arcsin\sqrt{\mu_i}`.
    """

    geometry_chart = "standard"

    def __init__(self, n: int, chart: Optional[str] = None):
        n = _points.positive_int(n, "n (the number of variables of the independence model)")
        check_fits(n, f"IndependenceModel({n}) (one coordinate per variable)")
        self.event_shape = (n,)
        super().__init__(dim=n, chart=chart, name=f"IndependenceModel({n})")

    def log_partition(self, theta):
        return B.sum(B.logsumexp(B.stack([theta, -theta]), axis=0), axis=-1)

    def moments(self, theta):
        return B.tanh(theta)

    def sufficient_statistics(self, x):
        x = observations_of(self, x).reshape(-1, self.dim)
        if not np.all(np.abs(x) == 1):
            raise ValueError("independence-model observations must have entries -1 or +1")
        return x

    def support(self):
        return np.array(list(itertools.product([-1.0, 1.0], repeat=self.dim)))

    def _make_charts(self):
        def check_open(lo, what):
            def check(z):
                a = _points.numpy_view(z)
                if a.min() <= lo or a.max() >= 1:
                    raise ValueError(f"{what} must lie strictly inside ({lo}, 1), got "
                                     f"{a.tolist() if a.size < 50 else '...'}")
            return check
        nat = Chart("natural", lambda th: th, lambda th: th, None, "any real vector", vectorized=True)
        mean = Chart("mean", lambda e: 0.5 * (B.log1p(e) - B.log1p(-e)), B.tanh,
                     check_open(-1, "mean parameters E[x_i]"), "E[x_i] in (-1, 1)", vectorized=True)
        std = Chart("standard", lambda m: 0.5 * (B.log(m) - B.log1p(-m)),
                    lambda th: 0.5 * (B.tanh(th) + 1.0), check_open(0, "marginal probabilities P(x_i = +1)"),
                    "P(x_i = +1) in (0, 1)", vectorized=True)
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
        return self.from_chart(probs, "standard")

    def _sample(self, p, n, rng):
        m = B.to_numpy(self._to_chart(p, "standard"))
        return np.where(rng.random((n, self.dim)) < m, 1.0, -1.0)

    def _fisher_closed(self, x):
        if self.chart == "natural":
            # sech^2(theta) without the cancellation in 1 - tanh^2, so that natural
            # gradient keeps working far out towards the delta distributions
            q = B.exp(-2.0 * B.abs(x))
            return B.diag_embed(4.0 * q / (1.0 + q) ** 2)
        e = self._to_chart(x, "mean")
        if self.chart == "mean":
            return B.diag_embed(1.0 / (1.0 - e * e))
        m = self._to_chart(x, "standard")
        return B.diag_embed(1.0 / (m * (1.0 - m)))

    # ------------------------------------------------ per-variable Bernoulli factors
    def _factors(self, x):
        """``(Bernoulli, points)``: each variable as a Bernoulli point (last axis of length 1) in the chart that
        holds it exactly: logits :math:`2\theta_i` (natural), :math:`P(x_i = +1)` (standard), or
        :math:`(1 + E[x_i])/2` (mean, one rounding)."""
        if self.chart == "natural":
            return _bernoulli("natural"), 2.0 * x[..., None]
        if self.chart == "mean":
            return _bernoulli("mean"), (0.5 * (1.0 + x))[..., None]
        return _bernoulli("mean"), x[..., None]

    def _factor_dists(self, p, q):
        """Fisher–Rao distances of the Bernoulli factors, shape ``(..., n)``."""
        Bf, a = self._factors(p)
        b = self._factors(q)[1]
        out = Bf._dist_in_chart(a, b) if Bf.chart == "natural" else Bf._geo_dist(a, b)
        return out

    def _kl(self, p, q):
        r""":math:`\sum_i \mathrm{KL}` of the Bernoulli factors, each a sum of non-negative terms
        (:meth:`Categorical._kl`, :func:`._stable.kl_terms`): the plain sum of :math:`P\log(P/Q)` cancelled and
        went negative for nearby points."""
        Bf, a = self._factors(p)
        return B.sum(Bf._kl(a, self._factors(q)[1]), axis=-1)

    def _dist_in_chart(self, p, q):
        """The distance of the product: the norm of the factors' (from the logits in the natural chart, where the
        standard chart rounds P(x_i = +1) = sigmoid(40) to 1; from E[x] in the mean chart)."""
        return _norm_scaled(self._factor_dists(p, q))

    def _log_marginals(self, x):
        """``(log P(x_i = +1), log P(x_i = -1))``, computed in the current chart (neither rounds to log 0)."""
        if self.chart == "natural":
            lse = B.logsumexp(B.stack([x, -x]), axis=0)
            return x - lse, -x - lse
        if self.chart == "mean":
            return B.log1p(x) - math.log(2.0), B.log1p(-x) - math.log(2.0)
        return B.log(x), B.log1p(-x)

    # flat coordinates phi = 2 arcsin sqrt(mu)
    @staticmethod
    def _phi(m):
        return 2.0 * B.arcsin(B.sqrt(m))

    def _geo_exp(self, m, v):
        phi = self._phi(m) + v / B.sqrt(m * (1 - m))
        a = B.to_numpy(phi)
        if a.size and (a.min() <= 0 or a.max() >= np.pi):
            raise ValueError("the geodesic leaves the model (a marginal probability reaches 0 or 1) "
                             "before t = 1; take a shorter step")
        return B.sin(0.5 * phi) ** 2

    def _geo_log(self, m, m2):
        return (self._phi(m2) - self._phi(m)) * B.sqrt(m * (1 - m))

    def _geo_dist(self, m, m2):
        # per factor as the Bernoulli family computes it (sqrt p - sqrt q without cancellation, the other class
        # from 1 - p exactly): phi(m2) - phi(m) lost it (0 for P = 1 - 1e-16 vs 1 - 2e-16)
        return _norm_scaled(_bernoulli("mean")._geo_dist(m[..., None], m2[..., None]))
