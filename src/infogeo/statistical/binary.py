r"""Binary exponential families: Markov random fields on :math:`\{-1, +1\}^n` (or :math:`\{0, 1\}^n`).

A family is given by a list of monomial statistics :math:`t_m(x) = \prod_{i \in m} x_i`
(each :math:`m` a set of variable indices):

.. math:: p_\theta(x) = \exp\Big(\sum_m \theta_m \prod_{i\in m} x_i - \psi(\theta)\Big),\qquad
          \psi(\theta) = \log\sum_{x} \exp\Big(\sum_m \theta_m t_m(x)\Big).

The first-order statistics :math:`x_i` alone give the independence model; adding the
products :math:`x_ix_j` of the edges of a graph gives the Ising model (a pairwise binary
Markov random field); higher orders are allowed.  Because the statistics are distinct
monomials, the family is minimal: the moment map :math:`\theta \mapsto \eta = E_\theta[t]`
is a bijection onto the interior of the marginal polytope, the convex hull of the
:math:`t(x)` (Amari & Nagaoka 2000, Sec. 2.5; Wainwright & Jordan 2008, Ch. 3).

Exact computation (``n <= max_exact``, default 20): :math:`\psi`, the moments
:math:`\eta` and the Fisher matrix :math:`\mathrm{Cov}_\theta[t]` are sums over the
:math:`2^n` outcomes, enumerated in chunks with a log-sum-exp shift (stable for
any finite :math:`\theta`); the covariance is summed about the mean (two passes), not as
:math:`E[tt^T] - \eta\eta^T`.  Beyond that, and whenever asked, :meth:`~BinaryExponentialFamily.gibbs_sample`
draws by systematic-scan Gibbs sampling (Geman & Geman 1984) and
:meth:`~BinaryExponentialFamily.estimate_moments` / :meth:`~BinaryExponentialFamily.estimate_fisher`
return *estimates* with standard errors from independent chains.

Charts: ``natural`` :math:`\theta` (any real vector; ``standard`` is the same chart) and
``mean`` :math:`\eta = E[t(x)]`, mapped back to :math:`\theta` by damped Newton on the
convex :math:`\psi(\theta) - \eta^T\theta` (:func:`~infogeo.statistical.legendre.newton_legendre`,
with a budget and a clear error when :math:`\eta` is outside the marginal polytope).
"""
from __future__ import annotations

import math
from typing import Any, Iterable, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .. import backend as B
from ..geometry import points as _points
from ..geometry.charts import Chart
from ._inputs import check_fits, observations_of
from . import _stable
from .discrete import FiniteFamily
from .legendre import legendre_primitive

__all__ = ["BinaryExponentialFamily", "IsingModel", "MonteCarloEstimate"]

#: the outcomes of one enumeration chunk times the statistics stay below this many floats
_CHUNK_FLOATS = 1 << 21
#: a table of every outcome's statistics is kept (and autodiff runs through it) up to this many floats
_TABLE_FLOATS = 1 << 22


class MonteCarloEstimate(NamedTuple):
    """A Monte Carlo estimate: ``value``, its ``stderr`` (same shape) and the ``n_samples`` it used."""

    value: np.ndarray
    stderr: np.ndarray
    n_samples: int


def _check_statistics(n: int, statistics: Iterable) -> Tuple[Tuple[int, ...], ...]:
    if isinstance(statistics, (str, bytes)) or not hasattr(statistics, "__iter__"):
        raise TypeError("statistics must be a list of monomials, each a tuple of variable indices, "
                        f"got {type(statistics).__name__}")
    out, seen = [], {}
    for s in statistics:
        mono = (s,) if isinstance(s, (int, np.integer)) else s
        try:
            idx = tuple(int(i) for i in mono)
        except (TypeError, ValueError):
            raise TypeError(f"each statistic must be a tuple of variable indices, got {s!r}") from None
        if any(i != j for i, j in zip(idx, mono)) or not idx:
            raise ValueError(f"each statistic must be a non-empty tuple of integer indices, got {s!r}")
        if len(set(idx)) != len(idx) or min(idx) < 0 or max(idx) >= n:
            raise ValueError(f"statistic {s!r}: expected distinct variable indices in 0..{n - 1}")
        key = tuple(sorted(idx))
        if key in seen:
            raise ValueError(f"statistic {s!r} repeats statistic {seen[key]!r} (the family would not be minimal)")
        seen[key] = s
        out.append(key)
    if not out:
        raise ValueError("statistics must name at least one monomial")
    return tuple(out)


class BinaryExponentialFamily(FiniteFamily):
    r"""The exponential family on :math:`\{-1, +1\}^n` with monomial statistics :math:`\prod_{i\in m}x_i`.

    Parameters
    ----------
    n : int
        Number of binary variables.
    statistics : sequence of tuples of int
        The monomials :math:`m`, e.g. ``[(0,), (1,), (0, 1)]`` for
        :math:`x_0, x_1, x_0x_1`; distinct sets of distinct indices in ``0..n-1``.
        The natural parameters are in this order.
    values : (-1, 1) or (0, 1)
        The two values of each variable (spins or bits).
    chart : {"natural", "mean", "standard"}
        ``standard`` is the natural chart.
    max_exact : int
        Largest ``n`` for which :math:`\psi`, moments, Fisher and sampling are exact
        (by enumerating :math:`2^n` outcomes); beyond it they raise and the
        Monte Carlo methods (``gibbs_sample``, ``estimate_*``) remain.
    name : str, optional

    Examples
    --------
    ::

        M = BinaryExponentialFamily(2, statistics=[(0,), (1,), (0, 1)])
        theta = M.point([0.3, -0.2, 0.5])
        M.fisher(theta)                         # Cov[t(x)], exactly
        M.to_chart(theta, "mean")               # E[x_0], E[x_1], E[x_0 x_1]
    """

    geometry_chart = None
    default_chart = "natural"

    def __init__(self, n: int, statistics: Sequence[Sequence[int]], *, values: Tuple[int, int] = (-1, 1),
                 chart: Optional[str] = None, max_exact: int = 20, name: Optional[str] = None):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n (the number of binary variables) must be a positive integer, got {n!r}")
        try:
            vals = tuple(int(v) for v in values)
        except (TypeError, ValueError):
            vals = ()
        if vals not in ((-1, 1), (0, 1)):
            raise ValueError(f"values must be (-1, 1) (spins) or (0, 1) (bits), got {values!r}")
        if isinstance(max_exact, bool) or not isinstance(max_exact, (int, np.integer)) or not 1 <= max_exact <= 30:
            raise ValueError(f"max_exact must be an integer in 1..30, got {max_exact!r}")
        self.n, self.values, self.max_exact = int(n), vals, int(max_exact)
        self.statistics = _check_statistics(self.n, statistics)
        self.event_shape = (self.n,)
        order = max(len(m) for m in self.statistics)
        # indices padded with n, the position of a column of ones: t(x) = prod(x_ext[:, idx], -1)
        self._idx = np.array([m + (self.n,) * (order - len(m)) for m in self.statistics])
        self._table: Optional[np.ndarray] = None
        k = len(self.statistics)
        label = name or f"{type(self).__name__}(n={self.n}, {k} statistics)"
        super().__init__(dim=k, chart=chart, name=label)

    # ------------------------------------------------------------ statistics and outcomes
    @property
    def exact(self) -> bool:
        """Whether exact sums over the :math:`2^n` outcomes are available (``n <= max_exact``)."""
        return self.n <= self.max_exact

    def _stats(self, x: np.ndarray) -> np.ndarray:
        ext = np.concatenate([x, np.ones(x.shape[:-1] + (1,))], axis=-1)
        return np.prod(ext[..., self._idx], axis=-1)

    def sufficient_statistics(self, x: Any) -> np.ndarray:
        r""":math:`t(x)`: one row of monomials per observation, shape ``(N, dim)``."""
        x = observations_of(self, x).reshape(-1, self.n)
        lo, hi = self.values
        if not np.all((x == lo) | (x == hi)):
            raise ValueError(f"observations of {self.name} must have entries {lo} or {hi}")
        return self._stats(x)

    def _outcomes(self, start: int, stop: int) -> np.ndarray:
        """Outcomes ``start..stop-1`` in the order of ``itertools.product(values, repeat=n)``."""
        return self._decode(np.arange(start, stop, dtype=np.int64))

    def _decode(self, idx: np.ndarray) -> np.ndarray:
        """The outcomes numbered ``idx`` (the first variable is the most significant bit)."""
        bits = (idx[:, None] >> np.arange(self.n - 1, -1, -1)) & 1
        lo, hi = self.values
        return np.where(bits == 1, float(hi), float(lo))

    def support(self) -> np.ndarray:
        """All :math:`2^n` outcomes (rows), first variable slowest, the lower value first."""
        self._require_exact("support")
        return self._outcomes(0, 1 << self.n)

    def _require_exact(self, what: str) -> None:
        if not self.exact:
            raise ValueError(f"{what} of {self.name} enumerates 2^n outcomes: n = {self.n} > max_exact = "
                             f"{self.max_exact}; use the Monte Carlo estimates (estimate_moments, estimate_fisher, "
                             "gibbs_sample) or raise max_exact")

    def _full_table(self) -> Optional[np.ndarray]:
        """``t`` of every outcome, ``(2^n, dim)``, when it is small enough to keep."""
        if self._table is None and (1 << self.n) * self.dim <= _TABLE_FLOATS:
            self._table = self._stats(self._outcomes(0, 1 << self.n))
        return self._table

    def _chunks(self):
        rows = max(1, _CHUNK_FLOATS // max(self.dim, self.n))
        for start in range(0, 1 << self.n, rows):
            yield self._stats(self._outcomes(start, min(start + rows, 1 << self.n)))

    # ------------------------------------------------------------ exact sums
    def _sums(self, theta: np.ndarray, fisher: bool):
        """``(psi, eta, cov)`` of a numpy batch ``(b, dim)`` by one chunked pass (``cov`` None unless asked).

        Chunks are merged as weighted samples (Chan, Golub & LeVeque 1983): the log of each chunk's
        mass, its mean and its scatter about its own mean, so nothing cancels and nothing overflows.
        """
        bsz = theta.shape[0]
        log_w = np.full(bsz, -np.inf)
        eta = np.zeros((bsz, self.dim))
        cov = np.zeros((bsz, self.dim, self.dim)) if fisher else None
        for T in self._chunks():
            S = T @ theta.T                                   # (N, b)
            top = S.max(axis=0)
            P = np.exp(S - top)                               # (N, b), the largest is 1
            mass = P.sum(axis=0)
            log_c = top + np.log(mass)
            m_c = (P.T @ T) / mass[:, None]                   # chunk means
            log_tot = np.logaddexp(log_w, log_c)
            frac = np.exp(log_c - log_tot)                    # the chunk's share of the merged mass
            delta = m_c - eta
            if fisher:
                for j in range(bsz):
                    D = T - m_c[j]
                    scatter = (D * (P[:, j] / mass[j])[:, None]).T @ D
                    cov[j] = (1 - frac[j]) * cov[j] + frac[j] * scatter \
                        + frac[j] * (1 - frac[j]) * np.outer(delta[j], delta[j])
            eta = eta + frac[:, None] * delta
            log_w = log_tot
        return log_w, eta, cov

    def _batched(self, theta: Any, what: str, fn):
        """``fn(theta2d)`` on the flattened batch, results reshaped to the batch (numpy only)."""
        if B.is_torch(theta) or hasattr(theta, "_value"):
            raise TypeError(f"{what} of {self.name} sums over 2^{self.n} outcomes in numpy beyond the table size; "
                            "pass numpy arrays")
        a = np.asarray(theta, dtype=float)
        lead = a.shape[:-1]
        return lead, fn(a.reshape(-1, self.dim))

    def log_partition(self, theta: Any):
        r""":math:`\psi(\theta) = \log\sum_x e^{\theta^Tt(x)}`, exactly; shape ``(...)`` for a batch ``(..., dim)``."""
        self._require_exact("the log-partition")
        T = self._full_table()
        if T is not None:  # written with backend ops: autodiff (both backends) runs through it
            return B.logsumexp(B.matmul(theta, B.array(T.T, like=theta)), axis=-1)
        lead, psi = self._batched(theta, "the log-partition", lambda a: self._sums(a, False)[0])
        return psi.reshape(lead)

    def moments(self, theta: Any):
        r""":math:`\eta = E_\theta[t(x)] = \nabla\psi(\theta)`, exactly; shape ``(..., dim)``."""
        self._require_exact("the moments")
        T = self._full_table()
        if T is not None:
            P = B.softmax(B.matmul(theta, B.array(T.T, like=theta)), axis=-1)
            # E[t] = hi - E[hi - t] near the top and lo + E[t - lo] near the bottom: sums of non-negative terms,
            # so a moment never rounds past the values t takes (a plain E[t] could end at 1 + 4e-16)
            lo, hi = float(min(self.values)), float(max(self.values))
            top = hi - B.matmul(P, B.array(hi - T, like=theta))
            bottom = lo + B.matmul(P, B.array(T - lo, like=theta))
            return B.where(top + bottom > lo + hi, top, bottom)
        lead, eta = self._batched(theta, "the moments", lambda a: self._sums(a, False)[1])
        return eta.reshape(lead + (self.dim,))

    def fisher_natural(self, theta: Any):
        r""":math:`F(\theta) = \mathrm{Cov}_\theta[t(x)] = \nabla^2\psi(\theta)`, exactly; ``(..., dim, dim)``."""
        self._require_exact("the Fisher matrix")
        T = self._full_table()
        if T is not None:
            Tb = B.array(T, like=theta)
            P = B.softmax(B.matmul(theta, B.array(T.T, like=theta)), axis=-1)   # (..., N)
            D = Tb - B.matmul(P, Tb)[..., None, :]                                 # (..., N, dim)
            return B.einsum("...ni,...nj->...ij", D * P[..., None], D)   # two operands: 3x faster than three
        lead, cov = self._batched(theta, "the Fisher matrix", lambda a: self._sums(a, True)[2])
        return cov.reshape(lead + (self.dim, self.dim))

    def fisher_natural_vp(self, theta: Any, v: Any):
        return B.einsum("...ij,...j->...i", self.fisher_natural(theta), v)

    def in_natural_domain(self, theta: Any) -> bool:
        """Every finite real vector is a natural parameter (a finite sample space)."""
        return bool(np.all(np.isfinite(B.to_numpy(theta))))

    # ------------------------------------------------------------ charts
    def _make_charts(self):
        nat = Chart("natural", lambda th: th, lambda th: th, None, "any real vector", vectorized=True)
        theta_of_eta = legendre_primitive(self, closed_derivatives=True)

        def to_nat(eta):
            if len(eta.shape) == 1:
                return theta_of_eta(eta)
            return _points.per_point(theta_of_eta, eta)

        lo = -1.0 if self.values == (-1, 1) else 0.0
        desc = (f"E[t(x)] in the interior of the marginal polytope (each coordinate strictly between {lo:g} and 1)")
        mean = Chart("mean", to_nat, self.moments, self._check_mean, desc, vectorized=True)
        std = Chart("standard", lambda th: th, lambda th: th, None, "natural parameters (any real vector)",
                    vectorized=True)
        return {"natural": nat, "mean": mean, "standard": std}

    def _direct_map(self, source, target):
        if {source, target} == {"natural", "standard"}:
            return lambda x: x
        return None

    def _check_mean(self, eta: Any) -> None:
        a = _points.numpy_view(eta)
        lo = -1.0 if self.values == (-1, 1) else 0.0
        if a.min() <= lo or a.max() >= 1:
            raise ValueError(f"mean parameters of {self.name} must lie strictly between {lo:g} and 1, got "
                             f"{a.tolist() if a.size < 50 else '...'}")
        self._require_exact("the mean chart")
        # the box is necessary, not sufficient: membership of the open marginal polytope is decided by inversion
        self._charts["mean"].to_natural(np.asarray(a, dtype=float))

    def _natural_start(self, eta: np.ndarray) -> np.ndarray:
        # the independence guess: first-order statistics from their means, the rest zero
        th = np.zeros(self.dim)
        for j, m in enumerate(self.statistics):
            if len(m) == 1:
                e = float(np.clip(eta[j], -0.999, 0.999) if self.values == (-1, 1) else
                          np.clip(2 * eta[j] - 1, -0.999, 0.999))
                th[j] = math.atanh(e) * (1.0 if self.values == (-1, 1) else 2.0)
        return th

    # ------------------------------------------------------------ closed forms
    def _fisher_closed(self, x):
        if self.chart in ("natural", "standard"):
            return self.fisher_natural(x)
        return B.inv(self.fisher_natural(self._natural(x)))

    def _kl(self, p, q):
        r""":math:`\sum_x p(x)\log(p(x)/q(x))` over the outcome table, else the Bregman form
        :math:`\psi(\theta_q) - \psi(\theta_p) - \eta_p^T(\theta_q - \theta_p)`.

        The Bregman form subtracts log-partitions of the size of :math:`|\theta|`: at a natural parameter of
        1e10 it kept 6 digits, at 1e300 none (KL 0 between different distributions).  The log-probabilities
        :math:`\theta^Tt(x) - \psi(\theta)` are exact to rounding wherever the mass is.
        """
        tp, tq = self._natural(p), self._natural(q)
        T = self._full_table()
        if T is None:
            return (self.log_partition(tq) - self.log_partition(tp)
                    - B.sum(self.moments(tp) * (tq - tp), axis=-1))
        Tt = B.array(T.T, like=tp)
        log_p = B.log_softmax(B.matmul(tp, Tt), axis=-1)
        p = B.exp(log_p)
        # with u = (θ_q - θ_p)^T t(x) and v = u - E_p[u]: KL = log E_p[e^v] = log(1 + E_p[e^v - 1 - v]), a sum of
        # non-negative terms; the log-probabilities' difference cancels to rounding noise for nearby or peaked
        # distributions (negative, or twice the KL).  Where e^v would overflow the KL is large: taken directly.
        u = B.matmul(tq - tp, Tt)
        v = u - B.sum(p * u, axis=-1)[..., None]
        fits = B.sum(B.where(v < 700.0, 0.0 * v, 1.0 + 0.0 * v), axis=-1) == 0
        z = B.expm1(B.minimum(v, 700.0 + 0.0 * v))
        near = B.abs(z) < _stable.NEAR
        gap = B.where(near, _stable.log1p_gap_near(B.where(near, z, 0.0 * z)), z - v)   # e^v - 1 - v >= 0
        direct = B.sum(p * (log_p - B.log_softmax(B.matmul(tq, Tt), axis=-1)), axis=-1)
        return B.where(fits, B.log1p(B.sum(p * gap, axis=-1)), direct)

    # ------------------------------------------------------------ sampling
    def _sample(self, p, n, rng):
        theta = np.asarray(B.to_numpy(self._natural(p)), dtype=float)
        if not self.exact:
            return self.gibbs_sample(theta, n, rng, chart="natural")
        # inverse-CDF draws over the enumerated outcomes, chunk by chunk
        logits = np.concatenate([T @ theta for T in self._chunks()])
        c = np.cumsum(np.exp(logits - logits.max()))
        k = np.minimum(np.searchsorted(c, rng.random(n) * c[-1], side="right"), len(c) - 1)
        return self._decode(k.astype(np.int64))

    def _fields(self):
        """Per variable: the statistics containing it and their other variables (padded with n)."""
        if not hasattr(self, "_field_cache"):
            out = []
            for i in range(self.n):
                ms = [j for j, m in enumerate(self.statistics) if i in m]
                order = max([len(self.statistics[j]) for j in ms], default=1)
                others = np.array([[v for v in self.statistics[j] if v != i] + [self.n] * (order - len(self.statistics[j]))
                                   for j in ms], dtype=int).reshape(len(ms), max(order - 1, 0))
                out.append((np.array(ms, dtype=int), others))
            self._field_cache = out
        return self._field_cache

    def gibbs_sample(self, p: Any, n_samples: int, rng: Any = None, *, chains: int = 16, burn_in: int = 200,
                     thin: int = 1, chart: Optional[str] = None, return_chains: bool = False):
        r"""Draws by systematic-scan Gibbs sampling (approximate: a Markov chain, not independent draws).

        Each sweep updates :math:`x_1, \dots, x_n` in turn from its conditional law; for spins
        :math:`P(x_i = +1 \mid x_{-i}) = \sigma(2h_i)` with the local field
        :math:`h_i = \sum_{m \ni i}\theta_m\prod_{j\in m\setminus i}x_j` (for bits :math:`\sigma(h_i)`).
        ``chains`` independent chains start from uniform outcomes, run ``burn_in`` sweeps,
        then keep one state every ``thin`` sweeps until ``n_samples`` states are kept in all.

        Returns
        -------
        ``(n_samples, n)`` array, or ``(chains, n_samples // chains, n)`` with ``return_chains``
        (``n_samples`` is then rounded up to a multiple of ``chains``).
        """
        n_samples = _points.positive_int(n_samples, "n_samples")
        chains = _points.positive_int(chains, "chains")
        thin = _points.positive_int(thin, "thin")
        if isinstance(burn_in, bool) or not isinstance(burn_in, (int, np.integer)) or burn_in < 0:
            raise ValueError(f"burn_in must be a non-negative integer, got {burn_in!r}")
        src = self if chart is None else self.in_chart(chart)
        theta = np.asarray(B.to_numpy(src.to_chart(src._as_point(p), "natural")), dtype=float)
        if theta.ndim != 1:
            raise ValueError(f"gibbs_sample takes one distribution (shape ({self.dim},)), got shape {theta.shape}")
        rng = _points.random_generator(rng)
        per_chain = -(-n_samples // chains)
        lo, hi = self.values
        spin = self.values == (-1, 1)
        X = np.where(rng.random((chains, self.n)) < 0.5, float(lo), float(hi))
        ext = np.concatenate([X, np.ones((chains, 1))], axis=1)
        fields = self._fields()
        kept = np.empty((chains, per_chain, self.n))
        sweeps = burn_in + per_chain * thin
        for s in range(sweeps):
            u = rng.random((chains, self.n))
            for i, (ms, others) in enumerate(fields):
                h = np.prod(ext[:, others], axis=-1) @ theta[ms] if len(ms) else np.zeros(chains)
                z = 2.0 * h if spin else h
                # P(x_i = hi) = sigmoid(z), written to stay finite for any z
                prob = np.exp(-np.logaddexp(0.0, -z))
                ext[:, i] = np.where(u[:, i] < prob, float(hi), float(lo))
            if s >= burn_in and (s - burn_in) % thin == thin - 1:
                kept[:, (s - burn_in) // thin] = ext[:, :self.n]
        if return_chains:
            return kept
        return kept.reshape(-1, self.n)[:n_samples]

    def estimate_moments(self, p: Any, n_samples: int = 20_000, rng: Any = None, *, chains: int = 16,
                         burn_in: int = 200, thin: int = 1) -> MonteCarloEstimate:
        r"""Monte Carlo estimate of :math:`\eta = E_p[t(x)]` from :meth:`gibbs_sample`.

        ``stderr`` is the standard deviation of the ``chains`` per-chain means over
        :math:`\sqrt{\text{chains}}`: it accounts for the autocorrelation within chains, and
        is honest when each chain has mixed after ``burn_in`` sweeps.
        """
        X = self.gibbs_sample(p, n_samples, rng, chains=chains, burn_in=burn_in, thin=thin, return_chains=True)
        if X.shape[0] < 2:
            raise ValueError("estimate_moments needs chains >= 2 for a standard error")
        means = self._stats(X).mean(axis=1)
        return MonteCarloEstimate(means.mean(0), means.std(0, ddof=1) / math.sqrt(len(means)), X.shape[0] * X.shape[1])

    def estimate_fisher(self, p: Any, n_samples: int = 20_000, rng: Any = None, *, chains: int = 16,
                        burn_in: int = 200, thin: int = 1) -> MonteCarloEstimate:
        r"""Monte Carlo estimate of the Fisher matrix :math:`\mathrm{Cov}_p[t(x)]` (natural chart).

        The pooled covariance of the Gibbs draws; ``stderr`` from the spread of the
        per-chain covariances, as in :meth:`estimate_moments`.
        """
        X = self.gibbs_sample(p, n_samples, rng, chains=chains, burn_in=burn_in, thin=thin, return_chains=True)
        if X.shape[0] < 2:
            raise ValueError("estimate_fisher needs chains >= 2 for a standard error")
        T = self._stats(X)                                  # (chains, m, dim)
        D = T - T.reshape(-1, self.dim).mean(0)
        per_chain = np.einsum("cni,cnj->cij", D, D) / T.shape[1]
        return MonteCarloEstimate(per_chain.mean(0), per_chain.std(0, ddof=1) / math.sqrt(len(per_chain)),
                                  X.shape[0] * X.shape[1])

    def random_point(self, rng=None, scale: float = 1.0):
        """A random natural parameter, standard normal times ``scale``, in the current chart."""
        theta = scale * _points.random_generator(rng).standard_normal(self.dim)
        return self.from_chart(theta, "natural")


class IsingModel(BinaryExponentialFamily):
    r"""The Ising model on a graph: statistics :math:`x_i` (all :math:`i`), then :math:`x_ix_j` per edge.

    :math:`p_\theta(x) \propto \exp(\sum_i h_i x_i + \sum_{(i,j)\in E} J_{ij}x_ix_j)`, natural
    parameters :math:`\theta = (h_0, \dots, h_{n-1}, J_{e_1}, \dots)` in the order of ``edges``.
    Without edges it is the independence model.

    Parameters
    ----------
    n : int
    edges : sequence of pairs ``(i, j)``, ``i != j``
    **kwargs
        As for :class:`BinaryExponentialFamily` (``values``, ``chart``, ``max_exact``).
    """

    def __init__(self, n: int, edges: Sequence[Tuple[int, int]] = (), **kwargs: Any):
        edges = list(edges)
        for e in edges:
            if isinstance(e, (str, bytes)) or not hasattr(e, "__len__") or len(e) != 2:
                raise ValueError(f"each edge must be a pair (i, j), got {e!r}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n (the number of binary variables) must be a positive integer, got {n!r}")
        # one statistic per variable: refused before the list of 2^n-state monomials is built
        check_fits(int(n) + len(edges), f"IsingModel(n={int(n)}) (one statistic per variable and edge)")
        self.edges = tuple((int(i), int(j)) for i, j in edges) if edges else ()
        kwargs.setdefault("name", f"IsingModel(n={int(n)}, {len(edges)} edges)")
        super().__init__(n, [(i,) for i in range(int(n))] + [tuple(e) for e in edges], **kwargs)
