"""Metrics: pullback against finite differences, the musical isomorphism, divergences, bad input."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import infogeo as ig
from .conftest import as_backend, fd_jacobian, rosen

B = ig.backend
RNG = np.random.default_rng(0)


def spd_output_metric(dim=3):
    """A point-dependent SPD output metric G_z(z) = I + z z^T (not the identity, so the test bites)."""
    return ig.MatrixMetric(lambda z: B.eye(dim, like=z) + B.outer(z, z), dim=dim)


def net(x):
    """A small nonlinear map R^4 -> R^3."""
    return B.stack([B.tanh(x[0] + 2 * x[1]), x[2] * x[3] - x[0], B.sin(x[1]) + x[3] ** 2])


@pytest.mark.parametrize("seed", range(5))
def test_pullback_matrix_equals_JT_Gz_J_by_finite_differences(seed, backend_name):
    x_np = np.random.default_rng(seed).standard_normal(4)
    Gz = spd_output_metric()
    metric = ig.PullbackMetric(net, Gz)
    J = fd_jacobian(lambda y: B.to_numpy(net(y)), x_np)
    z = B.to_numpy(net(x_np))
    expected = J.T @ (np.eye(3) + np.outer(z, z)) @ J
    got = B.to_numpy(metric.matrix(as_backend(x_np, backend_name)))
    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < 1e-6


@pytest.mark.parametrize("seed", range(5))
def test_pullback_matrix_free_product_equals_dense(seed, backend_name):
    rng = np.random.default_rng(seed)
    x, v = as_backend(rng.standard_normal(4), backend_name), as_backend(rng.standard_normal(4), backend_name)
    metric = ig.PullbackMetric(net, spd_output_metric())
    dense = B.to_numpy(metric.matrix(x)) @ B.to_numpy(v)
    np.testing.assert_allclose(B.to_numpy(metric.mv(x, v)), dense, rtol=1e-12, atol=1e-12)


def test_pullback_of_euclidean_is_gauss_newton():
    x = np.array([-1.5, 2.0])
    G = ig.PullbackMetric(rosen, ig.EuclideanMetric(2)).matrix(x)
    J = np.array([[-1.0, 0.0], [-20 * x[0], 10.0]])
    np.testing.assert_allclose(G, J.T @ J, rtol=1e-14)


def random_spd(rng, n):
    A = rng.standard_normal((n, n))
    return A @ A.T + 0.1 * np.eye(n)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(0, 2 ** 31 - 1))
def test_sharp_and_flat_are_inverse(n, seed):
    rng = np.random.default_rng(seed)
    A = random_spd(rng, n)
    metric = ig.MatrixMetric(lambda x: B.array(A), dim=n)
    x = rng.standard_normal(n)
    v = ig.TangentVector(x, rng.standard_normal(n))
    w = ig.Covector(x, rng.standard_normal(n))
    cond = np.linalg.cond(A)
    np.testing.assert_allclose(metric.sharp(metric.flat(v)).components, v.components,
                               rtol=1e-10 * cond, atol=1e-10 * cond)
    np.testing.assert_allclose(metric.flat(metric.sharp(w)).components, w.components,
                               rtol=1e-10, atol=1e-10 * np.abs(w.components).max())
    # the defining property of sharp: <w#, u> = w(u)
    u = ig.TangentVector(x, rng.standard_normal(n))
    assert float(metric.inner(metric.sharp(w), u)) == pytest.approx(float(w(u)), rel=1e-8, abs=1e-8 * cond)


def test_sharp_by_conjugate_gradient_matches_dense(backend_name):
    x = as_backend(np.array([0.2, -0.3, 0.5, 1.0]), backend_name)
    dense = ig.PullbackMetric(net, spd_output_metric()).damped(1e-2)
    mv_only = ig.PullbackMetric(net, spd_output_metric()).damped(1e-2)
    mv_only.has_matrix = False
    w = ig.Covector(x, as_backend(np.array([1.0, -2.0, 0.5, 0.3]), backend_name))
    np.testing.assert_allclose(B.to_numpy(mv_only.sharp(w).components),
                               B.to_numpy(dense.sharp(w).components), rtol=1e-8)


def test_metric_from_squared_euclidean_divergence_is_identity(backend_name):
    x = as_backend(np.array([0.3, -1.2, 2.0]), backend_name)
    via_autodiff = ig.metric_from_divergence(lambda u, w: 0.5 * B.sum((u - w) ** 2))
    np.testing.assert_allclose(B.to_numpy(via_autodiff.matrix(x)), np.eye(3), atol=1e-14)
    np.testing.assert_allclose(B.to_numpy(ig.metric_from_divergence(ig.SquaredEuclidean()).matrix(x)), np.eye(3))


def test_metric_from_bregman_divergence_is_hessian_of_phi(backend_name):
    x_np = np.array([0.3, -1.2, 2.0])
    phi = lambda y: B.sum(B.exp(y)) + B.logsumexp(y)  # noqa: E731
    p = np.exp(x_np) / np.exp(x_np).sum()
    expected = np.diag(np.exp(x_np)) + np.diag(p) - np.outer(p, p)  # closed-form Hessian of phi
    x = as_backend(x_np, backend_name)
    rho = ig.Bregman(phi)
    generic = ig.metric_from_divergence(lambda u, w: rho(u, w))  # Hessian of D_phi by autodiff
    np.testing.assert_allclose(B.to_numpy(generic.matrix(x)), expected, rtol=1e-10)
    np.testing.assert_allclose(B.to_numpy(ig.metric_from_divergence(rho).matrix(x)), expected, rtol=1e-12)
    v = as_backend(np.array([1.0, 0.5, -0.25]), backend_name)
    np.testing.assert_allclose(B.to_numpy(generic.mv(x, v)), expected @ B.to_numpy(v), rtol=1e-10)
    assert float(B.to_numpy(rho(x, x))) == pytest.approx(0.0, abs=1e-14)


def test_not_positive_definite_metric_needs_damping():
    metric = ig.MatrixMetric(lambda x: B.array([[1.0, 0.0], [0.0, -0.5]]), dim=2)
    w = ig.Covector(np.zeros(2), np.array([1.0, 1.0]))
    with pytest.raises(ig.NotPositiveDefiniteError, match="not positive definite.*damping"):
        metric.sharp(w)
    singular = ig.MatrixMetric(lambda x: B.array([[1.0, 0.0], [0.0, 0.0]]), dim=2)
    with pytest.raises(ValueError, match="positive definite"):
        singular.sharp(w)
    np.testing.assert_allclose(singular.sharp(w, damping=1.0).components, [0.5, 1.0])


def test_conjugate_gradient_rejects_indefinite_operator():
    A = np.diag([1.0, -1.0])
    with pytest.raises(ig.NotPositiveDefiniteError):
        ig.linalg.conjugate_gradient(lambda v: A @ v, np.array([1.0, 1.0]))


def test_bad_components_are_rejected_with_clear_errors():
    metric = ig.EuclideanMetric(3)
    x = np.zeros(3)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        metric.sharp(ig.Covector(x, np.ones(2)))
    with pytest.raises(ValueError, match="NaN"):
        metric.sharp(ig.Covector(x, np.array([1.0, np.nan, 0.0])))
    with pytest.raises(TypeError, match="did you mean flat"):
        metric.sharp(ig.TangentVector(x, np.ones(3)))
    with pytest.raises(TypeError, match="did you mean sharp"):
        metric.flat(ig.Covector(x, np.ones(3)))
    with pytest.raises(ValueError, match="damping"):
        metric.sharp(ig.Covector(x, np.ones(3)), damping=-1.0)


def test_pullback_output_shape_mismatch_is_reported():
    metric = ig.PullbackMetric(net, ig.EuclideanMetric(2))
    with pytest.raises(ValueError, match=r"output has shape \(3,\).*\(2,\)"):
        metric.matrix(np.zeros(4))


def test_metric_nan_matrix_is_reported():
    metric = ig.MatrixMetric(lambda x: B.array([[np.nan, 0.0], [0.0, 1.0]]), dim=2)
    with pytest.raises(ValueError, match="NaN"):
        metric.sharp(ig.Covector(np.zeros(2), np.ones(2)))


def test_matrix_metric_of_a_point_function_evaluates_batches_point_by_point(backend_name):
    """The half-plane function reads x[1] as a coordinate; on a batch of two points it used to read the
    second point instead and return a wrong (but well-shaped) matrix: flat gave [[4, 0], [0, 4]]."""
    from .conftest import half_plane_dist, half_plane_metric
    G = half_plane_metric()
    X = as_backend([[0.0, 1.0], [0.5, 2.0]], backend_name)
    V = as_backend([[1.0, 0.0], [1.0, 0.5]], backend_name)
    flat = B.to_numpy(G.flat(ig.TangentVector(X, V)).components)
    np.testing.assert_allclose(flat, [[1.0, 0.0], [0.25, 0.125]], rtol=1e-14)
    np.testing.assert_allclose(B.to_numpy(G.sharp(ig.Covector(X, V)).components), [[1.0, 0.0], [4.0, 2.0]],
                               rtol=1e-14)
    assert tuple(G.matrix(X).shape) == (2, 2, 2)
    # a function that handles batches itself may say so, and gives the same
    Gv = ig.MatrixMetric(lambda x: B.einsum("...,ij->...ij", 1 / x[..., 1] ** 2, B.eye(2, like=x)), dim=2,
                         vectorized=True)
    np.testing.assert_allclose(B.to_numpy(Gv.flat(ig.TangentVector(X, V)).components), flat, rtol=1e-14)
    if backend_name == "numpy":   # and its geodesics (collocation over batches of nodes) are the half-plane's
        x, y = np.array([0.3, 1.0]), np.array([1.5, 0.4])
        v = Gv.log(x, y)
        assert float(np.sqrt(v @ Gv.matrix(x) @ v)) == pytest.approx(half_plane_dist(x, y), rel=1e-9)
    with pytest.raises(TypeError, match="function"):
        ig.MatrixMetric(np.eye(2), dim=2)


@pytest.mark.parametrize("bad, error", [
    (np.array([np.nan, 0.0]), ValueError), (np.array([1 + 1j, 0.0]), TypeError),
    (np.array([1.0, 2.0, 3.0]), ValueError), (np.float64(1.0), ValueError), (None, TypeError)])
@pytest.mark.parametrize("metric", [ig.Gaussian(1).metric, ig.EuclideanMetric(2),
                                    ig.DampedMetric(ig.Gaussian(1).metric, 0.1)])
def test_mv_and_solve_validate_the_vector(metric, bad, error):
    """Found by an independent fault-battery sweep: NaN in -> NaN out, complex accepted, raw matmul errors."""
    p = np.array([0.3, 1.5])
    with pytest.raises(error, match="vector|right-hand side"):
        metric.mv(p, bad)
    with pytest.raises(error, match="vector|right-hand side"):
        metric.solve(p, bad)


@pytest.mark.parametrize("make, error", [
    (lambda: ig.EuclideanMetric(-1), ValueError), (lambda: ig.EuclideanMetric("x"), TypeError),
    (lambda: ig.EuclideanMetric(1.5), ValueError), (lambda: ig.EuclideanMetric(2).matrix(None), TypeError),
    (lambda: ig.DampedMetric(ig.EuclideanMetric(2), np.inf), ValueError),
    (lambda: ig.DampedMetric(ig.EuclideanMetric(2), "a"), TypeError),
    (lambda: ig.Euclidean(2).metric.sharp(ig.Covector(np.zeros(2), np.ones(2)), damping=np.inf), ValueError),
    (lambda: ig.Gaussian(1).metric.sharp(ig.Covector(np.array([0.3, 1.5]), np.ones(2)), damping="a"), TypeError),
    (lambda: ig.MatrixMetric(lambda x: np.array([[1.0, 2.0], [0.0, 1.0]]), 2).matrix(np.zeros(2)), ValueError)])
def test_bad_dimension_point_damping_or_matrix_is_refused(make, error):
    """Found by an independent fault-battery sweep: each was accepted (or gave inf/NaN, or a raw TypeError)."""
    with pytest.raises(error, match="dim|point|damping|symmetric"):
        make()


def test_a_rounding_asymmetry_is_accepted_and_half_precision_upcast():
    G = np.array([[2.0, 1.0], [1.0 + 1e-13, 3.0]])
    ig.MatrixMetric(lambda x: G, 2).matrix(np.zeros(2))
    g1 = ig.Gaussian(1)
    p = np.array([0.3, 1.5])
    v = g1.metric.sharp(g1.covector(p, np.array([0.1, 0.1], dtype=np.float16)))
    np.testing.assert_allclose(v.components, g1.metric.sharp(g1.covector(p, np.array([0.1, 0.1]))).components,
                               rtol=1e-3)


@pytest.mark.parametrize("u, w, error", [
    (np.array([1 + 1j, 0.0]), np.zeros(2), TypeError), (np.array([np.nan, 0.0]), np.zeros(2), ValueError),
    (np.zeros(3), np.zeros(2), ValueError), (None, np.zeros(2), TypeError)])
@pytest.mark.parametrize("rho", [ig.SquaredEuclidean(), ig.Bregman(lambda x: B.sum(x ** 4))])
def test_a_divergence_validates_its_arguments(rho, u, w, error):
    """Found by an independent fault-battery sweep: a complex value, NaN or a raw broadcast error came out."""
    with pytest.raises(error, match="u|w"):
        rho(u, w)
