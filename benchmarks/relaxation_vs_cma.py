"""Function evaluations to reach f <= 1e-8: infogeo's StochasticRelaxation vs the ``cma`` package.

Same functions (10-D sphere from x0 = 1, 10-D Rosenbrock from x0 = 0), same initial
step size and the same seeds; prints the median evaluations of each and the
ratio ours / cma.  Run: ``python benchmarks/relaxation_vs_cma.py [n_seeds]``.
"""
import sys
import time

import numpy as np

from infogeo.solvers import StochasticRelaxation

TARGET, SIGMA0, BUDGET = 1e-8, 0.5, 200_000


def sphere(X):
    return np.sum(np.atleast_2d(X) ** 2, axis=1)


def rosenbrock(X):
    X = np.atleast_2d(X)
    return np.sum(100 * (X[:, 1:] - X[:, :-1] ** 2) ** 2 + (1 - X[:, :-1]) ** 2, axis=1)


def ours(f, x0, seed):
    r = StochasticRelaxation(sigma0=SIGMA0, f_target=TARGET, seed=seed, max_evals=BUDGET).minimize(f, x0)
    return r.nfev if r.fun <= TARGET else np.nan


def theirs(f, x0, seed):
    import cma
    es = cma.CMAEvolutionStrategy(x0, SIGMA0, {"seed": seed + 1, "ftarget": TARGET, "maxfevals": BUDGET,
                                               "verbose": -9, "tolfun": 0, "tolx": 0, "tolfunhist": 0})
    es.optimize(lambda x: float(f(np.asarray(x))[0]))
    return es.result.evaluations if es.result.fbest <= TARGET else np.nan


def main(n_seeds: int = 5) -> None:
    print(f"{'function':<12}{'ours (median)':>15}{'cma (median)':>15}{'ratio':>8}{'time ours/cma':>16}")
    for f, x0 in ((sphere, np.ones(10)), (rosenbrock, np.zeros(10))):
        t0 = time.perf_counter()
        a = [ours(f, x0, s) for s in range(n_seeds)]
        t1 = time.perf_counter()
        b = [theirs(f, x0, s) for s in range(n_seeds)]
        t2 = time.perf_counter()
        ma, mb = np.nanmedian(a), np.nanmedian(b)
        print(f"{f.__name__:<12}{ma:>15.0f}{mb:>15.0f}{ma / mb:>8.2f}{(t1 - t0) / (t2 - t1):>16.2f}"
              f"   failures: {int(np.isnan(a).sum())}/{int(np.isnan(b).sum())}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
