"""infogeo <-> pymanopt adapters, checked against closed forms and against each other."""
import numpy as np
import pytest

pymanopt = pytest.importorskip("pymanopt")

import infogeo as ig  # noqa: E402
from infogeo import backend as B  # noqa: E402
from infogeo.interop.pymanopt import as_pymanopt, from_pymanopt, problem  # noqa: E402

from ._helpers import UnivariateGaussianChart, fisher_rao_normal  # noqa: E402

DATA = np.random.default_rng(3).normal(1.5, 0.7, size=200)
MLE = np.array([DATA.mean(), DATA.std()])  # population std: the Gaussian MLE


def nll(x):
    m, s = x[0], x[1]
    return B.log(s) + B.mean((DATA - m) ** 2) / (2 * s ** 2)


@pytest.fixture
def gaussian():
    return UnivariateGaussianChart()


# ----------------------------------------------------------------- pymanopt -> infogeo
def test_gd_on_pymanopt_sphere_finds_dominant_eigenvector():
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((50, 50)))
    eig = np.concatenate([np.linspace(0.0, 1.0, 49), [2.0]])
    A = (Q * eig) @ Q.T
    S = from_pymanopt(pymanopt.manifolds.Sphere(50))
    assert S.dim == 50 and S.intrinsic_dim == 49
    x0 = S.random_point(rng=1)
    res = ig.solvers.GradientDescent(0.5, line_search="armijo", grad_tol=1e-9, max_iter=500).minimize(
        S, lambda x: -B.dot(x, B.matmul(A, x)), x0)
    assert res.success
    assert abs(np.dot(res.x, Q[:, -1])) == pytest.approx(1.0, abs=1e-10)
    assert res.fun == pytest.approx(-2.0, abs=1e-10)
    assert np.linalg.norm(res.x) == pytest.approx(1.0, abs=1e-12)


def test_gd_on_pymanopt_product_of_stiefel_and_spd():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((5, 5))
    A = A + A.T
    P = pymanopt.manifolds.Product([pymanopt.manifolds.Stiefel(5, 2), pymanopt.manifolds.SymmetricPositiveDefinite(2)])
    M = from_pymanopt(P)
    assert M.dim == 5 * 2 + 2 * 2
    target = np.array([[2.0, 0.3], [0.3, 1.0]])

    def cost(x):
        X, S = B.reshape(x[:10], (5, 2)), B.reshape(x[10:], (2, 2))
        return -B.trace(B.matmul(B.transpose(X), B.matmul(A, X))) + B.sum((S - target) ** 2)

    res = ig.solvers.GradientDescent(0.2, line_search="armijo", grad_tol=1e-8, max_iter=2000).minimize(
        M, cost, M.random_point(rng=2))
    X, S = M.unflatten(res.x)
    top = np.sort(np.linalg.eigvalsh(A))[-2:].sum()
    assert -res.fun == pytest.approx(top, abs=1e-7)            # Ky Fan: max tr(X^T A X) = sum of top-2 eigenvalues
    np.testing.assert_allclose(X.T @ X, np.eye(2), atol=1e-10)
    np.testing.assert_allclose(S, target, atol=1e-5)


def test_pymanopt_wrapper_rejects_points_off_the_manifold():
    S = from_pymanopt(pymanopt.manifolds.Sphere(3))
    with pytest.raises(ValueError, match="not on"):
        S.point(np.array([1.0, 1.0, 0.0]))
    with pytest.raises(ValueError, match="shape"):
        S.point(np.array([1.0, 0.0]))
    with pytest.raises(TypeError):
        from_pymanopt(UnivariateGaussianChart())


def test_wrapped_pymanopt_metric_inner_and_flat_agree():
    S = from_pymanopt(pymanopt.manifolds.SymmetricPositiveDefinite(2))
    x = S.random_point(rng=4)
    u = S.vector(x, S.projection(x, B.array(np.random.default_rng(5).standard_normal(4))))
    v = S.vector(x, S.projection(x, B.array(np.random.default_rng(6).standard_normal(4))))
    # affine-invariant metric tr(P^-1 U P^-1 V), computed independently
    P, U, V = S.unflatten(x), S.unflatten(u.components), S.unflatten(v.components)
    Pi = np.linalg.inv(P)
    ref = np.trace(Pi @ U @ Pi @ V)
    assert float(S.metric.inner(u, v)) == pytest.approx(ref, rel=1e-10)
    assert float(S.metric.flat(u)(v)) == pytest.approx(ref, rel=1e-10)


# ----------------------------------------------------------------- infogeo -> pymanopt
def test_as_pymanopt_metric_and_gradient(gaussian):
    pm = as_pymanopt(gaussian)
    x = np.array([0.3, 0.5])
    u, v = np.array([1.0, -2.0]), np.array([0.5, 0.25])
    assert pm.inner_product(x, u, v) == pytest.approx((0.5 - 2 * 2 * 0.25) / 0.25)
    egrad = np.array([0.7, -0.1])
    np.testing.assert_allclose(pm.euclidean_to_riemannian_gradient(x, egrad), egrad * np.array([0.25, 0.125]))
    assert pm.dist(x, np.array([1.0, 2.0])) == pytest.approx(fisher_rao_normal(x, [1.0, 2.0]), rel=1e-8)
    y = pm.exp(x, u * 0.1)
    np.testing.assert_allclose(pm.log(x, y), u * 0.1, atol=1e-9)
    with pytest.raises(TypeError):
        as_pymanopt(pymanopt.manifolds.Sphere(3))


def test_riemannian_hessian_matches_second_derivative_along_geodesics(gaussian):
    """<Hess f[v], v> = d^2/dt^2 f(exp_x(t v)) at t = 0 (geodesics by ODE, an independent route)."""
    pm = as_pymanopt(gaussian)
    prob = problem(gaussian, nll)
    x, v = np.array([0.2, 1.3]), np.array([0.4, -0.3])
    hv = pm.euclidean_to_riemannian_hessian(x, prob.euclidean_gradient(x), prob.euclidean_hessian(x, v), v)
    h = 1e-3
    f = [float(nll(pm.exp(x, t * v))) for t in (-h, 0.0, h)]
    second = (f[0] - 2 * f[1] + f[2]) / h ** 2
    assert pm.inner_product(x, hv, v) == pytest.approx(second, rel=1e-5)
    # the plain chart Hessian (no Christoffel term) is measurably different here
    naive = pm.euclidean_to_riemannian_gradient(x, prob.euclidean_hessian(x, v))
    assert abs(pm.inner_product(x, naive, v) - second) > 1e-2 * abs(second)
    # symmetry of the Riemannian Hessian in the metric
    w = np.array([-0.1, 0.6])
    hw = pm.euclidean_to_riemannian_hessian(x, prob.euclidean_gradient(x), prob.euclidean_hessian(x, w), w)
    assert pm.inner_product(x, hv, w) == pytest.approx(pm.inner_product(x, v, hw), rel=1e-10)


@pytest.mark.parametrize("solver", ["SteepestDescent", "ConjugateGradient", "TrustRegions"])
def test_pymanopt_solvers_on_infogeo_manifold_agree_with_infogeo(gaussian, solver):
    np.random.seed(0)
    x0 = np.array([-1.0, 3.0])
    opt = getattr(pymanopt.optimizers, solver)(verbosity=0, min_gradient_norm=1e-10, max_iterations=500)
    res = opt.run(problem(gaussian, nll), initial_point=x0)
    ours = ig.solvers.GradientDescent(step_size=1.0, grad_tol=1e-12, max_iter=200).minimize(gaussian, nll, x0)
    tr = ig.solvers.TrustRegion(grad_tol=1e-12, max_iter=100).minimize(gaussian, nll, x0)
    np.testing.assert_allclose(ours.x, MLE, atol=1e-9)
    np.testing.assert_allclose(tr.x, MLE, atol=1e-9)
    np.testing.assert_allclose(res.point, ours.x, atol=1e-7 if solver != "TrustRegions" else 1e-9)


def test_pymanopt_trust_regions_on_infogeo_gaussian_reaches_the_mle():
    """pymanopt's TrustRegions (Christoffel-corrected Hessian) on a 5-D Gaussian with the Fisher metric."""
    rng = np.random.default_rng(7)
    A = rng.standard_normal((5, 5))
    data = rng.multivariate_normal(rng.standard_normal(5), A @ A.T + np.eye(5), size=400)
    G = ig.Gaussian(dim=5)
    mle = G.point(mean=data.mean(0), cov=np.cov(data.T, bias=True))
    np.random.seed(1)
    res = pymanopt.optimizers.TrustRegions(verbosity=0, min_gradient_norm=1e-11, max_iterations=50).run(
        problem(G, lambda p: -G.log_likelihood(p, data)), initial_point=np.asarray(G.point(mean=np.zeros(5), cov=np.eye(5))))
    np.testing.assert_allclose(res.point, mle, atol=1e-8)
    assert float(G.dist(B.array(res.point), mle)) < 1e-8


def test_infogeo_solvers_on_a_wrapped_sphere_agree_with_pymanopts_trust_regions():
    """The same Rayleigh-quotient problem on the same manifold: pymanopt's own solver is the reference."""
    rng = np.random.default_rng(0)
    n = 10
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    A = (Q * np.concatenate([np.linspace(0.0, 1.0, n - 1), [2.0]])) @ Q.T
    sphere = pymanopt.manifolds.Sphere(n)
    S = from_pymanopt(sphere)
    x0 = S.random_point(rng=1)

    @pymanopt.function.autograd(sphere)
    def rayleigh(x):
        return -x @ A @ x

    np.random.seed(0)
    ref = pymanopt.optimizers.TrustRegions(verbosity=0, min_gradient_norm=1e-10).run(
        pymanopt.Problem(sphere, rayleigh), initial_point=np.asarray(x0))
    for solver in (ig.solvers.TrustRegion(max_iter=200), ig.solvers.ProximalPoint(max_iter=100),
                   ig.solvers.GradientDescent(0.25, line_search="armijo", max_iter=500)):
        res = solver.minimize(S, lambda x: -B.dot(x, B.matmul(A, x)), x0)
        assert res.success, (solver.name, res.message)
        assert res.fun == pytest.approx(ref.cost, abs=1e-10)
        assert abs(np.dot(res.x, ref.point)) == pytest.approx(1.0, abs=1e-9)
        assert np.linalg.norm(res.x) == pytest.approx(1.0, abs=1e-12)
