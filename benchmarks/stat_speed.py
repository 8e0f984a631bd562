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
generic_log
    ``log`` on the Poincaré half-plane with the metric given only as a function
    (``MatrixMetric``): ratio to one ``scipy.integrate.solve_ivp`` of the same
    geodesic with closed-form Christoffel symbols at the same tolerance (target ≤ 20×).
beta_dirichlet_geodesics
    Beta and Dirichlet(3) ``exp`` and ``dist``: ratio to geomstats with its solvers
    tightened (target ≤ 0.5×); errors against a closed-form-Christoffel reference
    (``solve_ivp`` for exp, ``solve_bvp`` for dist) must stay below 1e-9.
full_gaussian
    Full-Gaussian ``dist`` at d = 2, 5, 10 (median over random pairs) against a
    50 ms budget (target at d = 10); error: end point of ``log`` integrated by an
    independent moving-frame ODE.
batched_gaussians
    Zero-mean ``dist`` and full-Gaussian ``kl`` (d = 3) on 10³ pairs against
    batched numpy formulas, and the full-Gaussian ``exp`` and ``dist_bounds`` of a
    batch against the loop of single calls (reported, no target).
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import numpy as np

import infogeo as ig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import median_time, median_times  # noqa: E402

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


def _gs_dist(module: str, space: str, a, b, *args):
    """geomstats' batched ``metric.dist(a, b)`` on ``module.space(*args)`` as a thunk, or None without geomstats."""
    gs = _gs(module)
    if gs is None:
        return None
    metric = getattr(gs, space)(*args).metric
    return lambda: metric.dist(a, b)


# ------------------------------------------------------------ batched distances
def _univariate(rng, n):
    mu, var = rng.normal(size=(2, n)), rng.uniform(0.2, 3.0, size=(2, n))
    P, Q = np.stack([mu[0], var[0]], -1), np.stack([mu[1], var[1]], -1)

    def formula():
        s1, s2 = np.sqrt(var[0]), np.sqrt(var[1])
        return np.sqrt(2) * np.arccosh(1 + ((mu[0] - mu[1]) ** 2 / 2 + (s1 - s2) ** 2) / (2 * s1 * s2))

    a, b = np.stack([mu[0], np.sqrt(var[0])], -1), np.stack([mu[1], np.sqrt(var[1])], -1)   # (mean, std)
    gsf = _gs_dist("normal", "UnivariateNormalDistributions", a, b)
    return ig.Gaussian(dim=1), P, Q, formula, gsf


def _diagonal(rng, n, d=3):
    mu, var = rng.normal(size=(2, n, d)), rng.uniform(0.2, 3.0, size=(2, n, d))
    P, Q = np.concatenate([mu[0], var[0]], -1), np.concatenate([mu[1], var[1]], -1)

    def formula():
        s1, s2 = np.sqrt(var[0]), np.sqrt(var[1])
        a = np.arccosh(1 + ((mu[0] - mu[1]) ** 2 / 2 + (s1 - s2) ** 2) / (2 * s1 * s2))
        return np.sqrt(2 * np.sum(a * a, -1))

    gsf = _gs_dist("normal", "DiagonalNormalDistributions", P, Q, d)
    return ig.Gaussian(dim=d, covariance="diagonal"), P, Q, formula, gsf


def _categorical(rng, n, k=10):
    p, q = rng.dirichlet(np.ones(k), size=n), rng.dirichlet(np.ones(k), size=n)

    def formula():
        return 2 * np.arccos(np.clip(np.sum(np.sqrt(p * q), -1), -1, 1))

    gsf = _gs_dist("categorical", "CategoricalDistributions", p, q, k - 1)
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

    gsf = _gs_dist("poisson", "PoissonDistributions", a[:, None], b[:, None])
    return ig.load_manifold("poisson"), a[:, None], b[:, None], formula, gsf


def _exponential(rng, n):
    a, b = rng.uniform(0.2, 8.0, size=(2, n))

    def formula():
        return np.abs(np.log(a / b))

    gsf = _gs_dist("exponential", "ExponentialDistributions", a[:, None], b[:, None])
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
        try:   # calls of tens of microseconds: interleaved rounds of 20 calls, 31 rounds
            (t_ours, t_ref), err = median_times(ours, formula, repeat=31, number=20), max_err(ours(), ref)
        except Exception as exc:  # a failure is a result of the benchmark, reported as FAIL
            print(f"  {name}: infogeo failed: {type(exc).__name__}: {exc}")
            t_ours, t_ref, err = float("inf"), median_time(formula), float("nan")
        rows.append(Row("batched_distances", f"dist {name}", t_ours, t_ref, "numpy", err, 2.0))
        if gsf is not None:
            rows.append(Row("batched_distances", f"dist {name}", t_ours, median_time(gsf, repeat=3), "geomstats",
                            max_err(ours(), gsf()) if np.isfinite(t_ours) else float("nan"), None))
    return rows


# ------------------------------------------------------------ geodesics
def _halfplane_closed_rhs(_t, s):
    x, y, u, v = s
    return [u, v, 2 * u * v / y, (v * v - u * u) / y]


def section_generic_log(quick: bool = False) -> List[Row]:
    """Half-plane log through MatrixMetric vs one closed-form-RHS solve_ivp (target 20)."""
    from scipy.integrate import solve_ivp

    from infogeo.geometry import geodesics
    B = ig.backend
    metric = ig.MatrixMetric(lambda x: B.stack([B.stack([1 / x[1] ** 2, 0 * x[0]]),
                                                B.stack([0 * x[0], 1 / x[1] ** 2])]), dim=2)
    x, y = np.array([0.3, 1.0]), np.array([1.5, 0.4])
    exact = np.arccosh(1 + ((x - y) @ (x - y)) / (2 * x[1] * y[1]))
    v = geodesics.log(metric, x, y)
    err = abs(float(np.sqrt(v @ metric.matrix(x) @ v)) - exact)
    t_ours = median_time(lambda: geodesics.log(metric, x, y), repeat=1 if quick else 3)
    ref = lambda: solve_ivp(_halfplane_closed_rhs, (0, 1), np.r_[x, v], method="DOP853",  # noqa: E731
                            rtol=geodesics.RTOL, atol=geodesics.ATOL)
    return [Row("generic_log", "half-plane log (MatrixMetric)", t_ours, median_time(ref), "solve_ivp", err, 20.0)]


def _dirichlet_type_reference(x, v=None, y=None):
    r"""Closed-form geodesics of :math:`\psi = \sum\log\Gamma(a_i) - \log\Gamma(\sum a_i)` (Beta = k 2):
    :math:`\Gamma_{ij,k} = \tfrac12\partial^3\psi`; exp by solve_ivp, dist by solve_bvp."""
    from scipy.integrate import solve_bvp, solve_ivp
    from scipy.special import polygamma
    k = len(x)

    def acc(a, w):                       # a, w: (n, k)
        Tww = polygamma(2, a) * w ** 2 - polygamma(2, a.sum(1))[:, None] * w.sum(1, keepdims=True) ** 2
        G = polygamma(1, a)[:, :, None] * np.eye(k) - polygamma(1, a.sum(1))[:, None, None]
        return -np.linalg.solve(G, 0.5 * Tww[:, :, None])[:, :, 0]

    def rhs(_t, Y):
        Y2 = Y.reshape(2 * k, -1)
        return np.vstack([Y2[k:], acc(Y2[:k].T, Y2[k:].T).T]).reshape(Y.shape)

    if y is None:
        sol = solve_ivp(rhs, (0, 1), np.r_[x, v], method="DOP853", rtol=1e-13, atol=1e-13)
        return sol.y[:k, -1]
    t = np.linspace(0, 1, 41)
    Y0 = np.vstack([x[:, None] + (y - x)[:, None] * t, np.repeat((y - x)[:, None], len(t), axis=1)])
    sol = solve_bvp(rhs, lambda ya, yb: np.r_[ya[:k] - x, yb[:k] - y], t, Y0, tol=1e-11, max_nodes=100000)
    w = sol.y[k:, 0]
    G = polygamma(1, x) * np.eye(k) - polygamma(1, x.sum())
    return float(np.sqrt(w @ G @ w))


def section_beta_dirichlet_geodesics(quick: bool = False) -> List[Row]:
    """Beta and Dirichlet(3) exp and dist vs geomstats (tightened solvers), target 0.5."""
    from infogeo.interop import geomstats as igs
    rows: List[Row] = []
    cases = [("beta", {}, np.array([1.0, 2.0]), np.array([2.0, 1.5]), np.array([0.5, -0.3])),
             ("dirichlet", {"k": 3}, np.array([1.0, 2.0, 1.5]), np.array([2.0, 1.0, 3.0]), np.array([0.5, -0.3, 0.4]))]
    for name, kw, x, y, v in cases:
        M = ig.load_manifold(name, **kw)
        label = "Dirichlet(3)" if name == "dirichlet" else "Beta"
        try:
            space = igs.geomstats_space(M)
        except Exception as exc:  # geomstats missing: reported, no ratio
            print(f"  {label}: geomstats unavailable ({type(exc).__name__})")
            continue
        ref_exp, ref_dist = _dirichlet_type_reference(x, v=v), _dirichlet_type_reference(x, y=y)
        ours_exp = lambda: M.exp(x, M.vector(x, v))  # noqa: E731
        ours_dist = lambda: M.dist(x, y)  # noqa: E731
        gs_exp = lambda: space.metric.exp(v, x)  # noqa: E731
        gs_dist = lambda: space.metric.dist(x, y)  # noqa: E731
        r = 1 if quick else 3
        for op, ours, gs, ref in (("exp", ours_exp, gs_exp, ref_exp), ("dist", ours_dist, gs_dist, ref_dist)):
            err_ours, err_gs = max_err(ours(), ref), max_err(gs(), ref)
            print(f"  {label} {op}: error ours {err_ours:.1e}, geomstats {err_gs:.1e} (reference: closed-form "
                  f"Christoffel {'solve_ivp' if op == 'exp' else 'solve_bvp'})")
            rows.append(Row("beta_dirichlet", f"{label} {op}", median_time(ours, repeat=r), median_time(gs, repeat=r),
                            "geomstats", err_ours, 0.5))
    return rows


def _frame_ode_end(dmu, dS, d):
    r"""End point from (0, I) of the full-Gaussian geodesic with velocity (dmu, dS) by the moving-frame ODE
    :math:`x' = Bx/2`, :math:`B' = -xx^T`, :math:`L' = LB/2`, :math:`\mu' = Lx` (independent of Eriksen's form)."""
    from scipy.integrate import solve_ivp

    def rhs(_t, s):
        L, x, Bm = s[d:d + d * d].reshape(d, d), s[d + d * d:2 * d + d * d], s[2 * d + d * d:].reshape(d, d)
        return np.concatenate([L @ x, (0.5 * L @ Bm).ravel(), 0.5 * Bm @ x, (-np.outer(x, x)).ravel()])

    sol = solve_ivp(rhs, (0, 1), np.concatenate([np.zeros(d), np.eye(d).ravel(), dmu, dS.ravel()]),
                    method="DOP853", rtol=1e-13, atol=1e-13)
    L = sol.y[d:d + d * d, -1].reshape(d, d)
    return sol.y[:d, -1], L @ L.T


def section_full_gaussian(quick: bool = False) -> List[Row]:
    """Full-Gaussian dist at d = 2, 5, 10 against a 50 ms budget (target at d = 10)."""
    from infogeo.statistical import gaussian_geodesics as gg
    rng = np.random.default_rng(3)
    rows: List[Row] = []
    for d in (2, 5, 10):
        times, errs = [], []
        for _ in range(3 if quick else 9):
            A = rng.standard_normal((d, d))
            mu1, S1 = rng.standard_normal(d), A @ A.T + 0.3 * np.eye(d)
            t0 = time.perf_counter()
            gg.dist(np.zeros(d), np.eye(d), mu1, S1)
            times.append(time.perf_counter() - t0)
            dmu, dS = gg.log(np.zeros(d), np.eye(d), mu1, S1)
            mu_end, S_end = _frame_ode_end(dmu, dS, d)
            errs.append(max(np.max(np.abs(mu_end - mu1)), np.max(np.abs(S_end - S1)) / np.max(np.abs(S1))))
        rows.append(Row("full_gaussian", f"dist d={d}", float(np.median(times)), 0.050, "50 ms", float(max(errs)),
                        1.0 if d == 10 else None))
    return rows


def section_batched_gaussians(quick: bool = False) -> List[Row]:
    """Zero-mean dist, full kl (d = 3) on 10³ pairs vs numpy; full exp, dist_bounds batch vs loop (reported)."""
    rng = np.random.default_rng(4)
    n, d, iu = 1000, 3, np.triu_indices(3)
    S, T = (A @ np.swapaxes(A, -1, -2) + 0.5 * np.eye(d) for A in rng.standard_normal((2, n, d, d)))
    mu, nu = rng.standard_normal((2, n, d))
    Z, G = ig.Gaussian(dim=d, covariance="zero_mean"), ig.Gaussian(dim=d)
    P, Q = S[:, iu[0], iu[1]], T[:, iu[0], iu[1]]
    Pf, Qf = np.concatenate([mu, P], -1), np.concatenate([nu, Q], -1)

    def zero_mean_dist():   # sqrt(1/2 sum log^2 eig(S^-1 T)): eigenvalues of the whitened L^-1 T L^-T
        Li = np.linalg.inv(np.linalg.cholesky(S))
        return np.sqrt(0.5 * np.sum(np.log(np.linalg.eigvalsh(Li @ T @ np.swapaxes(Li, -1, -2))) ** 2, -1))

    def full_kl():
        X = np.linalg.solve(T, np.concatenate([S, (nu - mu)[..., None]], -1))
        return 0.5 * (np.trace(X[..., :-1], axis1=-2, axis2=-1) + np.sum((nu - mu) * X[..., -1], -1) - d
                      + np.linalg.slogdet(T)[1] - np.linalg.slogdet(S)[1])
    rows = [Row("batched_gaussians", f"{op} d={d}", median_time(ours), median_time(ref), "numpy",
                max_err(ours(), ref()), None)
            for op, ours, ref in (("zero_mean dist", lambda: Z.dist(P, Q), zero_mean_dist),
                                  ("full kl", lambda: G.kl(Pf, Qf), full_kl))]
    V, few = 0.3 * rng.standard_normal(Pf.shape), 100 if quick else n
    for op, batch, one in (("exp", lambda: G.exp(Pf[:few], G.vector(Pf[:few], V[:few])),
                            lambda i: G.exp(Pf[i], G.vector(Pf[i], V[i]))),
                           ("dist_bounds", lambda: np.stack(G.dist_bounds(Pf[:few], Qf[:few]), -1),
                            lambda i: np.array(G.dist_bounds(Pf[i], Qf[i])))):
        loop = lambda: np.stack([one(i) for i in range(few)])  # noqa: E731,B023  (called within this iteration)
        rows.append(Row("batched_gaussians", f"full {op} d={d} (x{few})", median_time(batch, repeat=3),
                        median_time(loop, repeat=3), "loop", max_err(batch(), loop()), None))
    return rows


#: every section, in print order: (name, function)
SECTIONS: List[tuple] = [
    ("batched_distances", section_batched_distances),
    ("generic_log", section_generic_log),
    ("beta_dirichlet_geodesics", section_beta_dirichlet_geodesics),
    ("full_gaussian", section_full_gaussian),
    ("batched_gaussians", section_batched_gaussians),
]


def print_rows(rows: List[Row]) -> None:
    print(f"{'section':<20}{'operation':<30}{'reference':<11}{'ours':>11}{'reference':>11}{'ratio':>9}"
          f"{'max err':>10}{'target':>8}  verdict")
    for r in rows:
        target = "-" if r.target is None else f"<={r.target:g}"
        print(f"{r.section:<20}{r.operation:<30}{r.reference:<11}{r.ours_s * 1e3:>9.3f}ms{r.ref_s * 1e3:>9.3f}ms"
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
