"""Evaluations to f <= 1e-8: IGO search in a Gaussian graphical sub-model vs full and diagonal covariance.

The search distribution of ``StochasticRelaxation`` is a full Gaussian (CMA-ES), a diagonal one
(sep-CMA), or a Gaussian with a fixed precision pattern (``precision_pattern=``: zeros in the precision,
the IGO step of that exponential family, i.e. the full update followed by covariance selection).  When
the function's Hessian has the pattern, the ideal search covariance (the inverse Hessian) lies in the
sub-model, which has O(d) covariance parameters instead of d(d+1)/2.

Functions (minimum 0 at 0), x0 = 1, sigma0 = 0.5:

* ``chain``: f = 100 x^T A x with A tridiagonal, A_ii = 2, A_i,i+1 = -0.99 (a strongly coupled chain,
  condition about 10^3); pattern: tridiagonal;
* ``blocks``: f = sum_b (R_b x_b)^T diag(1, 10, 100, 1000) (R_b x_b) over blocks of 4 coordinates,
  R_b fixed random rotations; pattern: block diagonal;
* ``rosen-chain``: the chained Rosenbrock function (x0 = 0), Hessian tridiagonal; pattern: tridiagonal.

Each at d = 10 and d = 20 (``--dims``), 7 seeds (``--seeds``), budget 2e5 evaluations.  Reported: median
evaluations over successful runs, successes, CPU seconds of all seeds, and the ratio of the patterned
median to the best of full and diagonal; PASS when that ratio is <= 1 and the patterned search
succeeds at least as often as the best of them.

Run: ``PYTHONPATH=src python benchmarks/submodel_search.py [--seeds 7] [--dims 10 20] [--quick]``.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from infogeo.solvers import StochasticRelaxation

TARGET = 1e-8
BUDGET = 200_000


def tridiagonal(d: int) -> np.ndarray:
    i = np.arange(d)
    return np.abs(i[:, None] - i[None, :]) <= 1


def block_pattern(d: int, size: int = 4) -> np.ndarray:
    b = np.arange(d) // size
    return b[:, None] == b[None, :]


def chain(d: int):
    A = 100 * (2 * np.eye(d) - 0.99 * (tridiagonal(d) & ~np.eye(d, dtype=bool)))
    return lambda X: np.einsum("ni,ij,nj->n", X, A, X)


def blocks(d: int, size: int = 4):
    rng = np.random.default_rng(777 + d)
    H = np.zeros((d, d))
    scale = 10.0 ** np.arange(size)
    for start in range(0, d, size):
        k = min(size, d - start)
        R = np.linalg.qr(rng.standard_normal((k, k)))[0]
        H[start:start + k, start:start + k] = R.T @ np.diag(scale[:k]) @ R
    return lambda X: np.einsum("ni,ij,nj->n", X, H, X)


def rosen_chain(d: int):
    return lambda X: np.sum(100 * (X[:, 1:] - X[:, :-1] ** 2) ** 2 + (1 - X[:, :-1]) ** 2, axis=1)


PROBLEMS = {"chain": (chain, tridiagonal, 1.0), "blocks": (blocks, block_pattern, 1.0),
            "rosen-chain": (rosen_chain, tridiagonal, 0.0)}


def run(fn, d, x0, seed, variant, pattern):
    count = {"n": 0}

    def f(X):
        count["n"] += len(X)
        return fn(X)
    kw = {"covariance": "diagonal"} if variant == "diagonal" else (
        {"precision_pattern": pattern} if variant == "pattern" else {})
    t = time.process_time()
    r = StochasticRelaxation(0.5, seed=seed, f_target=TARGET, max_evals=BUDGET, **kw).minimize(f, np.full(d, x0))
    return r.fun <= TARGET, count["n"], time.process_time() - t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=7)
    ap.add_argument("--dims", type=int, nargs="+", default=[10, 20])
    ap.add_argument("--only", default=None)
    ap.add_argument("--quick", action="store_true", help="smoke test: d = 6, 2 seeds, chain only")
    args = ap.parse_args(argv)
    seeds, dims, names = args.seeds, args.dims, [args.only] if args.only else list(PROBLEMS)
    if args.quick:
        seeds, dims, names = 2, [6], ["chain"]
    variants = ["full", "diagonal", "pattern"]
    print(f"{'function':12s} {'d':>3s} | " + " | ".join(f"{v:>8s} med (ok, cpu s)" for v in variants)
          + " | pattern / best  verdict")
    rows = []
    for name in names:
        make, make_pattern, x0 = PROBLEMS[name]
        for d in dims:
            fn, pattern = make(d), make_pattern(d)
            res = {v: [] for v in variants}
            for s in range(seeds):          # interleaved: every variant on each seed in turn
                for v in variants:
                    res[v].append(run(fn, d, x0, s, v, pattern))
            summary = {}
            for v in variants:
                ok = [n for good, n, _ in res[v] if good]
                summary[v] = (float(np.median(ok)) if ok else np.inf, len(ok), sum(c for *_, c in res[v]))
            best = min((summary[v] for v in ("full", "diagonal")), key=lambda t: (-t[1], t[0]))
            ratio = summary["pattern"][0] / best[0] if np.isfinite(best[0]) else 0.0
            verdict = "PASS" if ratio <= 1.0 and summary["pattern"][1] >= best[1] else "FAIL"
            rows.append((name, d, summary, ratio, verdict))
            cells = " | ".join(f"{summary[v][0]:>8.0f} ({summary[v][1]}/{seeds}, {summary[v][2]:6.1f})"
                               for v in variants)
            print(f"{name:12s} {d:>3d} | {cells} | {ratio:8.2f}  {verdict}", flush=True)
    return rows


if __name__ == "__main__":
    main()
