"""IGO search on Gaussians: the natural-gradient step, invariances, robustness, budget, restarts."""
import math

import numpy as np
import pytest

import infogeo as ig
from infogeo import backend as B
from infogeo.solvers import (IGOSearch, StochasticRelaxation, StrategyParameters, igo_minimize,
                             natural_gradient_log_likelihood, quantile_weights, rank_mu_step)
from infogeo.solvers.igo import rank_order


def sphere(X):
    return np.sum(X ** 2, axis=1)


def rotated_ellipsoid(d, cond=1e6, seed=3):
    R = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))[0]
    scale = cond ** (np.arange(d) / (d - 1))
    return lambda X: ((X @ R.T) ** 2) @ scale


def spd(rng, d):
    A = rng.standard_normal((d, d))
    return A @ A.T + np.eye(d)


# ------------------------------------------------------------ the IGO step
def test_rank_mu_step_is_the_fisher_natural_gradient_of_the_weighted_log_likelihood():
    """Closed form vs infogeo's scores + Fisher metric sharp, full family in the (mu, vech Sigma) chart."""
    rng = np.random.default_rng(0)
    G = ig.statistical.Gaussian(3)
    mu, S = rng.standard_normal(3), spd(rng, 3)
    X, w = rng.standard_normal((7, 3)) * 2, rng.standard_normal(7)
    v = natural_gradient_log_likelihood(G, G.point(mean=mu, cov=S), X, w)
    dm, dS = rank_mu_step(mu, S, X, w)
    np.testing.assert_allclose(B.to_numpy(v.components), np.concatenate([dm, dS[np.triu_indices(3)]]),
                               rtol=1e-9, atol=1e-10)


def test_rank_mu_step_in_the_mean_chart_is_t_minus_eta():
    """In the dual (mean) chart the natural gradient of log p is t(x) - eta; the standard-chart step pushes to it."""
    rng = np.random.default_rng(1)
    G = ig.statistical.Gaussian(2)
    M = G.in_chart("mean")
    mu, S = rng.standard_normal(2), spd(rng, 2)
    X, w = rng.standard_normal((5, 2)), rng.standard_normal(5)
    p = G.point(mean=mu, cov=S)
    eta = M.to_mean(M.from_chart(p, "standard"))
    expected = w @ (G.sufficient_statistics(X) - B.to_numpy(eta))
    in_mean = natural_gradient_log_likelihood(M, M.from_chart(p, "standard"), X, w)
    np.testing.assert_allclose(B.to_numpy(in_mean.components), expected, rtol=1e-8, atol=1e-9)
    dm, dS = rank_mu_step(mu, S, X, w)
    pushed = G.push_forward(ig.TangentVector(p, np.concatenate([dm, dS[np.triu_indices(2)]]), "standard"), "mean")
    np.testing.assert_allclose(B.to_numpy(pushed.components), expected, rtol=1e-8, atol=1e-9)


def test_diagonal_step_is_the_natural_gradient_on_the_diagonal_family():
    rng = np.random.default_rng(2)
    D = ig.statistical.Gaussian(4, covariance="diagonal")
    mu, var = rng.standard_normal(4), rng.uniform(0.5, 2, 4)
    X, w = rng.standard_normal((6, 4)), rng.standard_normal(6)
    v = natural_gradient_log_likelihood(D, D.point(mean=mu, var=var), X, w)
    np.testing.assert_allclose(B.to_numpy(v.components), np.concatenate(rank_mu_step(mu, var, X, w)),
                               rtol=1e-9, atol=1e-10)


def test_search_update_is_the_igo_step_plus_the_rank_one_path_term():
    """One tell of IGOSearch: mean and rank-mu part of the covariance are the library's natural gradient."""
    d = 3
    es = IGOSearch(np.array([0.3, -0.2, 1.0]), 0.7, seed=4, active=False)
    sp = es.sp
    family, p = es.distribution
    X = es.ask()
    fx = sphere(X)
    order = np.argsort(fx)
    m0, s0, C0 = es.mean.copy(), es.sigma, es.C.copy()
    es.tell(X, fx)
    ng = B.to_numpy(natural_gradient_log_likelihood(family, p, X[order], sp.weights).components)
    np.testing.assert_allclose(es.mean - m0, sp.c_m * ng[:d], rtol=1e-10, atol=1e-12)
    rank_mu = np.zeros((d, d))
    rank_mu[np.triu_indices(d)] = ng[d:]
    rank_mu = rank_mu + np.triu(rank_mu, 1).T
    # Sigma = sigma^2 C: the C-step is the Sigma-step over sigma^2, plus c1 (p_c p_c^T - C) on the first iteration
    expected = C0 + sp.c_1 * (np.outer(es.p_c, es.p_c) - C0) + sp.c_mu * rank_mu / s0 ** 2
    np.testing.assert_allclose(es.C, expected, rtol=1e-10, atol=1e-12)


def test_quantile_weights_and_published_constants():
    sp = StrategyParameters.default(10)
    assert sp.popsize == 10 and sp.mu == 5
    assert sp.mueff == pytest.approx(3.1672, abs=1e-4)          # Hansen (2016), n = 10
    assert sp.weights[:5].sum() == pytest.approx(1.0)
    assert np.all(np.diff(sp.weights) < 0) and np.all(sp.weights[5:] < 0)
    neg_mass = -sp.weights[5:].sum()
    assert neg_mass == pytest.approx(min(1 + sp.c_1 / sp.c_mu, (1 - sp.c_1 - sp.c_mu) / (10 * sp.c_mu),
                                         1 + 2 * 3.1672 / (3.1672 + 2)), rel=1e-3)
    w = quantile_weights(9)
    assert w[4] == pytest.approx(0.0) and np.all(w[:4] > 0)
    sep = StrategyParameters.default(10, diagonal=True)
    assert sep.c_1 == pytest.approx(sp.c_1 * 4) and sep.c_mu == pytest.approx(sp.c_mu * 4)


# ------------------------------------------------------------ invariances
def test_similarity_invariance_of_the_mean_sequence():
    """x' = s Q x + b: telling the transformed candidates gives m' = s Q m + b, C' = Q C Q^T, sigma' = s sigma."""
    d, s = 4, 3.0
    rng = np.random.default_rng(5)
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    b = rng.standard_normal(d)
    f = rotated_ellipsoid(d, 1e3)
    g = lambda Xp: f((Xp - b) @ Q / s)                       # noqa: E731  g(T x) = f(x)
    x0 = rng.standard_normal(d)
    e1, e2 = IGOSearch(x0, 0.5, seed=6), IGOSearch(s * Q @ x0 + b, s * 0.5, seed=7)
    for _ in range(60):
        X = e1.ask()
        Xp = s * X @ Q.T + b
        e1.tell(X, f(X))
        e2.ask()
        e2.tell(Xp, g(Xp))
        np.testing.assert_allclose(e2.mean, s * Q @ e1.mean + b, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(e2.sigma, s * e1.sigma, rtol=1e-8)
    np.testing.assert_allclose(e2.C, Q @ e1.C @ Q.T, rtol=1e-7, atol=1e-9)


def test_invariance_under_monotone_transformations_of_f():
    """Rank-based: g = h(f) with h increasing gives the same run (f-scale tolerances switched off)."""
    f = rotated_ellipsoid(5, 1e2)
    opts = dict(seed=8, max_evals=1000, tolfun=0, tolfunhist=0)
    r1 = igo_minimize(f, np.ones(5), 0.5, **opts)
    r2 = igo_minimize(lambda X: np.log(f(X)) - 7.0, np.ones(5), 0.5, **opts)
    assert r1.nfev == r2.nfev == 1000
    np.testing.assert_array_equal(r1.x, r2.x)
    np.testing.assert_array_equal(r1.mean, r2.mean)


# ------------------------------------------------------------ robustness and bookkeeping
def test_nan_and_inf_rank_last_without_crash():
    order = rank_order(np.array([3.0, np.nan, -np.inf, 1.0, np.inf, 2.0]))
    assert list(order[:3]) == [3, 5, 0] and order[3] == 4 and set(order[4:]) == {1, 2}

    def holey(X):
        fx = sphere(X - 0.3)
        fx[X[:, 0] > 0.8] = np.nan                     # undefined region
        fx[X[:, 1] < -0.5] = np.inf
        return fx
    res = StochasticRelaxation(0.5, f_target=1e-8, seed=9, max_evals=20_000).minimize(holey, np.zeros(4))
    assert res.success and res.fun <= 1e-8 and np.all(np.isfinite(res.mean))


def test_budget_is_respected_with_restarts():
    calls = []

    def f(X):
        calls.append(len(X))
        return np.sum(X ** 2 - 10 * np.cos(2 * np.pi * X), axis=1)
    res = igo_minimize(f, np.full(6, 3.0), 2.0, restarts=5, max_evals=3_000, seed=10, tolstagnation=20)
    assert res.nfev == sum(calls) <= 3_000
    assert "budget" in res.message
    for strategy in ("ipop", "bipop"):
        r = igo_minimize(sphere, np.ones(3), 1.0, restarts=3, restart_strategy=strategy, max_evals=777, seed=1)
        assert r.nfev <= 777


def test_ask_tell_equals_minimize():
    f = rotated_ellipsoid(4, 1e2)
    es = IGOSearch(np.ones(4), 0.5, seed=11, max_evals=1500, f_target=1e-8)
    while not es.stop():
        X = es.ask()
        es.tell(X, f(X))
    res = StochasticRelaxation(0.5, seed=11, max_evals=1500, f_target=1e-8).minimize(f, np.ones(4))
    assert es.result.nfev == res.nfev and es.result.fun == res.fun
    np.testing.assert_array_equal(es.result.x, res.x)
    assert es.result.message == res.message


def test_separable_variant_keeps_a_diagonal_covariance_and_learns_the_same_scaling():
    d = 6
    scale = 10.0 ** (3 * np.arange(d) / (d - 1))
    f = lambda X: (X ** 2) @ scale                          # noqa: E731  separable
    full = IGOSearch(np.ones(d), 0.5, seed=12, f_target=1e-10, max_evals=20_000).optimize(f)
    sep = IGOSearch(np.ones(d), 0.5, seed=12, f_target=1e-10, max_evals=20_000, covariance="diagonal").optimize(f)
    assert full.result.success and sep.result.success
    Csep = sep.result.cov
    np.testing.assert_array_equal(Csep, np.diag(np.diag(Csep)))
    # both learn variances ~ 1/scale: slope of log-variance against log-scale close to -1
    for C in (full.result.cov, Csep):
        slope = np.polyfit(np.log(scale), np.log(np.diag(C)), 1)[0]
        assert -1.3 < slope < -0.7
    assert sep.result.nfev < full.result.nfev            # fewer parameters to learn, larger rates


@pytest.mark.parametrize("name,f,bound", [("sphere", sphere, 1_000),
                                          ("ellipsoid", rotated_ellipsoid(5), 4_000)])
def test_convergence_in_5d_within_an_evaluation_bound(name, f, bound):
    for seed in range(3):
        res = StochasticRelaxation(0.5, f_target=1e-8, seed=seed, max_evals=50_000).minimize(f, np.ones(5))
        assert res.success and res.fun <= 1e-8 and res.nfev <= bound, (name, seed, res.nfev)


def test_ipop_restarts_grow_the_population_and_solve_rastrigin():
    f = lambda X: 10 * X.shape[1] + np.sum(X ** 2 - 10 * np.cos(2 * np.pi * X), axis=1)  # noqa: E731
    res = igo_minimize(f, np.full(3, 3.0), 2.0, restarts=6, f_target=1e-8, seed=13, max_evals=100_000)
    assert res.success and res.fun <= 1e-8
    assert res.popsizes == [int((4 + 3 * math.log(3)) * 2 ** k) for k in range(len(res.popsizes))]
    assert len(res.popsizes) > 1
    bip = igo_minimize(f, np.full(3, 3.0), 2.0, restarts=8, restart_strategy="bipop", f_target=1e-8, seed=13,
                       max_evals=100_000)
    assert bip.success and {r["regime"] for r in bip.runs} <= {"large", "small"}


def test_bad_input_is_rejected_clearly():
    with pytest.raises(ValueError, match="sigma0"):
        IGOSearch(np.zeros(2), 0.0)
    with pytest.raises(ValueError, match="covariance"):
        IGOSearch(np.zeros(2), 1.0, covariance="banded")
    es = IGOSearch(np.zeros(2), 1.0, seed=0)
    X = es.ask()
    with pytest.raises(ValueError, match="objective values"):
        es.tell(X, np.zeros(3))
    with pytest.raises(ValueError, match="shape"):
        es.tell(X[:2], np.zeros(2))
    with pytest.raises(ValueError, match="restart_strategy"):
        igo_minimize(sphere, np.zeros(2), 1.0, restart_strategy="lipop")
    with pytest.raises(ValueError, match="batch"):
        IGOSearch(np.zeros(2), 1.0).optimize(lambda X: 0.0)
    assert math.isinf(es.best_f)
