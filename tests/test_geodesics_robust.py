"""Generic geodesics: budgets, batched exp, and shooting on hard Beta pairs against an independent BVP solve."""
import numpy as np
import pytest
from scipy.integrate import solve_bvp
from scipy.special import polygamma

import infogeo as ig
from infogeo.budget import Budget, BudgetExceededError
from infogeo.geometry import geodesics

from .conftest import half_plane_dist, half_plane_metric


def beta_fisher(a):
    return np.diag(polygamma(1, a)) - polygamma(1, a.sum()) * np.ones((2, 2))


def beta_reference_dist(x, y):
    r"""Fisher–Rao distance of two Beta laws by scipy's collocation BVP solver on the geodesic
    equations with closed-form Christoffel symbols: the metric is the Hessian of
    :math:`\psi`, so :math:`\Gamma_{ij,k} = \tfrac12\partial_i\partial_j\partial_k\psi`."""
    def rhs(_t, Y):
        a, v = Y[:2].T, Y[2:].T                      # (n, 2) per mesh node
        s2 = polygamma(2, a.sum(1))
        # T[v, v]_k = psi''(a_k) v_k^2 - psi''(a + b) (v_1 + v_2)^2
        Tvv = polygamma(2, a) * v ** 2 - s2[:, None] * v.sum(1, keepdims=True) ** 2
        G = polygamma(1, a)[:, :, None] * np.eye(2) - polygamma(1, a.sum(1))[:, None, None]
        acc = -np.linalg.solve(G, 0.5 * Tvv[:, :, None])[:, :, 0]
        return np.vstack([v.T, acc.T])

    t = np.linspace(0, 1, 41)
    lin = x[:, None] + (y - x)[:, None] * t
    Y0 = np.vstack([lin, np.repeat((y - x)[:, None], len(t), axis=1)])
    sol = solve_bvp(rhs, lambda ya, yb: np.r_[ya[:2] - x, yb[:2] - y], t, Y0, tol=1e-10, max_nodes=100000)
    assert sol.success, sol.message
    v0 = sol.y[2:, 0]
    return float(np.sqrt(v0 @ beta_fisher(x) @ v0))


@pytest.mark.slow
@pytest.mark.parametrize("x, y", [((0.74, 2.23), (2.34, 0.70)), ((0.72, 5.00), (3.44, 1.56))])
def test_beta_pairs_that_used_to_hang_match_an_independent_bvp_solve(x, y):
    M = ig.load_manifold("beta")
    x, y = np.array(x), np.array(y)
    v = geodesics.log(M.metric, x, y, budget=Budget(max_iter=200, max_time=60))
    np.testing.assert_allclose(geodesics.exp(M.metric, x, v), y, atol=1e-9)
    assert float(np.sqrt(v @ beta_fisher(x) @ v)) == pytest.approx(beta_reference_dist(x, y), abs=1e-8)


def test_beta_extreme_scales_end_within_the_budget():
    M = ig.load_manifold("beta")
    x, y = np.array([1e-3, 1.0]), np.array([1e3, 1.0])
    try:
        v = geodesics.log(M.metric, x, y, budget=Budget(max_iter=60, max_time=5))
    except BudgetExceededError as exc:
        assert "geodesic log" in str(exc) and "|y - x|" in str(exc) and "try:" in str(exc)
    except geodesics.GeodesicError as exc:
        assert "did not converge" in str(exc)
    else:
        np.testing.assert_allclose(geodesics.exp(M.metric, x, v), y, rtol=1e-8)


def test_budget_error_names_operation_scale_and_remedy():
    x, y = np.array([0.3, 1.0]), np.array([1.5, 0.4])
    with pytest.raises(BudgetExceededError, match=r"geodesic log .*iteration budget of 1 .*\|y - x\|.*try:"):
        geodesics.log(half_plane_metric(), x, y, budget=Budget(max_iter=1, max_time=60))
    m = half_plane_metric()
    m.budget = Budget(max_iter=1, max_time=60)  # the metric's own budget is used when none is passed
    with pytest.raises(BudgetExceededError):
        geodesics.log(m, x, y)


def test_budget_validates_and_counts():
    with pytest.raises(ValueError, match="max_iter"):
        Budget(max_iter=0)
    with pytest.raises(ValueError, match="max_time"):
        Budget(max_time=-1.0)
    b = Budget(max_iter=2, max_time=None).start("toy solve", scale="|x| = 1")
    b.tick()
    b.tick()
    with pytest.raises(BudgetExceededError, match="toy solve: iteration budget of 2 exhausted; inputs: |x| = 1"):
        b.tick()
    with pytest.raises(TypeError, match="Budget"):
        geodesics.exp(half_plane_metric(), np.array([0.0, 1.0]), np.array([1.0, 0.0]), budget=5)


def test_batched_exp_equals_the_loop_and_round_trips_log():
    m = half_plane_metric()
    x = np.array([0.3, 1.2])
    V = np.array([[0.8, 0.3], [-0.5, 1.0], [0.0, -0.7], [1.5, 0.2]])
    batch = geodesics.exp(m, x, V)
    assert batch.shape == (4, 2)
    # the stacked system shares its steps, so compare at the integration tolerance
    np.testing.assert_allclose(batch, [geodesics.exp(m, x, v) for v in V], atol=1e-10)
    ys = batch[:2]
    for y, v in zip(ys, V[:2]):
        w = geodesics.log(m, x, y)
        np.testing.assert_allclose(w, v, atol=1e-9)
        assert np.sqrt(w @ m.matrix(x) @ w) == pytest.approx(half_plane_dist(x, y), abs=1e-10)
    # a batch of starts as well as of velocities
    X = np.array([[0.3, 1.2], [1.0, 0.5]])
    np.testing.assert_allclose(geodesics.exp(m, X, V[:2]), [geodesics.exp(m, a, v) for a, v in zip(X, V[:2])],
                               atol=1e-10)


def test_a_start_whose_momentum_overflows_is_a_geodesic_error():
    # an Ising point with natural parameters of 1e300 overflowed G(x) v: scipy's raw "All components of the
    # initial state y0 must be finite" from dist/log (found by an independent fault-battery sweep's probes)
    M = ig.IsingModel(3, [(0, 1), (1, 2)])
    rng = np.random.default_rng(0)
    p, q = (np.asarray(M.random_point(rng)) for _ in range(2))
    for op in (M.log, M.dist):
        with pytest.raises(geodesics.GeodesicError):
            op(p * 1e300, q)
