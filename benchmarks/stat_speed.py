"""Speed of the statistical layer against a plain numpy formula and against geomstats, in one process.

Every section is one function ``section_<name>(quick) -> list[Row]`` listed in
:data:`SECTIONS`; a row carries the operation, infogeo's median time, the
reference's median time, their ratio, the largest error against the reference
values and PASS/FAIL against the section's target.  Run::

    PYTHONPATH=src python benchmarks/stat_speed.py [--quick] [--only SECTION ...]

Sections
--------
batched_distances
    Closed-form Fisher–Rao distances on 10⁴ pairs (univariate, diagonal,
    categorical, Bernoulli, Poisson, exponential, multinomial): ratio to the
    two-line numpy formula on the same coordinates (target ≤ 2×) and to
    geomstats' batched ``metric.dist``.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Callable, List, Optional

import numpy as np

import infogeo as ig

N_PAIRS = 10_000


@dataclass
class Row:
    """One measured operation: infogeo against one reference on the same input."""

    section: str
    operation: str
    ours_s: float                 # median seconds per call, infogeo
    ref_s: float                  # median seconds per call, reference
    reference: str                # "numpy" or "geomstats"
    error: float                  # max abs difference of the results (ours vs reference)
    target: Optional[float]       # ratio target (None: reported, no PASS/FAIL)

    @property
    def ratio(self) -> float:
        return self.ours_s / self.ref_s

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "-"
        return "PASS" if self.ratio <= self.target else "FAIL"


def median_time(f: Callable[[], object], repeat: int = 7, number: int = 1) -> float:
    """Median over ``repeat`` runs of the time per call of ``f`` (``number`` calls per run), after a warm-up."""
    f()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            f()
        times.append((time.perf_counter() - t0) / number)
    return float(np.median(times))


def max_err(a, b) -> float:
    return float(np.max(np.abs(np.asarray(ig.backend.to_numpy(a), float) - np.asarray(b, float))))


def _gs(module: str):
    """geomstats' information-geometry module, or None when geomstats is absent."""
    try:
        import importlib
        import os
        os.environ.setdefault("GEOMSTATS_BACKEND", "numpy")
        return importlib.import_module(f"geomstats.information_geometry.{module}")
    except ImportError:
        return None


# ------------------------------------------------------------ batched distances
def _univariate(rng, n):
    mu, var = rng.normal(size=(2, n)), rng.uniform(0.2, 3.0, size=(2, n))
    P, Q = np.stack([mu[0], var[0]], -1), np.stack([mu[1], var[1]], -1)

    def formula():
        s1, s2 = np.sqrt(var[0]), np.sqrt(var[1])
        return np.sqrt(2) * np.arccosh(1 + ((mu[0] - mu[1]) ** 2 / 2 + (s1 - s2) ** 2) / (2 * s1 * s2))

    gs = _gs("normal")
    gsf = None
    if gs is not None:
        space = gs.UnivariateNormalDistributions()
        a, b = np.stack([mu[0], np.sqrt(var[0])], -1), np.stack([mu[1], np.sqrt(var[1])], -1)
        gsf = lambda: space.metric.dist(a, b)  # noqa: E731
    return ig.Gaussian(dim=1), P, Q, formula, gsf


def _diagonal(rng, n, d=3):
    mu, var = rng.normal(size=(2, n, d)), rng.uniform(0.2, 3.0, size=(2, n, d))
    P, Q = np.concatenate([mu[0], var[0]], -1), np.concatenate([mu[1], var[1]], -1)

    def formula():
        s1, s2 = np.sqrt(var[0]), np.sqrt(var[1])
        a = np.arccosh(1 + ((mu[0] - mu[1]) ** 2 / 2 + (s1 - s2) ** 2) / (2 * s1 * s2))
        return np.sqrt(2 * np.sum(a * a, -1))

    gs = _gs("normal")
    gsf = None
    if gs is not None:
        space = gs.DiagonalNormalDistributions(d)
        a, b = np.concatenate([mu[0], var[0]], -1), np.concatenate([mu[1], var[1]], -1)
        gsf = lambda: space.metric.dist(a, b)  # noqa: E731
    return ig.Gaussian(dim=d, covariance="diagonal"), P, Q, formula, gsf


def _categorical(rng, n, k=10):
    p, q = rng.dirichlet(np.ones(k), size=n), rng.dirichlet(np.ones(k), size=n)

    def formula():
        return 2 * np.arccos(np.clip(np.sum(np.sqrt(p * q), -1), -1, 1))

    gs = _gs("categorical")
    gsf = None
    if gs is not None:
        space = gs.CategoricalDistributions(k - 1)
        gsf = lambda: space.metric.dist(p, q)  # noqa: E731
    return ig.Categorical(k), p[:, :-1], q[:, :-1], formula, gsf


def _bernoulli(rng, n):
    p, q = rng.uniform(0.02, 0.98, size=(2, n))

    def formula():
        return 2 * np.arccos(np.clip(np.sqrt(p * q) + np.sqrt((1 - p) * (1 - q)), -1, 1))

    return ig.Bernoulli(), p[:, None], q[:, None], formula, None


def _poisson(rng, n):
    a, b = rng.uniform(0.2, 8.0, size=(2, n))

    def formula():
        return 2 * np.abs(np.sqrt(a) - np.sqrt(b))

    gs = _gs("poisson")
    gsf = None
    if gs is not None:
        space = gs.PoissonDistributions()
        gsf = lambda: space.metric.dist(a[:, None], b[:, None])  # noqa: E731
    return ig.load_manifold("poisson"), a[:, None], b[:, None], formula, gsf


def _exponential(rng, n):
    a, b = rng.uniform(0.2, 8.0, size=(2, n))

    def formula():
        return np.abs(np.log(a / b))

    gs = _gs("exponential")
    gsf = None
    if gs is not None:
        space = gs.ExponentialDistributions()
        gsf = lambda: space.metric.dist(a[:, None], b[:, None])  # noqa: E731
    return ig.load_manifold("exponential"), a[:, None], b[:, None], formula, gsf


def _multinomial(rng, n, k=4, draws=10):
    p, q = rng.dirichlet(np.ones(k), size=n), rng.dirichlet(np.ones(k), size=n)

    def formula():
        return 2 * np.sqrt(draws) * np.arccos(np.clip(np.sum(np.sqrt(p * q), -1), -1, 1))

    return ig.load_manifold("multinomial", k=k, n=draws), p[:, :-1], q[:, :-1], formula, None


def section_batched_distances(quick: bool = False) -> List[Row]:
    """Closed-form distances on N_PAIRS pairs: ours / numpy formula (target 2) and ours / geomstats."""
    rng = np.random.default_rng(0)
    n = N_PAIRS
    rows: List[Row] = []
    for name, make in (("univariate", _univariate), ("diagonal(3)", _diagonal), ("categorical(10)", _categorical),
                       ("bernoulli", _bernoulli), ("poisson", _poisson), ("exponential", _exponential),
                       ("multinomial(4, 10)", _multinomial)):
        M, P, Q, formula, gsf = make(rng, n)
        ref = formula()
        ours = lambda: M.dist(P, Q)  # noqa: E731
        try:
            t_ours, err = median_time(ours), max_err(ours(), ref)
        except Exception as exc:  # a failure is a result of the benchmark, reported as FAIL
            print(f"  {name}: infogeo failed: {type(exc).__name__}: {exc}")
            t_ours, err = float("inf"), float("nan")
        rows.append(Row("batched_distances", f"dist {name}", t_ours, median_time(formula), "numpy", err, 2.0))
        if gsf is not None:
            rows.append(Row("batched_distances", f"dist {name}", t_ours, median_time(gsf, repeat=3), "geomstats",
                            max_err(ours(), gsf()) if np.isfinite(t_ours) else float("nan"), None))
    return rows


#: every section, in print order: (name, function)
SECTIONS: List[tuple] = [
    ("batched_distances", section_batched_distances),
]


def print_rows(rows: List[Row]) -> None:
    print(f"{'section':<20}{'operation':<28}{'reference':<11}{'ours':>11}{'reference':>11}{'ratio':>9}"
          f"{'max err':>10}{'target':>8}  verdict")
    for r in rows:
        target = "-" if r.target is None else f"<={r.target:g}"
        print(f"{r.section:<20}{r.operation:<28}{r.reference:<11}{r.ours_s * 1e3:>9.3f}ms{r.ref_s * 1e3:>9.3f}ms"
              f"{r.ratio:>9.2f}{r.error:>10.1e}{target:>8}  {r.verdict}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and smaller problems")
    ap.add_argument("--only", nargs="*", default=None, help="section names to run")
    args = ap.parse_args(argv)
    rows: List[Row] = []
    for name, fn in SECTIONS:
        if args.only and name not in args.only:
            continue
        rows.extend(fn(args.quick))
    print_rows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
