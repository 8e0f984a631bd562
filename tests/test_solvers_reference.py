"""The solvers against independent references: scipy.optimize on Euclidean problems, closed forms,
scipy's Steihaug subproblem; scipy's result conventions; defaults that do not diverge; bad arguments."""
import math

import numpy as np
import pytest
import scipy.optimize as so
from scipy.optimize._trustregion_ncg import CGSteihaugSubproblem

import infogeo as ig
from infogeo.solvers import DampedNewton, GradientDescent, MirrorDescent, ProximalPoint, TrustRegion
from infogeo.geometry.geodesics import GeodesicError
from infogeo.solvers.trust_region import truncated_cg

B = ig.backend
A = np.diag([1.0, 10.0, 50.0])          # a convex quadratic whose largest curvature exceeds 2
b = np.array([1.0, -2.0, 3.0])
X_STAR = np.linalg.solve(A, b)


def quad(x):
    return 0.5 * B.dot(x, B.matmul(A, x)) - B.dot(b, x)


def rosenbrock(x):
    return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2


RNG = np.random.default_rng(0)
FEATURES = RNG.standard_normal((40, 3))
LABELS = (FEATURES @ [1.0, -2.0, 0.5] + 0.5 * RNG.standard_normal(40) > 0).astype(float)


def logistic(w):
    """Ridge-regularised logistic regression: smooth, strongly convex, not quadratic."""
    z = B.matmul(FEATURES, w)
    return B.sum(B.log(1 + B.exp(z)) - LABELS * z) / 40 + 0.05 * B.sum(w ** 2)


def scipy_minimum(f, x0):
    res = so.minimize(lambda w: float(f(w)), x0, jac=lambda w: B.grad(f, w), method="BFGS",
                      options={"gtol": 1e-12})
    assert res.success or "precision" in res.message, res.message
    return res.x


# ------------------------------------------------------------ defaults
def test_default_gradient_descent_does_not_diverge_on_a_convex_quadratic_or_rosenbrock():
    """A fixed unit step diverges once the curvature exceeds 2; the default (Barzilai-Borwein trial steps
    under a nonmonotone Armijo search) converges instead, every cost below the largest of the ten before."""
    res = GradientDescent(grad_tol=1e-7, max_iter=2000).minimize(ig.Euclidean(3), quad, np.zeros(3))
    assert res.success, res.message
    np.testing.assert_allclose(res.x, X_STAR, atol=1e-6)
    res = GradientDescent(max_iter=300).minimize(ig.Euclidean(2), rosenbrock, np.array([-1.2, 1.0]))
    f = [h["fun"] for h in res.history]
    assert all(np.isfinite(f)) and all(f[k] < max(f[max(0, k - 10):k]) for k in range(1, len(f)))
    assert res.success, res.message
    np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-7)
    # plain Armijo (memory=1) is monotone
    res = GradientDescent(max_iter=50, memory=1).minimize(ig.Euclidean(2), rosenbrock, np.array([-1.2, 1.0]))
    f = [h["fun"] for h in res.history]
    assert all(b_ < a_ for a_, b_ in zip(f, f[1:]))
    # an explicit step size is still taken as given (here: too large, and reported as such)
    res = GradientDescent(1.0, max_iter=200).minimize(ig.Euclidean(3), quad, np.zeros(3))
    assert not res.success and res.status == 3 and "diverged" in res.message


def test_default_gradient_descent_is_fast_on_an_ill_conditioned_quadratic():
    """Condition number 1e3: monotone Armijo from a unit step takes ~7000 iterations and then stalls at a relative
    gradient of 1e-7 (cost differences below rounding); Barzilai-Borwein steps reach 1e-8 in ~400."""
    D = np.logspace(0, 3, 20)
    res = GradientDescent(grad_tol=1e-8).minimize(ig.Euclidean(20), lambda x: 0.5 * B.sum(D * x ** 2) - B.sum(x),
                                                  np.zeros(20))
    assert res.success and res.nit < 600, res.message
    np.testing.assert_allclose(res.x, 1 / D, rtol=1e-7)


@pytest.mark.parametrize("solver", [TrustRegion(), DampedNewton(), ProximalPoint()], ids=lambda s: s.name)
def test_other_defaults_solve_the_quadratic_and_rosenbrock(solver):
    res = solver.minimize(ig.Euclidean(3), quad, np.zeros(3))
    assert res.success and res.status == 0, res.message
    np.testing.assert_allclose(res.x, X_STAR, atol=1e-9)
    res = solver.minimize(ig.Euclidean(2), rosenbrock, np.array([-1.2, 1.0]))
    assert res.success, res.message
    np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-8)


# ------------------------------------------------------------ scipy conventions
def test_result_has_scipy_fields_and_status_codes():
    ref = so.minimize(lambda x: float(quad(x)), np.zeros(3), method="BFGS")
    res = GradientDescent().minimize(ig.Euclidean(3), quad, np.zeros(3))
    for key in ("x", "fun", "nit", "nfev", "success", "status", "message", "jac"):
        assert key in ref and key in res, key
    assert isinstance(res.status, int) and (res.status == 0) == res.success
    M, x0 = ig.Euclidean(3), np.zeros(3)
    assert GradientDescent(0.01, max_iter=3).minimize(M, quad, x0).status == 1            # iteration limit
    assert GradientDescent(0.01, callback=lambda info: True).minimize(M, quad, x0).status == 2
    half = ig.Manifold(1, domain=lambda x: x[0] > 0)
    failed = GradientDescent(10.0).minimize(half, lambda x: B.sum(x), np.array([1.0]))
    assert failed.status == 3 and not failed.success and "domain" in failed.message
    assert "status" in repr(failed)


@pytest.mark.parametrize("solver", [GradientDescent(), TrustRegion(), DampedNewton(), DampedNewton(1e-3), ProximalPoint()],
                         ids=lambda s: f"{s.name}{s.lam if isinstance(s, DampedNewton) else ''}")
def test_solvers_reach_scipys_minimiser_of_a_logistic_regression(solver):
    ref = scipy_minimum(logistic, np.zeros(3))
    res = solver.minimize(ig.Euclidean(3), logistic, np.zeros(3))
    assert res.success, res.message
    np.testing.assert_allclose(res.x, ref, atol=1e-8)
    assert res.fun == pytest.approx(float(logistic(ref)), abs=1e-14)


def test_damped_newton_with_its_defaults_solves_a_plain_logistic_regression_in_few_iterations():
    """No ridge term, scaled features: a fixed damping of 1 left f - f* = 0.3 after 30 iterations; adapted, the
    damping falls as the model proves accurate and the last steps are Newton's."""
    X = np.c_[FEATURES * [3.0, 0.3, 10.0], np.ones(40)]

    def plain(w):
        z = B.matmul(X, w)
        return B.sum(B.log(1 + B.exp(z)) - LABELS * z) / 40

    ref = scipy_minimum(plain, np.zeros(4))
    res = DampedNewton(max_iter=30).minimize(ig.Euclidean(4), plain, np.zeros(4))
    assert res.success, res.message
    assert res.fun - float(plain(ref)) < 1e-13 and res.history[-1]["damping"] < 1e-3
    np.testing.assert_allclose(res.x, ref, atol=1e-6)


def test_natural_gradient_under_the_pulled_back_metric_matches_scipy_least_squares():
    """Gauss-Newton is gradient descent under J^T J (``sharp`` of the pullback metric)."""
    t = np.linspace(0, 2, 20)
    y = 2.0 * np.exp(-1.3 * t) + 0.01 * np.random.default_rng(1).standard_normal(20)

    def residual(p):
        return p[0] * B.exp(-p[1] * t) - y

    p0 = np.array([1.0, 0.5])
    ref = so.least_squares(lambda p: B.to_numpy(residual(p)), p0, xtol=1e-15, ftol=1e-15, gtol=1e-15)
    G = ig.PullbackMetric(residual, ig.EuclideanMetric(20))
    res = GradientDescent(1.0, metric=G, max_iter=50).minimize(ig.Euclidean(2), lambda p: 0.5 * B.sum(residual(p) ** 2), p0)
    assert res.success and res.nit < 20, res.message
    np.testing.assert_allclose(res.x, ref.x, atol=1e-10)
    # one full Gauss-Newton step from p0 is the linear least-squares step of scipy's lstsq
    J = so.approx_fprime(p0, lambda p: B.to_numpy(residual(p)), 1e-7)
    step = np.linalg.lstsq(J, -B.to_numpy(residual(p0)), rcond=None)[0]
    first = GradientDescent(1.0, metric=G, max_iter=1, grad_tol=0).minimize(
        ig.Euclidean(2), lambda p: 0.5 * B.sum(residual(p) ** 2), p0)
    np.testing.assert_allclose(first.x - p0, step, rtol=1e-5)


# ------------------------------------------------------------ closed forms
def test_truncated_cg_matches_scipys_steihaug_subproblem_on_indefinite_models():
    """Both follow Nocedal & Wright's Alg. 7.2; on negative curvature the better boundary point is taken."""
    rng = np.random.default_rng(3)
    worst = 0.0
    for case in range(6):
        H = rng.standard_normal((5, 5))
        H = H + H.T + (3 * np.eye(5) if case % 2 else 0)
        g = rng.standard_normal(5)
        for radius in (0.05, 0.5, 3.0):
            p, _ = CGSteihaugSubproblem(np.zeros(5), lambda x: 0.0, lambda x: g, lambda x: H).solve(radius)
            # the same inner stopping rule as scipy's: |r| <= min(0.5, sqrt|g|) |g|
            s, decrease, _, _ = truncated_cg(lambda v: H @ v, lambda v: v, lambda r: r, g, radius,
                                             kappa=0.5, theta=0.5)
            worst = max(worst, np.abs(s - p).max())
            assert decrease == pytest.approx(-(g @ s + 0.5 * s @ H @ s), abs=1e-12)
    assert worst < 1e-12


def test_proximal_point_on_a_quadratic_is_the_closed_form_resolvent():
    """x_{k+1} = (A + lam I)^{-1} (b + lam x_k) for J = x^T A x / 2 - b^T x."""
    lam = 0.7
    res = ProximalPoint(lam=lam, max_iter=4, grad_tol=0).minimize(ig.Euclidean(3), quad, np.full(3, 2.0))
    P = res.path()
    for old, new in zip(P, P[1:]):
        np.testing.assert_allclose(new, np.linalg.solve(A + lam * np.eye(3), b + lam * old), atol=1e-13)


def test_proximal_point_default_subproblem_tolerance_follows_the_scale_of_the_cost():
    """A cost in the 1e6-1e8 range: its gradient's rounding error alone exceeded the old absolute 1e-12."""
    A2, b2 = np.array([[3.0, 1.0], [1.0, 2.0]]), np.array([1.0, -1.0])
    big_quad = lambda x: 1e8 * (0.5 * B.dot(x, B.matmul(A2, x)) - B.dot(b2, x))  # noqa: E731
    res = ProximalPoint().minimize(ig.Euclidean(2), big_quad, np.array([2.0, 2.0]))
    assert res.success, res.message
    np.testing.assert_allclose(res.x, np.linalg.solve(A2, b2), atol=1e-12)
    big_rosen = lambda x: 1e6 * rosenbrock(x)  # noqa: E731
    res = ProximalPoint().minimize(ig.Euclidean(2), big_rosen, np.array([-1.2, 1.0]))
    assert res.success, res.message
    np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-9)


def test_damped_newton_reports_the_metric_norm_of_its_step():
    from .conftest import half_plane_metric
    M = ig.Manifold(2, half_plane_metric(), domain=lambda x: x[1] > 0)
    target = np.array([0.5, 2.0])
    cost = lambda x: B.sum((x - target) ** 2)  # noqa: E731
    x0 = np.array([0.0, 1.0])
    res = DampedNewton(0.5, max_iter=1, grad_tol=0).minimize(M, cost, x0)
    s = res.x - x0
    assert res.history[1]["step_size"] == pytest.approx(math.sqrt(s @ s) / x0[1], rel=1e-12)
    res = ProximalPoint(max_iter=1, grad_tol=0).minimize(M, cost, x0)
    s = res.x - x0
    assert res.history[1]["step_size"] == pytest.approx(math.sqrt(s @ s) / x0[1], rel=1e-12)


@pytest.mark.parametrize("chart", ["standard", "natural", "mean"])
def test_mirror_descent_on_a_categorical_matches_the_closed_form(chart):
    """Cross-entropy to q: grad_theta J = eta - q, so the mean step is eta_k = q + (1 - a)^k (eta_0 - q);
    the other direction, theta <- theta - a grad_eta J, is iterated here in plain numpy."""
    q, p0, a = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6]), 0.3
    C = ig.Categorical(3, chart=chart)
    cost = lambda z: -B.sum(B.array(q) * B.log(C.probs(z)))  # noqa: E731
    x0 = C.point(probs=p0)
    md = MirrorDescent(a, gradient_chart="natural", max_iter=6, grad_tol=0).minimize(C, cost, x0)
    eta = np.stack([B.to_numpy(C.to_chart(B.array(z), "mean")) for z in md.path()])
    k = np.arange(7)[:, None]
    np.testing.assert_allclose(eta, q[:2] + (1 - a) ** k * (p0[:2] - q[:2]), atol=1e-14)
    md = MirrorDescent(a, gradient_chart="mean", max_iter=6, grad_tol=0).minimize(C, cost, x0)
    theta = np.stack([B.to_numpy(C.to_chart(B.array(z), "natural")) for z in md.path()])
    e, t, expected = p0[:2], np.log(p0[:2] / p0[2]), []
    for _ in range(7):
        expected.append(t.copy())
        t = t - a * (-q[:2] / e + q[2] / (1 - e.sum()))
        p = np.exp(np.append(t, 0.0))
        e = (p / p.sum())[:2]
    np.testing.assert_allclose(theta, np.array(expected), atol=1e-13)


# ------------------------------------------------------------ arguments and the caller's data
@pytest.mark.parametrize("make, match, exc", [
    (lambda: GradientDescent(step_size="a"), "step size", TypeError),
    (lambda: GradientDescent(armijo_c1=2.0), "armijo_c1", ValueError),
    (lambda: GradientDescent(armijo_shrink=1.5), "armijo_shrink", ValueError),
    (lambda: GradientDescent(line_search="wolfe"), "line_search", ValueError),
    (lambda: DampedNewton(step_size=math.inf), "step_size", ValueError),
    (lambda: DampedNewton(damping_newton=math.inf), "damping_newton", ValueError),
    (lambda: ProximalPoint(lam=math.inf), "lam", ValueError),
    (lambda: ProximalPoint(inner="TrustRegion"), "inner", TypeError),
    (lambda: GradientDescent(fun_tol=-1.0), "fun_tol", ValueError),
    (lambda: ig.solvers.InverseTime(k0=-1.0), "k0", ValueError),
])
def test_bad_solver_arguments_are_refused_by_name(make, match, exc):
    with pytest.raises(exc, match=match):
        make()


@pytest.mark.parametrize("solver", [GradientDescent(), GradientDescent(0.01, update="exp"), TrustRegion(),
                                    DampedNewton(), ProximalPoint()], ids=lambda s: s.name)
def test_the_callers_start_is_never_modified(solver, backend_name):
    from .conftest import as_backend
    x0 = as_backend([0.3, -0.4, 0.2], backend_name)
    before = B.to_numpy(x0).copy()
    res = solver.minimize(ig.Euclidean(3), quad, x0)
    np.testing.assert_array_equal(B.to_numpy(x0), before)
    assert res.x is not x0 and type(res.x) is type(x0)


def test_igo_results_carry_status_codes_too():
    sphere = lambda X: np.sum(X ** 2, axis=1)  # noqa: E731
    short = ig.solvers.igo_minimize(sphere, np.ones(4), 0.5, max_evals=200, seed=0)
    assert not short.success and short.status == 1 and "budget" in short.message
    done = ig.solvers.igo_minimize(sphere, np.ones(4), 0.5, max_evals=20000, seed=0, f_target=1e-10)
    assert done.success and done.status == 0 and done.fun <= 1e-10


def test_a_metric_that_stops_being_positive_definite_is_reported_as_such_not_as_divergence():
    G = ig.MatrixMetric(lambda x: B.diag(B.stack([1.0 + 0 * x[0], 1.0 - x[0] ** 2])), dim=2)
    res = GradientDescent(0.5).minimize(ig.Euclidean(2).with_metric(G), lambda x: (x[0] - 3) ** 2 + x[1] ** 2,
                                        np.zeros(2))
    assert res.status == 3 and "not positive definite" in res.message and "diverged" not in res.message
    np.testing.assert_array_equal(res.x, [0.0, 0.0])     # the last point where the metric was an inner product


def test_a_geodesic_step_that_cannot_be_followed_is_backtracked_or_reported():
    """G = I / x_1 has geodesics that reach x_1 = 0 in finite time: a long exp step cannot be integrated.
    Armijo treats that trial like one outside the domain; a fixed step reports it (both used to raise)."""
    M = ig.Manifold(2, ig.MatrixMetric(lambda x: B.eye(2, like=x) / x[1], dim=2), domain=lambda x: x[1] > 0)
    cost = lambda x: (x[0] - 1) ** 2 + 100 * (x[1] - 0.01) ** 2  # noqa: E731
    x0 = np.array([0.0, 1.0])
    with pytest.raises(GeodesicError):        # the first trial's geodesic runs into x_1 = 0
        M.exp(x0, -0.02 * M.gradient(cost, x0))
    res = GradientDescent(0.02, update="exp", line_search="armijo", max_iter=1).minimize(M, cost, x0)
    assert res.status == 1 and res.history[1]["alpha"] == 0.01 and res.fun < 0.02 * float(cost(x0))
    res = GradientDescent(0.02, update="exp", max_iter=1).minimize(M, cost, x0)
    assert res.status == 3 and "geodesic step could not be followed" in res.message
    np.testing.assert_array_equal(res.x, x0)
