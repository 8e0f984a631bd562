"""Collocation ``log`` and ``exp`` (batched metric evaluation) against closed forms, shooting and the ODE integrator."""
import numpy as np
import pytest

import infogeo as ig
from infogeo.budget import Budget, BudgetExceededError
from infogeo.geometry import geodesics, geodesics_bvp

from .conftest import half_plane_dist, half_plane_metric

B = ig.backend


def warped_metric():
    """A non-conformal metric on R^3, written for one point with elementwise operations."""
    return ig.MatrixMetric(lambda x: B.stack([
        B.stack([1 + x[0] ** 2, x[0] * x[1], 0 * x[2]]),
        B.stack([x[0] * x[1], 1 + x[1] ** 2, 0 * x[2]]),
        B.stack([0 * x[0], 0 * x[1], B.exp(x[2]) + 0 * x[0]])]), dim=3)


def _collocation_log(metric, x, y, tol=1e-12):
    """Collocation from the same start as ``geodesics.log`` (chord bent by the midpoint Christoffel term)."""
    gfun = geodesics_bvp.batched_matrix(metric, x)
    assert gfun is not None
    b, flow = geodesics._start(metric, x, None, "test", "")
    return geodesics_bvp.log(gfun, x, y, tol, b, flow.budget, guess=geodesics._midpoint_guess(flow, x, y))


def _ode_exp(metric, x, v):
    """``exp_x(v)`` by the DOP853 integration of the geodesic equation alone (independent of the collocation)."""
    v = np.asarray(getattr(v, "components", v), dtype=float)
    _, flow = geodesics._start(metric, x, None, "test", "")
    sol = geodesics._integrate(flow, x[None], (flow.matrix(x) @ v)[None], 1.0, geodesics.RTOL)
    return sol.y[:len(x), -1]


def _no_integration(*args, **kwargs):
    raise AssertionError("the ODE integrator was used")


def test_cheb_differentiation_is_exact_on_polynomials():
    t, D = geodesics_bvp._cheb(12)
    np.testing.assert_allclose(D @ t ** 5, 5 * t ** 4, atol=1e-11)
    coef = geodesics_bvp._cheb_coefficients(np.stack([t ** 3, np.cos(t)], axis=1))
    s = np.linspace(0, 1, 7)
    np.testing.assert_allclose(geodesics_bvp._cheb_eval(coef, s), np.stack([s ** 3, np.cos(s)], axis=1),
                               atol=1e-12)


@pytest.mark.parametrize("x, y", [((0.3, 1.0), (1.5, 0.4)), ((0.0, 1.0), (0.0, 5.0)), ((-2.0, 0.5), (3.0, 0.8)),
                                  ((0.1, 0.2), (0.15, 0.21))])
def test_half_plane_collocation_log_matches_the_closed_form_distance(x, y):
    metric = half_plane_metric()
    x, y = np.array(x), np.array(y)
    v = _collocation_log(metric, x, y)
    assert float(np.sqrt(v @ metric.matrix(x) @ v)) == pytest.approx(half_plane_dist(x, y), abs=1e-11)
    # the initial velocity, integrated by the independent ODE exp, lands on y
    np.testing.assert_allclose(_ode_exp(metric, x, v), y, atol=1e-10)


def test_warped_metric_collocation_agrees_with_shooting_and_exp():
    metric = warped_metric()
    x, y = np.array([0.2, -0.5, 0.1]), np.array([1.1, 0.7, -0.6])
    v = _collocation_log(metric, x, y)
    np.testing.assert_allclose(_ode_exp(metric, x, v), y, atol=1e-10)
    shooter = geodesics._Shooter(geodesics._start(metric, x, None, "test", "")[1], x, y,
                                 Budget(max_iter=200, max_time=60).start("test"))
    np.testing.assert_allclose(shooter.newton(v + 1e-3, y, 1e-12), v, atol=1e-9)


def test_log_of_a_vectorising_metric_does_not_shoot(monkeypatch):
    def no_shooting(*args, **kwargs):
        raise AssertionError("shooting was used")
    monkeypatch.setattr(geodesics, "_Shooter", no_shooting)
    x, y = np.array([-2.0, 0.5]), np.array([3.0, 0.8])
    metric = half_plane_metric()
    v = geodesics.log(metric, x, y)
    assert float(np.sqrt(v @ metric.matrix(x) @ v)) == pytest.approx(half_plane_dist(x, y), abs=1e-11)


@pytest.mark.filterwarnings("ignore:Output seems independent of input")   # autograd, on the constant metric
def test_metrics_that_do_not_vectorise_are_refused():
    x = np.array([0.3, 0.8])
    mixing = ig.MatrixMetric(lambda z: (1 + B.sum(z ** 2)) * B.eye(2, like=z), dim=2)   # sums across columns
    constant = ig.MatrixMetric(lambda z: B.array([[2.0, 0.5], [0.5, 1.0]]), dim=2)
    assert geodesics_bvp.batched_matrix(mixing, x) is None
    assert geodesics_bvp.batched_matrix(constant, x) is None
    assert geodesics_bvp.batched_matrix(half_plane_metric(), x) is not None
    # both still get a log from the shooting solver
    y = np.array([1.0, 0.2])
    for metric in (mixing, constant):
        v = geodesics.log(metric, x, y)
        np.testing.assert_allclose(geodesics.exp(metric, x, v), y, atol=1e-10)


def test_log_falls_back_to_shooting_when_collocation_fails(monkeypatch):
    def fail(*args, **kwargs):
        raise FloatingPointError("forced")
    monkeypatch.setattr(geodesics_bvp, "log", fail)
    x, y = np.array([0.3, 1.0]), np.array([1.5, 0.4])
    metric = half_plane_metric()
    v = geodesics.log(metric, x, y)
    assert float(np.sqrt(v @ metric.matrix(x) @ v)) == pytest.approx(half_plane_dist(x, y), abs=1e-11)


def test_collocation_runs_under_the_budget():
    x, y = np.array([0.3, 1.0]), np.array([1.5, 0.4])
    with pytest.raises(BudgetExceededError, match="iteration budget of 2"):
        geodesics.log(half_plane_metric(), x, y, budget=Budget(max_iter=2, max_time=60))


@pytest.mark.parametrize("name, k", [("beta", 2), ("dirichlet", 3), ("dirichlet", 4)])
def test_vectorised_fisher_batches_match_single_points(name, k):
    M = ig.load_manifold(name) if name == "beta" else ig.load_manifold(name, k=k)
    X = np.random.default_rng(1).uniform(0.3, 6.0, size=(4, 3, k))
    F = M.fisher(X)
    assert F.shape == (4, 3, k, k)
    for idx in np.ndindex(4, 3):
        np.testing.assert_allclose(F[idx], M.fisher(X[idx]), rtol=1e-14)
    assert M.metric.batches_points
    gfun = geodesics_bvp.batched_matrix(M.metric, X[0, 0])
    np.testing.assert_allclose(gfun(X[0].T), np.moveaxis(F[0], 0, -1), rtol=1e-14)


@pytest.mark.parametrize("x, y, dist", [((0.74, 2.23), (2.34, 0.70), 2.0539753137),
                                        ((0.72, 5.00), (3.44, 1.56), 2.6827097463)])
def test_beta_log_by_collocation_on_native_batches(monkeypatch, x, y, dist):
    # the second pair's bent first guess leaves alpha > 0: the collocation restarts from the chord
    x, y = np.array(x), np.array(y)
    M = ig.load_manifold("beta")
    with monkeypatch.context() as m:
        m.setattr(geodesics, "_Shooter", lambda *a, **k: (_ for _ in ()).throw(AssertionError("shooting was used")))
        v = M.log(x, y)
        assert M.dist(x, y) == pytest.approx(dist, abs=1e-9)
    np.testing.assert_allclose(_ode_exp(M.metric, x, v), y, atol=1e-9)   # independent of the collocation


def test_dirichlet_log_by_collocation_inverts_exp(monkeypatch):
    M = ig.load_manifold("dirichlet", k=3)
    x, y = np.array([0.6, 2.0, 4.5]), np.array([3.0, 0.8, 1.2])
    monkeypatch.setattr(geodesics, "_Shooter", lambda *a, **k: (_ for _ in ()).throw(AssertionError("shooting")))
    v = M.log(x, y)
    np.testing.assert_allclose(_ode_exp(M.metric, x, v), y, atol=1e-9)


@pytest.mark.parametrize("name, x, v", [
    ("beta", (0.74, 2.23), (1.3, -1.1)),
    ("beta", (0.72, 5.00), (2.0, -3.0)),
    ("dirichlet", (0.6, 2.0, 4.5), (1.5, -0.9, -2.0)),
    ("half-plane", (0.3, 1.0), (1.0, -0.6)),
    ("half-plane", (-2.0, 0.5), (1.5, 0.4)),
])
def test_exp_by_collocation_equals_the_ode_exp(monkeypatch, name, x, v):
    if name == "half-plane":
        metric = half_plane_metric()
    else:
        metric = (ig.load_manifold("beta") if name == "beta" else ig.load_manifold("dirichlet", k=3)).metric
    x, v = np.array(x), np.array(v)
    reference = _ode_exp(metric, x, v)
    with monkeypatch.context() as m:
        m.setattr(geodesics, "_integrate", _no_integration)
        end = geodesics.exp(metric, x, v)
        half = geodesics.exp(metric, x, v, t=0.5)
    np.testing.assert_allclose(end, reference, atol=1e-9)
    np.testing.assert_allclose(half, _ode_exp(metric, x, 0.5 * v), atol=1e-9)


def test_exp_of_a_metric_that_does_not_batch_integrates(monkeypatch):
    mixing = ig.MatrixMetric(lambda z: (1 + B.sum(z ** 2)) * B.eye(2, like=z), dim=2)   # sums across columns
    monkeypatch.setattr(geodesics_bvp, "exp", lambda *a, **k: (_ for _ in ()).throw(AssertionError("collocation")))
    x, v = np.array([0.3, 0.8]), np.array([0.5, -0.4])
    np.testing.assert_array_equal(geodesics.exp(mixing, x, v), _ode_exp(mixing, x, v))


def test_exp_falls_back_to_integration_when_collocation_fails(monkeypatch):
    def fail(*args, **kwargs):
        raise FloatingPointError("forced")
    monkeypatch.setattr(geodesics_bvp, "exp", fail)
    metric, x, v = half_plane_metric(), np.array([0.3, 1.0]), np.array([1.0, -0.6])
    np.testing.assert_array_equal(geodesics.exp(metric, x, v), _ode_exp(metric, x, v))
    # and the batched exp (several geodesics at once) integrates as before
    V = np.stack([v, 0.5 * v])
    np.testing.assert_allclose(geodesics.exp(metric, x, V)[1], _ode_exp(metric, x, 0.5 * v), atol=1e-12)


def test_exp_of_a_long_geodesic_stays_accurate():
    # hyperbolic length 8, the height falling to 4e-4 of its start: Newton from the straight line stalls
    # and the collocation gives way to the integrator
    metric, x, v = half_plane_metric(), np.array([-2.0, 0.5]), np.array([4.0, 0.7])
    np.testing.assert_allclose(geodesics.exp(metric, x, v), _ode_exp(metric, x, v), atol=1e-9)


def test_exp_by_collocation_runs_under_the_budget():
    with pytest.raises(BudgetExceededError, match="iteration budget of 2"):
        geodesics.exp(half_plane_metric(), np.array([0.3, 1.0]), np.array([1.0, -0.6]),
                      budget=Budget(max_iter=2, max_time=60))
