"""Function evaluations to reach f <= 1e-8: infogeo's IGO search (StochasticRelaxation) vs the ``cma`` package.

Functions (minimum 0 at a known point):

* sphere, x0 = 1, sigma0 = 0.5;
* rotated ellipsoid, condition 1e6 (f = sum_i 10^(6(i-1)/(d-1)) (Rx)_i^2, R a fixed random
  rotation per dimension), x0 = 1, sigma0 = 0.5;
* Rosenbrock, x0 = 0, sigma0 = 0.5 (no restarts: a run ending in the local minimum fails);
* Rastrigin, x0 uniform in [-4, 4]^d (drawn per seed, the same for both), sigma0 = 2, with up to
  9 IPOP restarts (population doubled at each restart, every restart from the same x0);

each at d = 10 and d = 20, plus the separable ellipsoid at d = 100 with the diagonal (separable)
variants of both.  11 seeds each, target 1e-8.

Settings.  Ours: ``StochasticRelaxation(sigma0, f_target=1e-8, seed=s, max_evals=B)`` (constants of
Hansen's tutorial 2016 with ``cma``'s step-size cumulation rate, active weights, orthogonal sampling
of each population as in Wang, Emmerich & Bäck 2019), ``restarts=9`` for Rastrigin,
``covariance="diagonal"`` for the 100-D case.  cma: ``cma.fmin2(None, x0, sigma0, options, parallel_objective=f,
restarts=R, incpopsize=2)`` with ``options = {"seed": s + 1, "ftarget": 1e-8, "maxfevals": B,
"verbose": -9}`` and otherwise its defaults (active CMA, CSA, its termination criteria and
default population), ``R = 9`` for Rastrigin, ``"CMA_diagonal": True`` (its sep-CMA) for the
100-D case.  Both get the batch objective, evaluations are counted by a wrapper around ``f``,
a run succeeds when its best value is <= 1e-8.

Reported per function: median evaluations over successful runs, success counts, wall time of
all seeds, the ratio ours/cma of the medians, and PASS when the ratio is <= 1.0 and our
success count is no lower than cma's; the last column is a 5%-95% bootstrap interval of the
ratio over the seeds (how much of a difference is seed-to-seed noise).

Run: ``PYTHONPATH=src python benchmarks/relaxation_vs_cma.py [--seeds 11] [--only NAME] [--quick]``.
``--quick`` is a smoke test (5-D sphere, 2 seeds) that checks the bookkeeping, not the goal.
"""
from __future__ import annotations

import argparse
import time
import warnings
from typing import Callable, List, Optional

import numpy as np

from infogeo.solvers import StochasticRelaxation

TARGET = 1e-8


def sphere(X):
    return np.sum(X ** 2, axis=1)


def rosenbrock(X):
    return np.sum(100 * (X[:, 1:] - X[:, :-1] ** 2) ** 2 + (1 - X[:, :-1]) ** 2, axis=1)


def rastrigin(X):
    return 10 * X.shape[1] + np.sum(X ** 2 - 10 * np.cos(2 * np.pi * X), axis=1)


def ellipsoid(d: int, rotated: bool) -> Callable:
    scale = 10.0 ** (6 * np.arange(d) / (d - 1))
    R = np.linalg.qr(np.random.default_rng(12345 + d).standard_normal((d, d)))[0] if rotated else None

    def f(X):
        Y = X @ R.T if rotated else X
        return (Y * Y) @ scale
    f.__name__ = "rot-ellipsoid" if rotated else "sep-ellipsoid"
    return f


class Problem:
    def __init__(self, name, f, d, sigma0, budget, x0=None, restarts=0, diagonal=False):
        self.name, self.f, self.d, self.sigma0, self.budget = name, f, d, sigma0, budget
        self.x0, self.restarts, self.diagonal = x0, restarts, diagonal

    def start(self, seed: int) -> np.ndarray:
        if self.x0 is not None:
            return np.full(self.d, float(self.x0))
        return np.random.default_rng(10_000 + seed).uniform(-4, 4, self.d)


def problems(quick: bool) -> List[Problem]:
    if quick:
        return [Problem("sphere", sphere, 5, 0.5, 5_000, x0=1.0)]
    out = []
    for d in (10, 20):
        out += [Problem("sphere", sphere, d, 0.5, 200_000, x0=1.0),
                Problem("rot-ellipsoid", ellipsoid(d, True), d, 0.5, 200_000, x0=1.0),
                Problem("rosenbrock", rosenbrock, d, 0.5, 200_000, x0=0.0),
                Problem("rastrigin-ipop", rastrigin, d, 2.0, 2_000_000, restarts=9)]
    out.append(Problem("sep-ellipsoid", ellipsoid(100, False), 100, 0.5, 1_000_000, x0=1.0, diagonal=True))
    return out


class Counted:
    """Counts the points the objective is evaluated at (the same bookkeeping for both)."""

    def __init__(self, f):
        self.f, self.n, self.best = f, 0, np.inf

    def __call__(self, X):
        X = np.asarray(X, dtype=float)
        fx = self.f(X)
        self.n += len(X)
        self.best = min(self.best, float(np.min(fx)))
        return fx


def ours(p: Problem, seed: int):
    f = Counted(p.f)
    StochasticRelaxation(p.sigma0, f_target=TARGET, seed=seed, max_evals=p.budget, restarts=p.restarts,
                         covariance="diagonal" if p.diagonal else "full").minimize(f, p.start(seed))
    return f.n, f.best <= TARGET


def theirs(p: Problem, seed: int):
    import cma
    f = Counted(p.f)
    opts = {"seed": seed + 1, "ftarget": TARGET, "maxfevals": p.budget, "verbose": -9}
    if p.diagonal:
        opts["CMA_diagonal"] = True
    with warnings.catch_warnings():   # cma's sep-CMA warns about large internal scalings in 100-D
        warnings.simplefilter("ignore", UserWarning)
        cma.fmin2(None, p.start(seed), p.sigma0, opts, parallel_objective=lambda X: list(f(X)),
                  restarts=p.restarts, incpopsize=2)
    return f.n, f.best <= TARGET


def run(p: Problem, solver, n_seeds: int):
    t0 = time.perf_counter()
    out = [solver(p, s) for s in range(n_seeds)]
    wall = time.perf_counter() - t0
    evals = np.array([n for n, ok in out], dtype=float)
    ok = np.array([ok for n, ok in out])
    return evals[ok], int(ok.sum()), wall


def ratio_interval(a: np.ndarray, b: np.ndarray, n_boot: int = 2000) -> tuple:
    """5%-95% bootstrap interval of median(a) / median(b) (seed-to-seed noise of the ratio)."""
    if a.size == 0 or b.size == 0:
        return np.nan, np.nan
    rng = np.random.default_rng(0)
    ra = np.median(rng.choice(a, (n_boot, a.size)), axis=1)
    rb = np.median(rng.choice(b, (n_boot, b.size)), axis=1)
    return tuple(np.percentile(ra / rb, [5, 95]))


def main(argv: Optional[list] = None) -> list:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=11)
    ap.add_argument("--only", default=None, help="run only the functions whose name contains this")
    ap.add_argument("--quick", action="store_true", help="smoke test: 5-D sphere, 2 seeds")
    args = ap.parse_args(argv)
    n_seeds = 2 if args.quick else args.seeds
    print(f"target {TARGET:g}, {n_seeds} seeds; median evaluations over successful runs")
    header = (f"{'function':<16}{'d':>4}{'ours':>10}{'cma':>10}{'ratio':>7}{'succ ours':>10}{'succ cma':>9}"
              f"{'time ours':>10}{'time cma':>9}{'t-ratio':>8}  goal  ratio 90% interval")
    print(header)
    rows = []
    for p in problems(args.quick):
        if args.only and args.only not in p.name:
            continue
        ea, sa, ta = run(p, ours, n_seeds)
        eb, sb, tb = run(p, theirs, n_seeds)
        ma = float(np.median(ea)) if sa else np.nan
        mb = float(np.median(eb)) if sb else np.nan
        ratio = ma / mb
        lo, hi = ratio_interval(ea, eb)
        verdict = "PASS" if ratio <= 1.0 and sa >= sb else "FAIL"
        rows.append({"function": p.name, "d": p.d, "ours": ma, "cma": mb, "ratio": ratio, "succ_ours": sa,
                     "succ_cma": sb, "time_ours": ta, "time_cma": tb, "ratio_90": (lo, hi), "verdict": verdict})
        print(f"{p.name:<16}{p.d:>4}{ma:>10.0f}{mb:>10.0f}{ratio:>7.2f}{sa:>7}/{n_seeds:<2}{sb:>6}/{n_seeds:<2}"
              f"{ta:>9.1f}s{tb:>8.1f}s{ta / tb:>8.2f}  {verdict}  [{lo:.2f}, {hi:.2f}]", flush=True)
    return rows


if __name__ == "__main__":
    main()
