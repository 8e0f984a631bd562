r"""IGO on :math:`\{-1, +1\}^n`: natural-gradient search over a binary exponential family.

Information-geometric optimisation (Ollivier, Arnold, Auger & Hansen 2017) of a black-box
:math:`f: \{-1, +1\}^n \to \mathbb{R}` over a family :math:`p_\theta(x) \propto e^{\theta^Tt(x)}`.
Each iteration draws :math:`\lambda` points, ranks them (best first) and moves along the
natural gradient of the weighted log-likelihood :math:`\sum_i w_i\log p_\theta(x_{i:\lambda})`.
For an exponential family that natural gradient, in the mean parameters
:math:`\eta = E_\theta[t]`, is :math:`\sum_i w_i (t(x_{i:\lambda}) - \eta)` (the score
:math:`t(x) - \eta` pulled through :math:`F^{-1}`), so the IGO step in expectation parameters is

.. math:: \eta \leftarrow \eta + \delta t\sum_i w_i\,\big(t(x_{i:\lambda}) - \eta\big).

On the independence model it is PBIL (Baluja 1994) with rank weights, and with
:math:`\lambda = 2`, :math:`w = (\tfrac12, -\tfrac12)` the compact GA (Harik, Lobo & Goldberg 1999):
Ollivier et al. (2017, Sec. 3.1) derive both this way.  With interaction statistics (an
:class:`~infogeo.IsingModel`) the new :math:`\eta` is mapped back to :math:`\theta` by the
exact Legendre inversion (Newton on the convex dual, warm-started) while :math:`2^n` is small;
beyond ``exact_up_to`` variables the step is taken in :math:`\theta` with a Monte Carlo
Fisher matrix, :math:`\theta \leftarrow \theta + \delta t\,\hat F^{-1}\sum_i w_i(t(x_i) - \hat\eta)`,
:math:`\hat F, \hat\eta` from persistent Gibbs chains (no evaluations of :math:`f`).

Defaults, none tuned per problem: the population :math:`\lambda = 4 + \lfloor 3\ln n\rfloor` of
CMA-ES (Hansen 2016), which the IGO paper inherits, with the quantile rank weights, ties sharing
the mean weight of their ranks (Ollivier et al. 2017, Sec. 2.3); the learning rate
:math:`\delta t = \min(\tfrac12, \sqrt{\mu_{\mathrm{eff}}/k})` for :math:`k` statistics, which gives
the step on a flat function (pure sampling noise, of covariance :math:`F/\mu_{\mathrm{eff}}` in
:math:`\eta`) a squared Fisher length of about one per iteration whatever the family: on the
independence model each marginal then random-walks by about :math:`1/\sqrt n` per iteration, the
scale of cGA's :math:`1/K` with :math:`K \approx \sqrt n` (Sudholt & Witt 2019).  Every natural parameter stays in
:math:`|\theta_m| \le \tfrac12\log(n - 1)`, i.e. on the independence model every marginal
keeps :math:`1/n \le P(x_i = +1) \le 1 - 1/n` (the borders of cGA and PBIL variants in
the runtime literature, e.g. Droste 2006), so the search never freezes at a corner.
"""
from __future__ import annotations

import logging
import math
import numbers
from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as np

from ..geometry.points import random_generator
from .igo import quantile_weights, rank_order
from .result import CONVERGED, LIMIT_REACHED, OptimizeResult

logger = logging.getLogger("infogeo.solvers")

__all__ = ["DiscreteIGO"]


class DiscreteIGO:
    r"""Minimise a pseudo-Boolean black box by IGO over a binary exponential family.

    Parameters
    ----------
    n : int
        Number of :math:`\pm 1` variables.
    family : BinaryExponentialFamily or IndependenceModel, optional
        The search family, on spins :math:`\{-1, +1\}`; default the independence model.
    edges : sequence of pairs, optional
        Shorthand for ``family=IsingModel(n, edges)`` (give ``family`` or ``edges``, not both).
    population : int, optional
        :math:`\lambda`, default :math:`4 + \lfloor 3\ln n\rfloor`.
    learning_rate : float, optional
        :math:`\delta t`; default :math:`\min(\tfrac12, \sqrt{\mu_{\mathrm{eff}}/k})` with :math:`k` the
        number of statistics and :math:`\mu_{\mathrm{eff}} = (\sum|w_i|)^2/\sum w_i^2` (module notes).
    weights : {"quantile", "truncation"}
        Rank weights: the quantile weights :math:`\log\frac{\lambda+1}{2} - \log i` (positive for the
        better half, negative for the worse; Hansen 2016), scaled to :math:`\sum_i|w_i| = 1`, or
        :math:`1/\mu` on the best half and 0 elsewhere.
    theta_max : float, optional
        Bound on every :math:`|\theta_m|`; default :math:`\frac12\log(n - 1)` (marginals in :math:`[1/n, 1 - 1/n]`).
    max_evals : int
        Budget of evaluations of ``f`` (never exceeded).
    f_target : float, optional
        Stop once a value :math:`\le` ``f_target`` is found.
    max_stagnation : int, optional
        Stop after this many iterations without improving the best value (default: none).
    exact_up_to : int
        Largest ``n`` for exact sampling and exact Legendre inversion of an interaction family.
    seed : int or Generator
    callback : callable, optional
        ``callback(info)`` after each iteration (``iter``, ``nfev``, ``best``, ``theta``); true stops.

    Notes
    -----
    ``minimize(f)`` takes ``f`` mapping a ``(lambda, n)`` array of :math:`\pm1` rows to
    ``lambda`` values; NaN and infinite values rank last.  The result has ``x`` (the best
    point), ``fun``, ``nfev``, ``nit``, ``theta`` (the final natural parameters),
    ``probs`` (:math:`P(x_i = +1)` under the final distribution, for the independence model)
    and ``message``.
    """

    name = "DiscreteIGO"

    def __init__(self, n: int, family: Any = None, *, edges: Optional[Sequence[Tuple[int, int]]] = None,
                 population: Optional[int] = None, learning_rate: Optional[float] = None,
                 weights: str = "quantile", theta_max: Optional[float] = None, max_evals: int = 100_000,
                 f_target: Optional[float] = None, max_stagnation: Optional[int] = None, exact_up_to: int = 12,
                 seed: Any = None, callback: Optional[Callable[[dict], Any]] = None):
        from ..statistical import BinaryExponentialFamily, IndependenceModel, IsingModel

        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
            raise ValueError(f"n must be an integer >= 2 (the number of variables), got {n!r}")
        self.n = int(n)
        if family is not None and edges is not None:
            raise ValueError("give family or edges, not both")
        if edges is not None:
            family = IsingModel(self.n, edges=edges)
        if family is None or isinstance(family, IndependenceModel):
            if family is not None and family.dim != self.n:
                raise ValueError(f"family has {family.dim} variables, expected n = {self.n}")
            self.statistics = tuple((i,) for i in range(self.n))
            self.family = None
        elif isinstance(family, BinaryExponentialFamily):
            if family.n != self.n:
                raise ValueError(f"family has {family.n} variables, expected n = {self.n}")
            if family.values != (-1, 1):
                raise ValueError("DiscreteIGO searches {-1, +1}^n: the family must have values=(-1, 1)")
            self.statistics = family.statistics
            self.family = None if all(len(m) == 1 for m in family.statistics) and \
                len(family.statistics) == self.n and sorted(family.statistics) == list(family.statistics) \
                else family
        else:
            raise TypeError("family must be a BinaryExponentialFamily (IsingModel) or an IndependenceModel, got "
                            f"{type(family).__name__}")
        self.dim = len(self.statistics)
        lam = population if population is not None else 4 + int(3 * math.log(self.n))
        if isinstance(lam, bool) or not isinstance(lam, (int, np.integer)) or lam < 2:
            raise ValueError(f"population must be an integer >= 2, got {population!r}")
        self.population = int(lam)
        if weights not in ("quantile", "truncation"):
            raise ValueError(f"weights must be 'quantile' or 'truncation', got {weights!r}")
        self.weights = weights
        w = self._rank_weights()
        lr = learning_rate if learning_rate is not None else min(0.5, math.sqrt(1.0 / np.sum(w ** 2) / self.dim))
        if isinstance(lr, (bool, np.bool_)) or not (isinstance(lr, numbers.Real) and 0 < lr <= 1):
            raise ValueError(f"learning_rate must be in (0, 1], got {learning_rate!r}")
        self.learning_rate = float(lr)
        tm = theta_max if theta_max is not None else 0.5 * math.log(max(self.n - 1, 2))
        if isinstance(tm, (bool, np.bool_)) or not (isinstance(tm, numbers.Real) and tm > 0 and math.isfinite(tm)):
            raise ValueError(f"theta_max must be a positive finite number, got {theta_max!r}")
        self.theta_max = float(tm)
        if isinstance(max_evals, bool) or not isinstance(max_evals, (int, np.integer)) or max_evals < self.population:
            raise ValueError(f"max_evals must be an integer >= the population ({self.population}), got {max_evals!r}")
        self.max_evals = int(max_evals)
        if max_stagnation is not None and (not isinstance(max_stagnation, (int, np.integer)) or max_stagnation < 1):
            raise ValueError(f"max_stagnation must be a positive integer or None, got {max_stagnation!r}")
        self.f_target, self.max_stagnation, self.exact_up_to = f_target, max_stagnation, int(exact_up_to)
        random_generator(seed, "seed")   # refused here, not at the first minimize
        self.seed, self.callback = seed, callback

    # ------------------------------------------------------------ weights
    def _rank_weights(self) -> np.ndarray:
        lam = self.population
        if self.weights == "truncation":
            mu = lam // 2
            return np.r_[np.full(mu, 1.0 / mu), np.zeros(lam - mu)]
        w = quantile_weights(lam)
        return w / np.abs(w).sum()

    # ------------------------------------------------------------ the run
    def minimize(self, f: Callable[[np.ndarray], Any]) -> OptimizeResult:
        """Minimise ``f`` (rows of :math:`\\pm 1`, batch ``(lambda, n) -> (lambda,)``); see the class notes."""
        if not callable(f):
            raise TypeError("f must be callable: a (lambda, n) array of +-1 rows to lambda values")
        rng = random_generator(self.seed, "seed")
        step = _IndependentStep(self) if self.family is None else (
            _ExactStep(self) if self.n <= self.exact_up_to else _GibbsStep(self, rng))
        w = self._rank_weights()
        lam, nfev, it, stall = self.population, 0, 0, 0
        best_x, best_f = None, math.inf
        status, message = LIMIT_REACHED, f"evaluation budget max_evals = {self.max_evals} used"
        while nfev + lam <= self.max_evals:
            X = step.sample(lam, rng)
            fx = np.asarray(f(X.copy()), dtype=float).reshape(-1)
            if fx.shape != (lam,):
                raise ValueError(f"f must return one value per row: {lam} values, got shape {fx.shape}")
            nfev += lam
            it += 1
            order = rank_order(fx)
            if np.isfinite(fx[order[0]]) and fx[order[0]] < best_f:
                best_f, best_x, stall = float(fx[order[0]]), X[order[0]].copy(), 0
            else:
                stall += 1
            step.update(X[order], _tie_averaged(w, fx[order]))
            if self.callback is not None and self.callback({"iter": it, "nfev": nfev, "best": best_f,
                                                            "theta": step.theta.copy()}):
                status, message = 2, "stopped by the callback"
                break
            if self.f_target is not None and best_f <= self.f_target:
                status, message = CONVERGED, f"f_target = {self.f_target} reached"
                break
            if self.max_stagnation is not None and stall >= self.max_stagnation:
                status, message = CONVERGED, f"no improvement in {self.max_stagnation} iterations"
                break
        if best_x is None:
            best_x = step.sample(1, rng)[0]
        out = OptimizeResult(x=best_x, fun=best_f, nfev=nfev, nit=it, success=status == CONVERGED, status=status,
                             message=message, theta=step.theta.copy(), grad_norm=float("nan"))
        if self.family is None:
            out["probs"] = 0.5 * (1.0 + np.tanh(step.theta))
        return out


def _tie_averaged(w: np.ndarray, f_sorted: np.ndarray) -> np.ndarray:
    """Rank weights with every group of equal values given the mean weight of its ranks.

    Ollivier et al. (2017, Sec. 2.3): the IGO utility of a point is the average of the weight
    function over the quantiles its value occupies, so ties carry no spurious ranking signal
    (plateaus such as LeadingOnes' are full of ties).
    """
    out = w.copy()
    key = np.where(np.isnan(f_sorted), np.inf, f_sorted)
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    for a, b in zip(starts, np.r_[starts[1:], len(key)]):
        if b - a > 1:
            out[a:b] = w[a:b].mean()
    return out


class _IndependentStep:
    """The independence model in closed form: :math:`\\eta = \\tanh\\theta`, PBIL-type step in :math:`\\eta`."""

    def __init__(self, s: DiscreteIGO):
        self.s, self.theta = s, np.zeros(s.n)
        self.eta_max = math.tanh(s.theta_max)

    def sample(self, lam, rng):
        p = 0.5 * (1.0 + np.tanh(self.theta))
        return np.where(rng.random((lam, self.s.n)) < p, 1.0, -1.0)

    def update(self, X, w):
        eta = np.tanh(self.theta)
        eta = np.clip(eta + self.s.learning_rate * (w @ (X - eta)), -self.eta_max, self.eta_max)
        self.theta = np.arctanh(eta)


class _ExactStep:
    """An interaction family, small: exact sampling, IGO step in :math:`\\eta`, exact Legendre inversion."""

    def __init__(self, s: DiscreteIGO):
        from ..statistical.legendre import newton_legendre
        self.s, self.fam, self.invert = s, s.family, newton_legendre
        self.theta = np.zeros(s.dim)
        self.eta = self.fam.moments(self.theta)

    def sample(self, lam, rng):
        return self.fam._sample(self.theta, lam, rng)

    def update(self, X, w):
        T = self.fam.sufficient_statistics(X)
        direction = w @ (T - self.eta)
        lr = self.s.learning_rate
        for _ in range(30):
            target = self.eta + lr * direction
            try:
                theta = self.invert(self.fam.log_partition, target, self.theta, self.fam.in_natural_domain,
                                    tol=1e-10, grad=self.fam.moments, hessian=self.fam.fisher_natural)
                break
            except (ValueError, RuntimeError):   # left the marginal polytope (negative weights): shorter step
                lr *= 0.5
        else:
            return
        self.theta = np.clip(theta, -self.s.theta_max, self.s.theta_max)
        self.eta = self.fam.moments(self.theta)


class _GibbsStep:
    """An interaction family, large: persistent Gibbs chains, IGO step in :math:`\\theta` with a MC Fisher."""

    def __init__(self, s: DiscreteIGO, rng):
        self.s, self.fam = s, s.family
        self.theta = np.zeros(s.dim)
        self.n_chains = max(s.population, 2 * s.dim + 20)
        self.X = np.where(rng.random((self.n_chains, s.n)) < 0.5, 1.0, -1.0)

    def sample(self, lam, rng):
        fam, ext = self.fam, np.concatenate([self.X, np.ones((self.n_chains, 1))], axis=1)
        for _ in range(2):   # two sweeps of every chain between iterations
            u = rng.random((self.n_chains, fam.n))
            for i, (ms, others) in enumerate(fam._fields()):
                h = np.prod(ext[:, others], axis=-1) @ self.theta[ms] if len(ms) else 0.0
                ext[:, i] = np.where(u[:, i] < np.exp(-np.logaddexp(0.0, -2.0 * h)), 1.0, -1.0)
        self.X = ext[:, :fam.n]
        return self.X[rng.choice(self.n_chains, size=lam, replace=False)]

    def update(self, X, w):
        T = self.fam.sufficient_statistics(X)
        Tc = self.fam.sufficient_statistics(self.X)
        eta = Tc.mean(0)
        F = np.cov(Tc, rowvar=False).reshape(self.s.dim, self.s.dim)
        F += 1e-3 * np.eye(self.s.dim) * max(np.trace(F) / self.s.dim, 1e-12)   # Tikhonov: F is estimated
        self.theta = np.clip(self.theta + self.s.learning_rate * np.linalg.solve(F, w @ (T - eta)),
                             -self.s.theta_max, self.s.theta_max)
