"""Baselines of benchmarks/discrete_search.py: cGA, PBIL and UMDA, each from its published definition.

All three keep a vector p of marginal probabilities P(x_i = +1) of an independence model, start at
p = 1/2, and keep p within the borders [1/n, 1 - 1/n] used in the runtime analyses of these
algorithms (Droste 2006; Witt 2019), so that none freezes at a corner.  Each minimises f on a batch of
+-1 rows and returns the number of evaluations until a value <= f_target was first drawn
(``None`` when the budget ran out first).

* cGA, the compact genetic algorithm (Harik, Lobo & Goldberg 1999): draw two points, and where they
  differ move p_i by 1/K towards the better one; parameter K (the simulated population size).
* PBIL, population-based incremental learning (Baluja 1994): draw lam points and move p towards the best,
  p <- (1 - alpha) p + alpha x_best; parameters lam and alpha.
* UMDA, the univariate marginal distribution algorithm (Mühlenbein & Paaß 1996): draw lam points and set p
  to the frequencies of the mu = lam / 2 best; parameter lam.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np


def _draw(p, lam, rng):
    return np.where(rng.random((lam, p.size)) < p, 1.0, -1.0)


def _run(f, n, step, lam, f_target, max_evals, rng) -> Optional[int]:
    p = np.full(n, 0.5)
    lo, hi = 1.0 / n, 1.0 - 1.0 / n
    evals = 0
    while evals + lam <= max_evals:
        X = _draw(p, lam, rng)
        fx = np.asarray(f(X), dtype=float)
        evals += lam
        if fx.min() <= f_target:
            return evals - lam + 1 + int(np.argmax(fx <= f_target))
        p = np.clip(step(p, X[np.argsort(fx, kind="stable")]), lo, hi)
    return None


def cga(f: Callable, n: int, K: float, f_target: float, max_evals: int, rng) -> Optional[int]:
    def step(p, X):
        return p + (X[0] - X[1]) / (2.0 * K)      # +-1/K where the two points differ, 0 elsewhere
    return _run(f, n, step, 2, f_target, max_evals, rng)


def pbil(f: Callable, n: int, lam: int, alpha: float, f_target: float, max_evals: int, rng) -> Optional[int]:
    def step(p, X):
        return (1 - alpha) * p + alpha * (X[0] > 0)
    return _run(f, n, step, lam, f_target, max_evals, rng)


def umda(f: Callable, n: int, lam: int, f_target: float, max_evals: int, rng) -> Optional[int]:
    def step(p, X):
        return (X[: lam // 2] > 0).mean(axis=0)
    return _run(f, n, step, lam, f_target, max_evals, rng)
