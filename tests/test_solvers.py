"""The solver layer: Rosenbrock as a composite problem (Gauss-Newton), step rules, Newton/proximal/trust-region steps, reporting."""
import logging
import math

import numpy as np
import pytest

import infogeo as ig
from .conftest import as_backend, rosen, rosen_cost

B = ig.backend
X0 = np.array([-1.5, 2.0])


def gauss_newton_space():
    return ig.Euclidean(2).with_metric(ig.PullbackMetric(rosen, output_metric=ig.EuclideanMetric(2)))


def test_issue_api_example_runs_as_written():
    M = ig.Euclidean(2)
    G = ig.PullbackMetric(rosen, output_metric=ig.EuclideanMetric(2))
    N = M.with_metric(G)
    df = N.differential(rosen_cost, X0)
    g = N.metric.sharp(df)
    assert isinstance(df, ig.Covector) and isinstance(g, ig.TangentVector)
    np.testing.assert_allclose(N.metric.flat(g).components, df.components, rtol=1e-12)
    # the natural gradient of sum z^2 under J^T J is 2 J^{-1} z
    J = np.array([[-1.0, 0.0], [-20 * X0[0], 10.0]])
    np.testing.assert_allclose(g.components, 2 * np.linalg.solve(J, B.to_numpy(rosen(X0))), rtol=1e-12)
    assert M.metric is not N.metric and isinstance(M.metric, ig.EuclideanMetric)  # with_metric copies
    res = ig.solvers.GradientDescent(step_size=0.5, update="retraction").minimize(N, rosen_cost, X0)
    for key in ("x", "fun", "nit", "success", "message", "history"):
        assert key in res


def test_gauss_newton_reaches_optimum_within_10_iterations(backend_name):
    x0 = as_backend(X0, backend_name)
    res = ig.solvers.GradientDescent(step_size=0.5, max_iter=10).minimize(gauss_newton_space(), rosen_cost, x0)
    assert res.success, res.message
    assert res.nit <= 10
    assert np.abs(B.to_numpy(res.x) - 1).max() < 1e-8
    np.testing.assert_allclose(X0, [-1.5, 2.0])  # the caller's start is untouched


def test_euclidean_gradient_descent_with_its_best_fixed_step_is_still_far_after_1000_iterations():
    M = ig.Euclidean(2)
    errors = {}
    for step in np.geomspace(1e-4, 1e-2, 25):
        res = ig.solvers.GradientDescent(step_size=step, max_iter=1000, grad_tol=0).minimize(M, rosen_cost, X0)
        errors[step] = np.abs(res.x - 1).max() if "diverged" not in res.message else math.inf
    best = min(errors, key=errors.get)
    assert math.isinf(errors[max(errors)])  # the grid reaches the divergent regime, so the best step is inside it
    assert errors[best] > 1e-3, (best, errors[best])


def test_armijo_line_search_decreases_monotonically():
    res = ig.solvers.GradientDescent(step_size=1.0, line_search="armijo", max_iter=200).minimize(
        ig.Euclidean(2), rosen_cost, X0)
    f = [h["fun"] for h in res.history]
    assert all(b <= a for a, b in zip(f, f[1:]))
    assert f[-1] < 0.1 * f[0]
    # Armijo condition holds for each accepted step
    for h0, h1 in zip(res.history, res.history[1:]):
        assert h1["fun"] <= h0["fun"] - 1e-4 * h1["alpha"] * h0["grad_norm"] ** 2 + 1e-12


def test_inverse_time_schedule():
    sched = ig.solvers.InverseTime(c=2.0, k0=1.0)
    assert [sched(k) for k in (1, 2, 3)] == [1.0, 2.0 / 3.0, 0.5]
    seen = []
    ig.solvers.GradientDescent(step_size=sched, max_iter=3, grad_tol=0).minimize(
        ig.Euclidean(1), lambda x: B.sum(x ** 2), np.array([1.0]),
        callback=lambda info: seen.append(info["step_size"]))
    # quadratic x^2: grad 2x, x_k+1 = x_k (1 - 2 alpha_k); step_size = alpha_k |grad|
    x, expected = 1.0, []
    for k in (1, 2, 3):
        expected.append(sched(k) * abs(2 * x))
        x *= 1 - 2 * sched(k)
    np.testing.assert_allclose(seen, expected)


def test_exp_update_on_the_half_plane_stays_on_geodesics():
    from .conftest import half_plane_metric
    M = ig.Manifold(2, half_plane_metric(), domain=lambda x: x[1] > 0)
    target = np.array([0.5, 2.0])
    cost = lambda x: B.sum((x - target) ** 2)  # noqa: E731
    res = ig.solvers.GradientDescent(step_size=0.2, update="exp", max_iter=3, grad_tol=0).minimize(
        M, cost, np.array([0.0, 1.0]))
    x0, x1 = res.history[0]["x"], res.history[1]["x"]
    g = M.gradient(cost, x0)
    np.testing.assert_allclose(x1, M.exp(x0, -0.2 * g))
    assert res.nit == 3


def test_natural_gradient_is_gradient_descent_under_the_metric():
    G = ig.PullbackMetric(rosen, ig.EuclideanMetric(2))
    a = ig.solvers.GradientDescent(step_size=0.5, metric=G, max_iter=5).minimize(ig.Euclidean(2), rosen_cost, X0)
    b = ig.solvers.GradientDescent(step_size=0.5, max_iter=5).minimize(gauss_newton_space(), rosen_cost, X0)
    np.testing.assert_allclose(a.path(), b.path())
    with pytest.warns(DeprecationWarning, match="GradientDescent"):   # the old name, an alias
        c = ig.solvers.NaturalGradient(G, step_size=0.5, max_iter=5).minimize(ig.Euclidean(2), rosen_cost, X0)
    np.testing.assert_allclose(c.path(), a.path())
    assert "NaturalGradient" not in ig.solvers.__all__


def test_proximal_point_with_squared_euclidean_is_implicit_gradient_descent():
    lam = 2.0
    res = ig.solvers.ProximalPoint(lam=lam, max_iter=3, grad_tol=0).minimize(ig.Euclidean(2), rosen_cost, X0)
    path = res.path()
    for x_old, x_new in zip(path, path[1:]):
        # Eq. 3: x_new = x_old - grad J(x_new) / lam
        np.testing.assert_allclose(x_new, x_old - B.grad(rosen_cost, x_new) / lam, atol=1e-10)


def test_proximal_point_with_pulled_back_output_distance_is_implicit_gd_on_outputs():
    lam = 1.0
    rho = ig.pullback(rosen, ig.SquaredEuclidean())
    res = ig.solvers.ProximalPoint(lam=lam, divergence=rho, max_iter=5, grad_tol=0).minimize(
        ig.Euclidean(2), rosen_cost, X0)
    z = np.array([B.to_numpy(rosen(x)) for x in res.path()])
    # output space: argmin_z |z|^2 + lam/2 |z - z_k|^2 = z_k * lam / (lam + 2)
    np.testing.assert_allclose(z[1:], z[:-1] * lam / (lam + 2), atol=1e-10)


def test_damped_newton_step_is_H_plus_lambda_G_inverse_gradient():
    lam = 3.0
    N = gauss_newton_space()
    res = ig.solvers.DampedNewton(damping_newton=lam, max_iter=1, grad_tol=0).minimize(N, rosen_cost, X0)
    H = B.hessian(rosen_cost, X0)
    G = N.metric.matrix(X0)
    expected = X0 - np.linalg.solve(H + lam * G, B.grad(rosen_cost, X0))
    np.testing.assert_allclose(res.x, expected, rtol=1e-12)
    mf = ig.solvers.DampedNewton(damping_newton=lam, matrix_free=True, max_iter=1, grad_tol=0).minimize(
        N, rosen_cost, X0)
    np.testing.assert_allclose(mf.x, expected, rtol=1e-8)
    full = ig.solvers.DampedNewton(damping_newton=1e-3, max_iter=100).minimize(N, rosen_cost, X0)
    assert full.success and np.abs(full.x - 1).max() < 1e-8


def test_damped_newton_reports_indefinite_system():
    saddle = lambda x: x[0] ** 2 - x[1] ** 2  # noqa: E731
    res = ig.solvers.DampedNewton(damping_newton=0.5, adapt_damping=False).minimize(
        ig.Euclidean(2), saddle, np.array([1.0, 1.0]))
    assert not res.success and "positive definite" in res.message
    # adapted, the damping grows until the system is positive definite and the iteration descends
    res = ig.solvers.DampedNewton(damping_newton=0.5, max_iter=5).minimize(ig.Euclidean(2), saddle, np.array([1.0, 1.0]))
    f = [h["fun"] for h in res.history]
    assert res.history[-1]["damping"] > 2 and f[-1] < f[0] and all(b <= a for a, b in zip(f, f[1:]))


@pytest.mark.parametrize("hessian", ["exact", "metric"])
def test_trust_region_converges_and_respects_the_metric_constraint(hessian):
    N = gauss_newton_space()
    cost = (lambda x: 0.5 * B.sum(rosen(x) ** 2)) if hessian == "metric" else rosen_cost
    res = ig.solvers.TrustRegion(eta=0.5, hessian=hessian, max_iter=200).minimize(N, cost, X0)
    assert res.success, res.message
    assert np.abs(res.x - 1).max() < 1e-8
    eta = 0.5
    for h in res.history[1:]:
        # each step satisfies 1/2 s^T G s <= eta (of the region it was computed in)
        assert 0.5 * h["step_size"] ** 2 <= eta * (1 + 1e-9)
        eta = h["eta"]


def test_truncated_cg_solves_interior_newton_systems():
    from infogeo.solvers.trust_region import truncated_cg
    rng = np.random.default_rng(3)
    H = rng.standard_normal((5, 5))
    H = H @ H.T + np.eye(5)
    G = np.diag(rng.uniform(0.5, 2, 5))
    g = rng.standard_normal(5)
    s, dec, boundary, _ = truncated_cg(lambda v: H @ v, lambda v: G @ v, lambda r: np.linalg.solve(G, r), g,
                                       radius=1e6, kappa=1e-14, theta=1.0)
    exact = -np.linalg.solve(H, g)
    assert not boundary
    np.testing.assert_allclose(s, exact, rtol=1e-8)
    assert dec == pytest.approx(-(g @ exact + 0.5 * exact @ H @ exact), rel=1e-10)
    s, _, boundary, _ = truncated_cg(lambda v: H @ v, lambda v: G @ v, lambda r: np.linalg.solve(G, r), g, radius=0.1)
    assert boundary and math.sqrt(s @ G @ s) == pytest.approx(0.1, rel=1e-10)


def test_result_history_callback_and_verbose_table(caplog):
    stops = []

    def callback(info):
        stops.append(info["iter"])
        return info["iter"] == 3

    with caplog.at_level(logging.INFO, logger="infogeo"):
        res = ig.solvers.GradientDescent(step_size=1e-3, verbose=True, max_iter=50).minimize(
            ig.Euclidean(2), rosen_cost, X0, callback=callback)
    assert res.nit == 3 and not res.success and "callback" in res.message
    assert [h["iter"] for h in res.history] == [0, 1, 2, 3] and stops == [1, 2, 3]
    assert res.history[0]["fun"] == pytest.approx(float(rosen_cost(X0)))
    assert "iter" in caplog.text and "|grad|" in caplog.text
    assert "fun:" in repr(res) and res.path().shape == (4, 2)


def test_stopping_rules():
    M, cost = ig.Euclidean(1), (lambda x: B.sum(x ** 2))
    x0 = np.array([1.0])
    # grad_tol is relative to |grad f(x0)| = 2 here: x_k = 2^-k, |grad| = 2^(1-k)
    r = ig.solvers.GradientDescent(step_size=0.25, grad_tol=1e-6).minimize(M, cost, x0)
    assert r.success and "grad_tol" in r.message and 1e-6 < r.grad_norm <= 2e-6 and r.nit == 20
    r = ig.solvers.GradientDescent(step_size=0.25, grad_tol=1e-6, grad_scale=1).minimize(M, cost, x0)
    assert r.success and r.grad_norm <= 1e-6 and r.nit == 21
    r = ig.solvers.GradientDescent(step_size=0.25e-6, grad_tol=1e-6).minimize(M, lambda x: 1e6 * cost(x), x0)
    assert r.success and r.nit == 20      # the same run on a cost a million times larger
    r = ig.solvers.GradientDescent(step_size=0.25, grad_tol=0, step_tol=1e-3).minimize(M, cost, x0)
    assert r.success and "step_tol" in r.message
    r = ig.solvers.GradientDescent(step_size=0.25, grad_tol=0, fun_tol=1e-9).minimize(M, cost, x0)
    assert r.success and "fun_tol" in r.message
    r = ig.solvers.GradientDescent(step_size=0.25, grad_tol=0, max_iter=4).minimize(M, cost, x0)
    assert not r.success and r.nit == 4 and "maximum" in r.message


def test_divergence_is_reported_not_returned_as_nan():
    res = ig.solvers.GradientDescent(step_size=0.1, max_iter=100).minimize(ig.Euclidean(2), rosen_cost, X0)
    assert not res.success and "diverged" in res.message
    assert np.all(np.isfinite(res.x)) and math.isfinite(res.fun)


def test_leaving_the_domain_is_reported():
    M = ig.Manifold(1, domain=lambda x: x[0] > 0, domain_description="x > 0")
    res = ig.solvers.GradientDescent(step_size=10.0).minimize(M, lambda x: B.sum(x), np.array([1.0]))
    assert not res.success and "domain" in res.message


def test_bad_input_is_rejected():
    M = ig.Euclidean(2)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        ig.solvers.GradientDescent().minimize(M, rosen_cost, np.zeros(3))
    with pytest.raises(ValueError, match="NaN"):
        ig.solvers.GradientDescent().minimize(M, rosen_cost, np.array([np.nan, 0.0]))
    with pytest.raises(ValueError, match="NaN/inf"):
        ig.solvers.GradientDescent().minimize(M, lambda x: B.sum(B.log(x - 10)), np.zeros(2))
    with pytest.raises(ValueError, match="update"):
        ig.solvers.GradientDescent(update="teleport")
    with pytest.raises(ValueError, match="step size"):
        ig.solvers.GradientDescent(step_size=-1.0)
    with pytest.raises(TypeError, match="Manifold"):
        ig.solvers.GradientDescent().minimize("R2", rosen_cost, X0)
    with pytest.raises(ValueError, match="damping"):
        ig.solvers.GradientDescent(damping=-1.0)


@pytest.mark.parametrize("make, error", [
    (lambda: ig.solvers.GradientDescent(progress="abc"), TypeError),
    (lambda: ig.solvers.GradientDescent(verbose=float("nan")), ValueError),
    (lambda: ig.solvers.GradientDescent(verbose="x"), TypeError),
    (lambda: ig.solvers.GradientDescent(update=np.array([1])), TypeError),
    (lambda: ig.solvers.GradientDescent(line_search=3), TypeError),
    (lambda: ig.solvers.TrustRegion(hessian=["exact"]), TypeError),
    (lambda: ig.solvers.MirrorDescent(gradient_chart=1.0), TypeError),
    (lambda: ig.solvers.InverseTime(c="a"), TypeError),
    (lambda: ig.solvers.InverseTime(k0="b"), TypeError)])
def test_settings_of_the_wrong_type_are_refused(make, error):
    """Found by an independent fault-battery sweep: progress='abc' drew a bar, verbose=nan and the others gave
    raw int()/comparison errors."""
    with pytest.raises(error, match="progress|verbose|update|line_search|hessian|gradient_chart|c |k0"):
        make()
