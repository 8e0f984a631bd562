r"""Termination criteria of the IGO / CMA-ES search (Hansen's tutorial 2016, App. B.3).

A restart strategy (:mod:`~infogeo.solvers.igo_restarts`) relies on these to
end a local run early, so they decide how many evaluations a failed run costs.
With :math:`T = 10 + \lceil 30d/\lambda\rceil` iterations of history:

* ``tolfun``: the best values of the last :math:`T` iterations and all values of
  the last iteration lie within ``tolfun``; ``tolfunhist``: the best values of
  the last :math:`T` iterations within ``tolfunhist``;
* ``tolx``: :math:`\sigma\sqrt{C_{ii}} <` ``tolx`` and :math:`\sigma|p_{c,i}| <` ``tolx`` for all :math:`i`;
* ``noeffectaxis`` / ``noeffectcoord``: adding :math:`0.1\sigma` times a
  principal axis, or :math:`0.2\sigma\sqrt{C_{ii}}` to a coordinate, leaves the
  mean unchanged in floating point;
* ``conditioncov``: :math:`\mathrm{cond}(C) >` ``tolconditioncov``;
* ``tolstagnation``: over the last :math:`L` iterations, :math:`L` from
  ``tolstagnation`` (default :math:`100 + 100 d^{3/2}/\lambda`) up to 20% of
  the run, the medians of the recent 30% of both the best and the median
  values are no better than those of the earliest 30%;
* ``tolflatfitness``: more than ``tolflatfitness`` consecutive iterations with
  the best and the :math:`\lceil 0.1 + \lambda/4\rceil`-th value equal;
* ``tolupsigma``: :math:`\sigma/\sigma_0 >` ``tolupsigma`` :math:`\cdot\max_i D_i`.
"""
from __future__ import annotations

import math
from typing import Any, Dict

import numpy as np

__all__ = ["termination_criteria"]


def termination_criteria(es: Any) -> Dict[str, Any]:
    """The criteria that hold for the search state ``es`` (an :class:`~infogeo.solvers.IGOSearch`)."""
    tol, out = es.tol, {}
    if es.f_target is not None and es.best_f <= es.f_target:
        out["ftarget"] = es.f_target
    if es.countevals + es.popsize > es.max_evals:
        out["maxfevals"] = es.max_evals
    if es.max_iter is not None and es.countiter >= es.max_iter:
        out["maxiter"] = es.max_iter
    if es._nonfinite >= tol["nofinite"]:
        out["nofinite"] = tol["nofinite"]
    if es.countiter == 0:
        return out
    n, lam, sigma = es.dim, es.popsize, es.sigma
    span = 10 + int(math.ceil(30 * n / lam))
    if len(es._hist_best) >= span:
        recent = np.asarray(es._hist_best[-span:])   # only the window: the whole history grows with the run
        if np.all(np.isfinite(recent)):
            hist_range = recent.max() - recent.min()
            finite = es._last_fx[np.isfinite(es._last_fx)]
            if hist_range < tol["tolfun"] and finite.size == lam and np.ptp(finite) < tol["tolfun"]:
                out["tolfun"] = tol["tolfun"]
            if hist_range < tol["tolfunhist"]:
                out["tolfunhist"] = tol["tolfunhist"]
    diag_C = es.C if es.diagonal else np.diag(es.C)
    if np.all(sigma * np.sqrt(diag_C) < tol["tolx"]) and np.all(sigma * np.abs(es.p_c) < tol["tolx"]):
        out["tolx"] = tol["tolx"]
    m = es.mean
    i = es.countiter % n
    if es.diagonal:
        axis = np.zeros(n)
        axis[i] = es.D[i]
    else:
        axis = es.D[i] * es.B[:, i]
    if np.all(m == m + 0.1 * sigma * axis):
        out["noeffectaxis"] = True
    if np.any(m == m + 0.2 * sigma * np.sqrt(diag_C)):
        out["noeffectcoord"] = True
    if (es.D.max() / es.D.min()) ** 2 > tol["conditioncov"]:
        out["conditioncov"] = tol["conditioncov"]
    if es._flat > tol["tolflatfitness"]:
        out["tolflatfitness"] = tol["tolflatfitness"]
    if sigma / es.sigma0 > tol["tolupsigma"] * es.D.max():
        out["tolupsigma"] = tol["tolupsigma"]
    if _stagnated(es):
        out["tolstagnation"] = es.tol["tolstagnation"]
    return out


def _stagnated(es: Any) -> bool:
    window = es.tol["tolstagnation"]
    if not window or es.countiter < window:
        return False
    length = min(20000, max(window, int(0.2 * es.countiter)))
    best = np.asarray(es._hist_best[-length:])
    median = np.asarray(es._hist_median[-length:])
    k = max(1, int(0.3 * len(best)))
    return bool(np.median(best[-k:]) >= np.median(best[:k]) and np.median(median[-k:]) >= np.median(median[:k]))
