"""Full-Gaussian geodesics: long exp against an ODE, far-apart shooting, certified bounds, budgets."""
import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import infogeo as ig
from infogeo.budget import Budget, BudgetExceededError
from infogeo.statistical import gaussian_geodesics as gg


def frame_ode_exp(mu0, S0, dmu, dS):
    r"""Geodesic end point by integrating the geodesic equations in a moving frame.

    With :math:`\Sigma = LL^T`, :math:`\mu' = Lx`, :math:`\Sigma' = LBL^T` and :math:`L' = \tfrac12 LB`,
    :math:`\mu'' = \Sigma'\Sigma^{-1}\mu'` and :math:`\Sigma'' = \Sigma'\Sigma^{-1}\Sigma' - \mu'\mu'^T`
    become :math:`x' = \tfrac12 Bx`, :math:`B' = -xx^T`: a bounded system, so the integration keeps
    its relative accuracy however far the geodesic goes (independent of Eriksen's closed form).
    """
    d = len(mu0)
    L = np.linalg.cholesky(S0)
    x = np.linalg.solve(L, dmu)
    Bm = np.linalg.solve(L, np.linalg.solve(L, dS).T).T

    def rhs(_t, y):
        L, x, Bm = y[d:d + d * d].reshape(d, d), y[d + d * d:2 * d + d * d], y[2 * d + d * d:].reshape(d, d)
        return np.concatenate([L @ x, (0.5 * L @ Bm).ravel(), 0.5 * Bm @ x, (-np.outer(x, x)).ravel()])

    y0 = np.concatenate([mu0, L.ravel(), x, Bm.ravel()])
    sol = solve_ivp(rhs, (0, 1), y0, method="DOP853", rtol=1e-13, atol=1e-13)
    mu, L = sol.y[:d, -1], sol.y[d:d + d * d, -1].reshape(d, d)
    return mu, L


def frame_error(mu, S, mu_ref, L_ref, mu0, S0):
    """Relative Mahalanobis mean error (start frame) and relative (Frobenius) covariance error.

    Coordinates of a far end point carry its small scales only to the absolute accuracy of its
    large ones, so both errors are relative to the size of the displacement.
    """
    L0 = np.linalg.cholesky(S0)
    e_mu = np.linalg.norm(np.linalg.solve(L0, mu - mu_ref)) / (1 + np.linalg.norm(np.linalg.solve(L0, mu_ref - mu0)))
    S_ref = L_ref @ L_ref.T
    return e_mu, float(np.linalg.norm(S - S_ref) / np.linalg.norm(S_ref))


def random_pair(rng, d, scale=1.0):
    A1, A2 = rng.standard_normal((2, d, d))
    S1, S2 = A1 @ A1.T + 0.3 * np.eye(d), A2 @ A2.T + 0.3 * np.eye(d)
    return scale * rng.standard_normal(d), S1, scale * rng.standard_normal(d), S2


def unit_velocity(rng, d, norm):
    """A random velocity at (0, I) of Fisher–Rao length ``norm``."""
    x, Bm = rng.standard_normal(d), rng.standard_normal((d, d))
    Bm = Bm + Bm.T
    return x * norm / gg._speed(x, Bm), Bm * norm / gg._speed(x, Bm)


@pytest.mark.parametrize("d", [2, 5])
@pytest.mark.parametrize("norm", [1.0, 15.0, 25.0, 30.0, 50.0])
def test_exp_of_long_vectors_matches_the_geodesic_ode(d, norm):
    rng = np.random.default_rng(d * 100 + int(norm))
    mu0, S0, _, _ = random_pair(rng, d)
    x, Bm = unit_velocity(rng, d, norm)
    L0 = np.linalg.cholesky(S0)
    dmu, dS = L0 @ x, L0 @ Bm @ L0.T
    mu, S = gg.exp(mu0, S0, dmu, dS)
    mu_ref, L_ref = frame_ode_exp(mu0, S0, dmu, dS)
    e_mu, e_S = frame_error(mu, S, mu_ref, L_ref, mu0, S0)
    assert e_mu < 1e-7 * norm and e_S < 1e-7 * norm


@pytest.mark.parametrize("norm", [30.0, 50.0])
def test_dist_to_the_end_of_a_long_geodesic_ends_and_is_consistent(norm):
    rng = np.random.default_rng(int(norm))
    d = 2
    x, Bm = unit_velocity(rng, d, norm)
    mu1, S1 = gg.exp(np.zeros(d), np.eye(d), x, Bm)
    S1 = 0.5 * (S1 + S1.T)
    lower, upper = gg.dist_bounds(np.zeros(d), np.eye(d), mu1, S1)
    assert lower <= upper
    try:
        dmu, dS = gg.log(np.zeros(d), np.eye(d), mu1, S1, budget=Budget(max_iter=500, max_time=15))
    except BudgetExceededError as exc:   # ends within its budget, with a message
        assert "full-Gaussian geodesic shooting" in str(exc)
        return
    length = gg._speed(dmu, dS)
    # a geodesic of length |v| reaches the end point, so the distance is at most |v|
    assert lower - 1e-9 <= length <= min(upper, norm) + 1e-9
    mu_ref, L_ref = frame_ode_exp(np.zeros(d), np.eye(d), dmu, dS)
    e_mu, e_S = frame_error(mu1, S1, mu_ref, L_ref, np.zeros(d), np.eye(d))
    assert e_mu < 1e-8 and e_S < 1e-8


def test_equal_covariances_far_apart_have_the_closed_form():
    G = ig.Gaussian(dim=3)
    S = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.2], [0.0, 0.2, 0.5]])
    p, q = G.point(mean=np.zeros(3), cov=S), G.point(mean=np.array([1e3, -2e2, 5e2]), cov=S)
    delta2 = float(G.mean(q) @ np.linalg.solve(S, G.mean(q)))
    expected = math.sqrt(2) * math.acosh(1 + delta2 / 4)
    assert G.dist(p, q) == pytest.approx(expected, rel=1e-12)
    lower, upper = G.dist_bounds(p, q)
    assert lower <= expected * (1 + 1e-12) and upper == pytest.approx(expected, rel=1e-12)


def test_equal_means_bounds_are_exact():
    G = ig.Gaussian(dim=2)
    p = G.point(mean=np.array([1.0, 2.0]), cov=np.array([[1.0, 0.4], [0.4, 2.0]]))
    q = G.point(mean=np.array([1.0, 2.0]), cov=np.array([[3.0, -0.2], [-0.2, 0.5]]))
    lower, upper = G.dist_bounds(p, q)
    assert lower == pytest.approx(G.dist(p, q), rel=1e-12) and upper == pytest.approx(G.dist(p, q), rel=1e-12)


@pytest.mark.parametrize("d", [2, 3, 4, 5])
def test_bounds_bracket_the_distance_on_random_pairs(d):
    rng = np.random.default_rng(d)
    for k in range(50):   # 200 pairs over the four dimensions
        mu0, S0, mu1, S1 = random_pair(rng, d, scale=[0.3, 1.0, 3.0][k % 3])
        lower, upper = gg.dist_bounds(mu0, S0, mu1, S1)
        dist = gg.dist(mu0, S0, mu1, S1)
        assert lower <= dist * (1 + 1e-10) and dist <= upper * (1 + 1e-10), (k, lower, dist, upper)


@pytest.mark.parametrize("d", [5, 10])
def test_log_lands_on_the_target_by_independent_integration(d):
    rng = np.random.default_rng(10 + d)
    mu0, S0, mu1, S1 = random_pair(rng, d)
    dmu, dS = gg.log(mu0, S0, mu1, S1)
    mu_ref, L_ref = frame_ode_exp(mu0, S0, dmu, dS)
    e_mu, e_S = frame_error(mu1, S1, mu_ref, L_ref, mu0, S0)
    assert e_mu < 1e-9 and e_S < 1e-9
    L0 = np.linalg.cholesky(S0)
    x, Bm = np.linalg.solve(L0, dmu), np.linalg.solve(L0, np.linalg.solve(L0, dS).T).T
    assert gg.dist(mu0, S0, mu1, S1) == pytest.approx(gg._speed(x, Bm), rel=1e-12)


def test_budget_ends_the_shooting_with_a_clear_error():
    rng = np.random.default_rng(0)
    mu0, S0, mu1, S1 = random_pair(rng, 3, scale=3.0)
    with pytest.raises(BudgetExceededError, match="full-Gaussian geodesic shooting.*Mahalanobis.*try:"):
        gg.dist(mu0, S0, mu1, S1, budget=Budget(max_iter=1, max_time=60))
    G = ig.Gaussian(dim=3)
    G.budget = Budget(max_iter=1, max_time=60)
    with pytest.raises(BudgetExceededError):
        G.dist(G.point(mean=mu0, cov=S0), G.point(mean=mu1, cov=S1))


def test_a_non_finite_time_or_an_overflowing_vector_is_refused_clearly():
    # A7/B7 (found by an independent fault-battery sweep): geodesic(p, q)(nan) returned p for the univariate and
    # diagonal families and raised "cannot convert float NaN to integer" for the full one; a vector of entries
    # 1e300 raised a raw OverflowError
    G1, G2 = ig.Gaussian(1), ig.Gaussian(2)
    p2, q2 = np.array([0, 0, 1.0, 0, 1]), np.array([1, 0, 2.0, 0.3, 1])
    for M, p, q in [(G1, np.array([0.3, 1.5]), np.array([1.0, 0.5])), (G2, p2, q2),
                    (ig.Gaussian(2, covariance="diagonal"), np.array([0, 0, 1.0, 1]), np.array([1, 0, 2.0, 1]))]:
        with pytest.raises(ValueError, match="must be finite"):
            M.geodesic(p, q)(np.nan)
        with pytest.raises(TypeError, match="must be a real number"):   # checked by the geometry's path
            M.geodesic(p, q)(None)
    with pytest.raises(ValueError, match="overflows"):
        G2.exp(p2, G2.vector(p2, np.full(5, 1e300)))


def test_a_huge_finite_vector_fails_fast_once_the_path_degenerates():
    # a vector of length 1e7 ran its 1e7 closed-form steps (hours for 1e8) before the end was refused: the
    # factor's diagonal had underflowed to an exact 0 after ~500 steps, which no later step undoes
    # (found by an independent fault-battery sweep, C1)
    import time
    G = ig.Gaussian(2)
    p = np.array([0, 0, 1.0, 0, 1])
    for size in (1e3, 1e7):
        start = time.perf_counter()
        with pytest.raises(ValueError, match="not representable in floating point"):
            G.exp(p, G.vector(p, np.full(5, size)))
        assert time.perf_counter() - start < 5.0
    assert np.all(np.isfinite(G.exp(p, G.vector(p, np.full(5, 10.0)))))   # a long but representable step
