r"""IGO search on Gaussians with cumulation, step-size control and an ask/tell interface (CMA-ES).

The search distribution is :math:`N(m, \sigma^2 C)`, a point of
:class:`~infogeo.statistical.Gaussian` (``covariance="full"``) or of its
diagonal sub-family (``covariance="diagonal"``, separable CMA-ES, Ros & Hansen
2008).  One iteration, with :math:`y_i = (x_{i:\lambda} - m)/\sigma` ranked best
first and the weights :math:`w_i` of
:class:`~infogeo.solvers.igo_parameters.StrategyParameters`:

* **mean** -- the IGO natural-gradient step of the positively weighted
  log-likelihood, :math:`m \leftarrow m + c_m\sigma\langle y\rangle_w`,
  :math:`\langle y\rangle_w = \sum_{i\le\mu} w_i y_i`;
* **cumulation** (Hansen & Ostermeier 2001) -- evolution paths
  :math:`p_\sigma \leftarrow (1 - c_\sigma)p_\sigma + \sqrt{c_\sigma(2 - c_\sigma)\mu_\mathrm{eff}}\,C^{-1/2}\langle y\rangle_w`
  and :math:`p_c \leftarrow (1 - c_c)p_c + h_\sigma\sqrt{c_c(2 - c_c)\mu_\mathrm{eff}}\,\langle y\rangle_w`;
* **step size** (CSA) --
  :math:`\sigma \leftarrow \sigma\exp\big(\min(1, \tfrac{c_\sigma}{d_\sigma}(\|p_\sigma\|/E\|N(0, I)\| - 1))\big)`;
* **covariance** -- rank-one plus rank-:math:`\mu`:
  :math:`C \leftarrow C + c_1(p_cp_c^T - (1 - \delta_h)C) + c_\mu\big(\sum_i w^\circ_i y_iy_i^T - \sum_i w_i\,C\big)`,
  where :math:`\sum_i w^\circ_i(y_iy_i^T - C)` is the natural gradient of
  :math:`\sum_i w^\circ_i\log p(x_i)` under the Fisher metric
  (:func:`~infogeo.solvers.igo.rank_mu_step`) and the negative weights are
  rescaled, :math:`w^\circ_i = w_i\,d/\|C^{-1/2}y_i\|^2`, so that :math:`C`
  stays positive definite (active CMA; Hansen 2016, Eq. 46-47).

The :math:`z_i = C^{-1/2}y_i` of one population are drawn *orthogonal* by
default (Wang, Emmerich & Bäck 2019; :mod:`~infogeo.solvers.igo_sampling`):
each is exactly :math:`N(0, I)`, so the expected update is the IGO step above,
with a less noisy Monte Carlo estimate; ``sampling="independent"`` draws them
i.i.d. as in the tutorial.

Points whose objective value is NaN or infinite rank last.  Termination
criteria are those of Hansen's tutorial (2016, App. B.3): ``tolfun``,
``tolfunhist``, ``tolx``, ``noeffectaxis``, ``noeffectcoord``,
``conditioncov``, ``tolstagnation``, ``tolflatfitness``, ``tolupsigma``, plus
``ftarget``, ``maxfevals`` (never exceeded), ``maxiter`` and ``nofinite``.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable, Dict, Optional

import numpy as np

from .. import backend as B
from ..geometry.points import random_generator
from .base import _ensure_console_handler, log_every
from .igo import rank_mu_step, rank_order
from .igo_parameters import StrategyParameters
from .igo_sampling import SAMPLINGS, standard_normal_samples
from .result import CONVERGED, FAILED, LIMIT_REACHED, STOPPED_BY_CALLBACK, OptimizeResult

logger = logging.getLogger("infogeo.solvers")

__all__ = ["IGOSearch"]

_CONVERGED = ("ftarget", "tolfun", "tolfunhist", "tolx")
_MESSAGES = {
    "ftarget": "reached f_target {ftarget:g}",
    "maxfevals": "evaluation budget exhausted (max_evals={maxfevals})",
    "maxiter": "iteration limit reached (max_iter={maxiter})",
    "tolfun": "converged: function values vary less than tolfun={tolfun:g}",
    "tolfunhist": "converged: best values over recent iterations vary less than tolfunhist={tolfunhist:g}",
    "tolx": "converged: search distribution smaller than tolx={tolx:g} in every coordinate",
    "noeffectaxis": "numerical precision: a principal axis step no longer changes the mean",
    "noeffectcoord": "numerical precision: a coordinate step no longer changes the mean",
    "conditioncov": "covariance condition number above tolconditioncov={conditioncov:g}",
    "tolstagnation": "stagnation: no improvement of best and median values over recent iterations",
    "tolflatfitness": "flat fitness: too many equal objective values in consecutive iterations",
    "tolupsigma": "step size grew far beyond the covariance scale (creeping divergence)",
    "nofinite": "the objective returned no finite value in {nofinite} consecutive iterations",
    "callback": "stopped by the callback",
}


class IGOSearch:
    r"""Natural-gradient (IGO / CMA-ES) search on Gaussians, with an ask/tell interface.

    Parameters
    ----------
    x0 : array, shape (d,)
        Initial mean :math:`m_0`.
    sigma0 : float
        Initial step size :math:`\sigma_0` (the search covariance is :math:`\sigma^2 C`, :math:`C_0 = I`
        unless ``cov0`` is given).
    covariance : {"full", "diagonal"}
        The Gaussian family searched: full covariance, or diagonal (separable, for
        dimensions in the hundreds: :math:`O(d)` memory and time per sample).
    popsize : int, optional
        :math:`\lambda`, default :math:`4 + \lfloor 3\ln d\rfloor`.
    sampling : {"orthogonal", "independent"}
        How :meth:`ask` draws the standard normal vectors of a population: orthogonal
        within blocks of :math:`d` (default; each still :math:`N(0, I)`), or i.i.d.
    seed : int or numpy Generator, optional
        All randomness comes from it (runs are reproducible).
    max_evals : int, optional
        Evaluation budget; :meth:`stop` fires before an iteration would exceed it.
    f_target : float, optional
        Stop once the best value is :math:`\le` ``f_target``.
    max_iter : int, optional
    cov0 : array, optional
        Initial :math:`C` (SPD ``(d, d)``, or ``(d,)`` variances for the diagonal family).
    c_m, c_mu, active
        Mean learning rate, rank-:math:`\mu` rate override, negative weights on/off
        (see :class:`~infogeo.solvers.igo_parameters.StrategyParameters`).
    tolfun, tolfunhist, tolx, tolconditioncov, tolstagnation, tolupsigma, tolflatfitness
        Termination tolerances (defaults as in the ``cma`` package).
    nofinite : int
        Stop after this many consecutive iterations without any finite value.
    precision_pattern : (d, d) boolean array, optional
        Search in the Gaussian graphical model with these free precision entries
        (:class:`~infogeo.statistical.gaussian_graphical.GaussianGraphical`): after each update
        :math:`C` is replaced by the covariance of the sub-model that matches it on the pattern
        (the IGO step of the sub-model), and the learning rates grow with the fewer free entries.

    Examples
    --------
    >>> es = IGOSearch(np.ones(3), 0.5, seed=1, f_target=1e-10)
    >>> while not es.stop():
    ...     X = es.ask()
    ...     es.tell(X, np.sum(X ** 2, axis=1))
    >>> es.result.fun <= 1e-10
    True
    """

    def __init__(self, x0: Any, sigma0: float, *, covariance: str = "full", popsize: Optional[int] = None,
                 sampling: str = "orthogonal", seed: Any = None, max_evals: Optional[int] = None,
                 f_target: Optional[float] = None, max_iter: Optional[int] = None, cov0: Any = None, c_m: float = 1.0,
                 c_mu: Optional[float] = None, active: bool = True, tolfun: float = 1e-11,
                 tolfunhist: float = 1e-12, tolx: float = 1e-11, tolconditioncov: float = 1e14,
                 tolstagnation: Optional[int] = None, tolupsigma: float = 1e20, tolflatfitness: int = 1,
                 nofinite: int = 10, verbose: Any = False, precision_pattern: Any = None):
        m = np.array(B.to_numpy(B.array(x0)), dtype=float).reshape(-1)
        if m.size < 1 or not np.all(np.isfinite(m)):
            raise ValueError(f"x0 must be a non-empty finite vector, got {m.tolist()}")
        if not (np.isfinite(sigma0) and sigma0 > 0):
            raise ValueError(f"sigma0 must be a finite number > 0, got {sigma0}")
        if covariance not in ("full", "diagonal"):
            raise ValueError(f"covariance must be 'full' or 'diagonal', got {covariance!r}")
        if sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
        if popsize is not None and int(popsize) < 2:
            raise ValueError(f"popsize must be >= 2, got {popsize}")
        n = m.size
        self.dim, self.diagonal = n, covariance == "diagonal"
        self._submodel, self._precision = None, None
        if precision_pattern is not None:
            if self.diagonal:
                raise ValueError('precision_pattern= is a sub-model of covariance="full"; the diagonal family '
                                 "is the pattern with no off-diagonal entry")
            from ..statistical import Gaussian
            self._submodel = Gaussian(n, precision_pattern=precision_pattern)
        free = None if self._submodel is None else self._submodel.free.m
        self.sp = StrategyParameters.default(n, popsize, diagonal=self.diagonal, c_m=c_m, c_mu=c_mu, active=active,
                                             free_entries=free)
        self.popsize, self.sampling = self.sp.popsize, sampling
        self.mean, self.sigma, self.sigma0 = m, float(sigma0), float(sigma0)
        self.C = self._initial_cov(cov0)
        self.p_sigma, self.p_c = np.zeros(n), np.zeros(n)
        self._decompose()
        self.rng = random_generator(seed, "seed")
        self.max_evals = math.inf if max_evals is None else int(max_evals)
        self.f_target, self.max_iter = f_target, max_iter
        self.tol = {"tolfun": tolfun, "tolfunhist": tolfunhist, "tolx": tolx, "conditioncov": tolconditioncov,
                    "tolupsigma": tolupsigma, "tolflatfitness": tolflatfitness, "nofinite": nofinite,
                    "tolstagnation": (int(100 + 100 * n ** 1.5 / self.popsize) if tolstagnation is None
                                      else int(tolstagnation))}
        self.verbose = verbose
        # verbose=k logs every k-th iteration; True about 20 rows over the iteration budget: the iteration limit or
        # what the evaluation budget allows, whichever is smaller (2000 without either)
        budget = min(max_iter or math.inf, self.max_evals / self.popsize)
        self._log_every = log_every(verbose, int(budget) if math.isfinite(budget) else 2000)
        if self._log_every:
            _ensure_console_handler()
        self.countiter = self.countevals = 0
        self.best_x, self.best_f = m.copy(), math.inf
        self.history: list = []
        self._hist_best: list = []
        self._hist_median: list = []
        self._flat = self._nonfinite = 0
        self._last_fx = np.zeros(0)
        self._stop: Dict[str, Any] = {}

    # ------------------------------------------------------------ state
    def _initial_cov(self, cov0: Any) -> np.ndarray:
        n = self.dim
        if cov0 is None:
            return np.ones(n) if self.diagonal else np.eye(n)
        C = np.array(B.to_numpy(B.array(cov0)), dtype=float)
        if self._submodel is not None and C.shape == (n, n):
            C = self._project(C)   # into the sub-model
        want = (n,) if self.diagonal else (n, n)
        if C.shape != want:
            raise ValueError(f"cov0 must have shape {want} for covariance="
                             f"{'diagonal' if self.diagonal else 'full'}, got {C.shape}")
        if self.diagonal:
            if not np.all(C > 0):
                raise ValueError("cov0 must hold positive variances")
        else:
            if not np.allclose(C, C.T) or np.linalg.eigvalsh(C).min() <= 0:
                raise ValueError("cov0 must be symmetric positive definite")
        return C.copy()

    def _project(self, C: np.ndarray) -> np.ndarray:
        r"""The covariance of the sub-model that matches ``C`` on the precision pattern (covariance selection).

        The IGO step in a sub-model cut out by zero natural parameters is the full step's moments restricted
        to the sub-model's statistics, mapped back by its mean chart: the m-projection of the updated Gaussian.
        """
        from ..statistical.gaussian_graphical import covariance_selection
        # warm start from the last precision: C moves by O(c_1 + c_mu) per iteration
        L = covariance_selection(C, self._submodel.precision_pattern, start=self._precision)
        self._precision = L
        return np.linalg.inv(L)

    def _decompose(self) -> None:
        """:math:`C = B\\,\\mathrm{diag}(D^2)B^T` (for the diagonal family :math:`B = I`, :math:`D = \\sqrt C`)."""
        if self.diagonal:
            self.D = np.sqrt(self.C)
            return
        self.C = 0.5 * (self.C + self.C.T)
        ev, self.B = np.linalg.eigh(self.C)
        # active updates are bounded to keep C positive definite; this guards round-off only
        self.D = np.sqrt(np.maximum(ev, ev.max() * 1e-20))
        self._eigen_iter = self.countiter if hasattr(self, "countiter") else 0

    def _invsqrt(self, Y: np.ndarray) -> np.ndarray:
        """Rows :math:`C^{-1/2}y` (symmetric inverse square root)."""
        if self.diagonal:
            return Y / self.D
        return ((Y @ self.B) / self.D) @ self.B.T

    @property
    def cov(self) -> np.ndarray:
        r"""The search covariance :math:`\sigma^2 C` (a ``(d, d)`` matrix in both variants)."""
        return self.sigma ** 2 * (np.diag(self.C) if self.diagonal else self.C)

    @property
    def distribution(self):
        """``(family, point)``: the search distribution as a point of infogeo's Gaussian family."""
        from ..statistical import Gaussian
        if self._submodel is not None:
            return self._submodel, self._submodel.project(self.mean, self.cov)
        family = Gaussian(self.dim, covariance="diagonal" if self.diagonal else "full")
        return family, family.point(mean=self.mean, cov=self.cov)

    # ------------------------------------------------------------ ask / tell
    def ask(self) -> np.ndarray:
        r"""Draw :math:`\lambda` candidates :math:`x_i = m + \sigma C^{1/2}z_i`, shape ``(popsize, d)``.

        The :math:`z_i` are standard normal, orthogonal within blocks of :math:`d` unless
        ``sampling="independent"`` (:func:`~infogeo.solvers.igo_sampling.standard_normal_samples`).
        """
        Z = standard_normal_samples(self.rng, self.popsize, self.dim, self.sampling)
        Y = Z * self.D if self.diagonal else (Z * self.D) @ self.B.T
        return self.mean + self.sigma * Y

    def tell(self, X: Any, fx: Any) -> None:
        """Update the distribution from candidates ``X`` (``(popsize, d)``) and their values ``fx``.

        ``X`` need not come from :meth:`ask` (injected solutions are fine).  NaN and
        infinite values rank last; an iteration without any finite value leaves the
        distribution unchanged.
        """
        X = np.asarray(X, dtype=float)
        fx = np.asarray(fx, dtype=float).reshape(-1)
        lam, n, sp = self.popsize, self.dim, self.sp
        if X.shape != (lam, n):
            raise ValueError(f"tell expects X of shape ({lam}, {n}), got {X.shape}")
        if fx.shape != (lam,):
            raise ValueError(f"tell expects {lam} objective values, got shape {fx.shape}")
        if not np.all(np.isfinite(X)):
            raise ValueError("tell: the candidates X contain NaN or inf")
        self.countiter += 1
        self.countevals += lam
        self._stop = {}
        finite = np.isfinite(fx)
        if not finite.any():
            self._nonfinite += 1
            self._record(fx, math.inf)
            return
        self._nonfinite = 0
        order = rank_order(fx)
        fs = fx[order]
        if fs[0] < self.best_f:
            self.best_f, self.best_x = float(fs[0]), X[order[0]].copy()
        Y = (X[order] - self.mean) / self.sigma
        w = sp.weights
        y_w = w[:sp.mu] @ Y[:sp.mu]
        self.mean = self.mean + sp.c_m * self.sigma * y_w
        # cumulation: p_sigma in the whitened coordinates, p_c in the coordinates of C
        cs, cc = sp.c_sigma, sp.c_c
        self.p_sigma = (1 - cs) * self.p_sigma + math.sqrt(cs * (2 - cs) * sp.mueff) * self._invsqrt(y_w[None])[0]
        ps_norm = float(np.linalg.norm(self.p_sigma))
        h_sigma = ps_norm / math.sqrt(1 - (1 - cs) ** (2 * self.countiter)) < (1.4 + 2 / (n + 1)) * sp.chi_n
        self.p_c = (1 - cc) * self.p_c + h_sigma * math.sqrt(cc * (2 - cc) * sp.mueff) * y_w
        # negative weights rescaled by the Mahalanobis norm keep C positive definite
        w_circ = w.copy()
        neg = w < 0
        if neg.any():
            w_circ[neg] *= n / np.maximum(np.sum(self._invsqrt(Y[neg]) ** 2, axis=1), 1e-300)
        delta_h = (1 - h_sigma) * cc * (2 - cc)
        zero = np.zeros(n)
        _, rank_mu = rank_mu_step(zero, self.C, Y, w_circ)      # sum w°(y y^T - C): IGO natural gradient
        _, rank_one = rank_mu_step(zero, self.C, self.p_c[None], np.ones(1))  # p_c p_c^T - C
        self.C = (self.C + sp.c_1 * (rank_one + delta_h * self.C)
                  + sp.c_mu * (rank_mu + (w_circ.sum() - w.sum()) * self.C))
        if self._submodel is not None:
            self.C = self._project(self.C)
        self.sigma *= math.exp(min(1.0, cs / sp.d_sigma * (ps_norm / sp.chi_n - 1)))
        # flat fitness: enlarge the step size (tutorial, B.3)
        k = min(lam - 1, int(math.ceil(0.1 + lam / 4)))
        if fs[0] == fs[k]:
            self._flat += 1
            self.sigma *= math.exp(0.2 + cs / sp.d_sigma)
        else:
            self._flat = 0
        if self.diagonal or self.countiter - self._eigen_iter >= sp.eigen_interval:
            self._decompose()
        self._record(fx, float(fs[0]), float(np.median(fs[finite[order]])))

    def _record(self, fx: np.ndarray, it_best: float, it_median: float = math.inf) -> None:
        self._last_fx = fx
        self._hist_best.append(it_best)
        self._hist_median.append(it_median)
        entry = {"iter": self.countiter, "x": self.mean.copy(), "fun": it_best, "best": self.best_f,
                 "nfev": self.countevals, "sigma": self.sigma}
        self.history.append(entry)
        if self._log_every and self.countiter % self._log_every == 0:
            logger.info("%6d  evals %8d  best %+.6e  sigma %.3e", self.countiter, self.countevals,
                        self.best_f, self.sigma)

    # ------------------------------------------------------------ termination
    def stop(self) -> Dict[str, Any]:
        """The termination criteria that hold now, ``{name: value}`` (empty while the search goes on)."""
        if self._stop:
            return self._stop
        from .igo_termination import termination_criteria
        self._stop = termination_criteria(self)
        return self._stop

    def add_stop(self, name: str, value: Any = True) -> None:
        """Record an external termination reason (for example ``"callback"``)."""
        self._stop = {**self.stop(), name: value}

    @property
    def result(self) -> OptimizeResult:
        """An :class:`OptimizeResult`: best point ``x``, its value ``fun``, ``nfev``, ``nit``, the
        final ``mean``, ``sigma`` and ``cov``, ``stop`` (the criteria that fired) and ``message``."""
        stop = self.stop()
        reasons = [_MESSAGES.get(k, k).format(**{**self.tol, "ftarget": self.f_target or 0.0,
                                                  "maxfevals": self.max_evals, "maxiter": self.max_iter})
                   for k in stop]
        found = math.isfinite(self.best_f)
        success = any(k in _CONVERGED for k in stop) and found
        status = (CONVERGED if success else STOPPED_BY_CALLBACK if "callback" in stop
                  else LIMIT_REACHED if ("maxiter" in stop or "maxfevals" in stop) else FAILED)
        return OptimizeResult(x=self.best_x.copy(), fun=self.best_f, nit=self.countiter, nfev=self.countevals,
                              success=success, status=status,
                              message="; ".join(reasons) if reasons else "running",
                              stop=dict(stop), history=self.history, mean=self.mean.copy(),
                              sigma=self.sigma, cov=self.cov, popsize=self.popsize, grad_norm=float("nan"))

    def optimize(self, f: Callable[[np.ndarray], Any], callback: Optional[Callable[[dict], Any]] = None
                 ) -> "IGOSearch":
        """Run ask -> ``f`` -> tell until :meth:`stop`; ``f`` maps a batch ``(popsize, d)`` to ``(popsize,)``.

        ``callback(entry)`` is called with each iteration's history entry; a true
        return value stops the search.
        """
        while not self.stop():
            X = self.ask()
            fx = np.asarray(f(X), dtype=float)
            if fx.size != self.popsize:
                raise ValueError(f"the objective must map a batch of shape {X.shape} to {self.popsize} values, "
                                 f"got shape {fx.shape}")
            self.tell(X, fx)
            if callback is not None and callback(self.history[-1]):
                self.add_stop("callback")
        return self
