r"""Restarts with growing populations for the IGO search: IPOP (Auger & Hansen 2005) and BIPOP (Hansen 2009).

A larger population smooths the quantile-rewritten objective: the natural
gradient of :math:`E_p[W^f]` sees the global structure of a multimodal
function (Rastrigin) once :math:`\lambda` is large enough.  After a local run
stops (:mod:`~infogeo.solvers.igo_termination`),

* **IPOP** restarts from ``x0`` with :math:`\lambda \leftarrow` ``incpopsize`` :math:`\cdot\lambda`
  and the initial :math:`\sigma_0`;
* **BIPOP** interleaves that *large-population* regime with a *small-population*
  regime, :math:`\lambda_s = \lfloor\lambda_0(\lambda_\ell/(2\lambda_0))^{u^2}\rfloor`,
  :math:`\sigma_s = \sigma_0\,10^{-2v}` (:math:`u, v` uniform on :math:`[0, 1]`,
  :math:`\lambda_\ell` the last large population), choosing the small regime
  whenever it has used fewer evaluations than the large one so far.

``x0`` may be a callable ``x0(rng)`` that draws a fresh initial mean at every run.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable, Optional

import numpy as np

from ..geometry.points import random_generator
from .igo_parameters import default_popsize
from .igo_search import IGOSearch
from .result import OptimizeResult

logger = logging.getLogger("infogeo.solvers")

__all__ = ["igo_minimize"]

_STOPPING_ALL = ("ftarget", "maxfevals", "callback", "maxiter")


def igo_minimize(f: Callable[[np.ndarray], Any], x0: Any, sigma0: float, *, restarts: int = 0,
                 restart_strategy: str = "ipop", incpopsize: float = 2.0, popsize: Optional[int] = None,
                 covariance: str = "full", max_evals: int = 100_000, f_target: Optional[float] = None,
                 seed: Any = None, callback: Optional[Callable[[dict], Any]] = None,
                 max_iter: Optional[int] = None, verbose: bool = False, **options: Any) -> OptimizeResult:
    r"""Minimise ``f`` (batch ``(\lambda, d) -> (\lambda,)``) with :class:`IGOSearch` and optional restarts.

    Parameters
    ----------
    f : callable
        The objective on a batch of points.
    x0 : array or callable
        Initial mean, or ``x0(rng)`` returning one per run.
    sigma0 : float
        Initial step size of every (large-population) run.
    restarts : int
        Maximal number of restarts after the first run.
    restart_strategy : {"ipop", "bipop"}
    incpopsize : float
        Population growth factor between large-population runs.
    popsize : int, optional
        Population of the first run (default :math:`4 + \lfloor 3\ln d\rfloor`).
    covariance : {"full", "diagonal"}
    max_evals : int
        Total budget over all runs (never exceeded).
    f_target : float, optional
    seed : int or Generator
        One generator feeds every run in turn (reproducible); with ``restarts=0`` and an
        array ``x0`` the run is the one of ``IGOSearch(x0, sigma0, seed=seed)`` driven by ask/tell.
    callback : callable, optional
        Called with each iteration's history entry (with ``"run"`` added); true stops everything.
    **options
        Passed to :class:`IGOSearch` (tolerances, ``c_m``, ``c_mu``, ``active``, ``cov0``).

    Returns
    -------
    OptimizeResult
        Best point ``x`` over all runs, ``fun``, ``nfev`` (total), ``nit`` (total iterations),
        ``restarts``, ``popsizes`` (one per run), ``runs`` (each run's stop reasons and
        evaluations), ``message`` (why the last run stopped and why no restart followed),
        and the final run's ``mean``, ``sigma``, ``cov``.
    """
    if restart_strategy not in ("ipop", "bipop"):
        raise ValueError(f"restart_strategy must be 'ipop' or 'bipop', got {restart_strategy!r}")
    if int(restarts) != restarts or restarts < 0:
        raise ValueError(f"restarts must be a non-negative integer, got {restarts}")
    if not incpopsize >= 1:
        raise ValueError(f"incpopsize must be >= 1, got {incpopsize}")
    rng = random_generator(seed, "seed")
    start = (lambda: x0(rng)) if callable(x0) else (lambda: x0)
    first_x0 = np.asarray(start(), dtype=float).reshape(-1)
    d = first_x0.size
    # the population grows geometrically from the real-valued default 4 + 3 ln d (its floor is lam0)
    lam_real = float(popsize) if popsize is not None else 4 + 3 * math.log(d)
    lam0 = int(popsize) if popsize is not None else default_popsize(d)
    lam_large, evals = lam0, {"large": 0, "small": 0}
    best: Optional[OptimizeResult] = None
    nfev = nit = 0
    runs, history = [], []
    es: Optional[IGOSearch] = None
    out_of_budget = False
    for run in range(int(restarts) + 1):
        mean0 = first_x0 if run == 0 else np.asarray(start(), dtype=float).reshape(-1)
        regime, lam, sigma = "large", lam_large, sigma0
        if run > 0:
            if restart_strategy == "ipop" or evals["small"] >= evals["large"]:
                lam_real *= incpopsize
                lam_large = lam = int(lam_real)
            else:
                regime = "small"
                lam = max(2, int(lam0 * (0.5 * lam_large / lam0) ** (rng.uniform() ** 2)))
                sigma = sigma0 * 10 ** (-2 * rng.uniform())
        budget = max_evals - nfev
        if run > 0 and budget < lam:
            out_of_budget = True
            break
        es = IGOSearch(mean0, sigma, popsize=lam, covariance=covariance, seed=rng,
                       max_evals=budget, f_target=f_target,
                       max_iter=None if max_iter is None else max_iter - nit, verbose=verbose, **options)
        if verbose:
            logger.info("IGO search run %d (%s regime): popsize %d, sigma0 %.3g", run, regime, lam, sigma)

        def relay(entry, run=run):
            entry["run"] = run
            return callback is not None and callback(entry)

        es.optimize(f, relay)
        r = es.result
        nfev, nit = nfev + r.nfev, nit + r.nit
        evals[regime] += r.nfev
        history.extend(r.history)
        runs.append({"popsize": lam, "sigma0": sigma, "nfev": r.nfev, "fun": r.fun, "stop": r.stop,
                     "regime": regime})
        if best is None or r.fun < best.fun:
            best = r
        if any(k in r.stop for k in _STOPPING_ALL):
            break
    assert es is not None and best is not None, "the budget must allow one population"
    last = es.result
    # a run's limits are what remained of the user's: the message names the user's
    why = last.message.replace(f"(max_evals={es.max_evals})", f"(max_evals={max_evals})")
    if max_iter is not None:
        why = why.replace(f"(max_iter={es.max_iter})", f"(max_iter={max_iter})")
    if out_of_budget:
        why += f"; remaining budget ({max_evals - nfev} evaluations) too small for another run"
    elif restarts and not any(k in last.stop for k in _STOPPING_ALL):
        why += f"; no restarts left ({restarts} used)"
    hit = f_target is not None and best.fun <= f_target
    return OptimizeResult(x=best.x, fun=best.fun, nit=nit, nfev=nfev, success=bool(hit or last.success),
                          status=0 if hit or last.success else last.status,
                          message=why, restarts=len(runs) - 1, popsizes=[r["popsize"] for r in runs],
                          runs=runs, history=history, mean=last.mean, sigma=last.sigma, cov=last.cov,
                          stop=last.stop, grad_norm=float("nan"))
