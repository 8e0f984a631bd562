"""Identities of the geometry core checked on every kind of metric, against finite differences and
dense linear algebra: the musical isomorphism, retractions, exp/log/dist, conjugate gradient, bad input."""
import numpy as np
import pytest

import infogeo as ig
from infogeo.linalg import conjugate_gradient

from .conftest import fd_jacobian, half_plane_metric, rosen

B = ig.backend
X = np.array([0.3, 1.2])


class MatrixFree(ig.Metric):
    """A metric known only through products G v (so ``sharp`` runs conjugate gradient)."""

    has_matrix = False

    def __init__(self, G):
        super().__init__(G.shape[0])
        self.G = G

    def mv(self, x, v):
        return B.matmul(self.G, v)


def _spd(n, cond, seed=0):
    Q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))
    return (Q * np.geomspace(1.0 / cond, 1.0, n)) @ Q.T


METRICS = {
    "matrix": lambda: ig.MatrixMetric(lambda x: B.stack([B.stack([2 + x[0] ** 2, 0.5 + 0 * x[0]]),
                                                         B.stack([0.5 + 0 * x[0], 1 / x[1] ** 2])]), dim=2),
    "pullback": lambda: ig.PullbackMetric(rosen, ig.EuclideanMetric(2)),
    "bregman": lambda: ig.metric_from_divergence(ig.Bregman(lambda x: B.sum(B.exp(x)) + 0.5 * B.sum(x ** 2))),
    "damped": lambda: ig.PullbackMetric(rosen, ig.EuclideanMetric(2)).damped(0.3),
    "matrix-free": lambda: MatrixFree(_spd(2, 10.0)),
}


@pytest.mark.parametrize("kind", METRICS)
def test_sharp_is_the_inverse_of_flat_and_represents_the_covector(kind):
    """sharp(flat(v)) = v, flat(sharp(w)) = w and <u, sharp(w)> = w(u) for every u."""
    G = METRICS[kind]()
    rng = np.random.default_rng(1)
    v = ig.TangentVector(X, rng.standard_normal(2))
    w = ig.Covector(X, rng.standard_normal(2))
    np.testing.assert_allclose(G.sharp(G.flat(v)).components, v.components, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(G.flat(G.sharp(w)).components, w.components, rtol=1e-10, atol=1e-12)
    for _ in range(3):
        u = ig.TangentVector(X, rng.standard_normal(2))
        assert float(G.inner(u, G.sharp(w))) == pytest.approx(float(w(u)), rel=1e-10, abs=1e-12)
    # the inner product is symmetric and positive
    assert float(G.inner(u, v)) == pytest.approx(float(G.inner(v, u)), rel=1e-12)
    assert float(G.norm(v)) > 0


def test_bregman_metric_is_the_finite_difference_hessian_of_its_potential():
    phi = lambda x: B.sum(B.exp(x)) + B.log(1 + x[0] ** 2 * x[1] ** 2)  # noqa: E731
    G = ig.metric_from_divergence(ig.Bregman(phi)).matrix(X)
    hess = fd_jacobian(lambda y: fd_jacobian(lambda z: float(phi(z)), y, h=1e-5), X, h=1e-5)
    np.testing.assert_allclose(G, hess, rtol=1e-5, atol=1e-6)


def test_pullback_metric_is_JT_Gz_J_with_the_jacobian_from_torch():
    """Jacobian by torch autograd (an implementation independent of autograd's) at a numpy point."""
    torch = pytest.importorskip("torch")
    Gz = np.array([[2.0, 0.3], [0.3, 1.0]])
    G = ig.PullbackMetric(rosen, ig.MatrixMetric(lambda z: B.array(Gz, like=z), dim=2)).matrix(X)
    J = torch.autograd.functional.jacobian(
        lambda t: torch.stack([1 - t[0], 10 * (t[1] - t[0] ** 2)]), torch.tensor(X)).numpy()
    np.testing.assert_allclose(G, J.T @ Gz @ J, rtol=1e-13)


def test_matrix_free_sharp_of_an_ill_conditioned_metric_is_accurate():
    """CG stopped after n iterations used to return a vector 70 % off (residual 10x the right-hand side)."""
    G = _spd(60, 1e6)
    metric = MatrixFree(G)
    w = np.random.default_rng(2).standard_normal(60)
    x = np.zeros(60)
    g = metric.sharp(ig.Covector(x, w)).components
    exact = np.linalg.solve(G, w)
    assert np.linalg.norm(g - exact) / np.linalg.norm(exact) < 1e-8


def test_matrix_free_sharp_warns_when_conjugate_gradient_cannot_converge(monkeypatch):
    import infogeo.geometry.metric as metric_module
    monkeypatch.setattr(metric_module, "CG_MAX_ITER", 5)
    with pytest.warns(RuntimeWarning, match="residual"):
        MatrixFree(_spd(30, 1e6)).sharp(ig.Covector(np.zeros(30), np.ones(30)))


def test_conjugate_gradient_refuses_nan_instead_of_returning_it():
    with pytest.raises(ValueError, match="right-hand side"):
        conjugate_gradient(lambda v: 2 * v, np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="NaN"):
        conjugate_gradient(lambda v: v * np.nan, np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="damping"):
        conjugate_gradient(lambda v: v, np.ones(2), damping=float("nan"))


def _manifolds():
    H = ig.Manifold(2, half_plane_metric(), domain=lambda x: x[1] > 0)
    return {"euclidean": ig.Euclidean(2), "half-plane": H,
            "pullback": ig.Euclidean(2).with_metric(ig.PullbackMetric(rosen, ig.EuclideanMetric(2)))}


@pytest.mark.parametrize("name", ["euclidean", "half-plane", "pullback"])
def test_retraction_and_exp_are_first_order_and_log_exp_dist_agree(name):
    M = _manifolds()[name]
    x, v = np.array([0.3, 1.2]), np.array([0.25, -0.2])
    h = 1e-5
    for move in (M.retract, M.exp):
        plus, minus = move(x, M.vector(x, h * v)), move(x, M.vector(x, -h * v))
        np.testing.assert_allclose((plus - minus) / (2 * h), v, atol=1e-7)   # d/dt R(x, t v) at 0 = v
        np.testing.assert_allclose(move(x, M.vector(x, 0 * v)), x, atol=1e-14)
    y = M.exp(x, M.vector(x, v))
    np.testing.assert_allclose(M.log(x, y).components, v, atol=1e-8)
    assert float(M.dist(x, y)) == pytest.approx(float(M.metric.norm(M.vector(x, v))), rel=1e-8)
    assert float(M.dist(x, y)) == pytest.approx(float(M.dist(y, x)), rel=1e-8)
    z = np.array([0.1, 0.9])
    assert float(M.dist(x, z)) <= float(M.dist(x, y)) + float(M.dist(y, z)) + 1e-10
    # the geodesic through both ends has constant speed: halves of it have half the length
    mid = M.geodesic(x, y)(0.5)
    assert float(M.dist(x, mid)) == pytest.approx(0.5 * float(M.dist(x, y)), rel=1e-7)


def test_retraction_of_a_wrapped_pymanopt_sphere_is_first_order():
    pymanopt = pytest.importorskip("pymanopt")
    from infogeo.interop.pymanopt import from_pymanopt
    S = from_pymanopt(pymanopt.manifolds.Sphere(4))
    x = S.random_point(rng=0)
    v = S.projection(x, B.array(np.random.default_rng(1).standard_normal(4)))
    h = 1e-6
    d = (S.retract(x, S.vector(x, h * v)) - S.retract(x, S.vector(x, -h * v))) / (2 * h)
    np.testing.assert_allclose(d, v, atol=1e-8)


def test_a_point_off_a_wrapped_pymanopt_manifold_does_not_belong():
    pymanopt = pytest.importorskip("pymanopt")
    from infogeo.interop.pymanopt import from_pymanopt
    S = from_pymanopt(pymanopt.manifolds.Sphere(3))
    assert S.belongs(np.array([0.0, 0.6, 0.8]))
    assert not S.belongs(np.array([1.0, 1.0, 0.0]))      # used to say True: only point() checked
    with pytest.raises(ValueError, match="not on"):
        ig.solvers.GradientDescent(0.1).minimize(S, lambda x: B.sum(x), np.array([1.0, 1.0, 0.0]))


@pytest.mark.parametrize("kind", ["matrix", "pullback", "bregman"])
def test_metric_operations_do_not_modify_the_callers_arrays(kind):
    G = METRICS[kind]()
    x, comps = X.copy(), np.array([0.4, -1.1])
    v, w = ig.TangentVector(x, comps), ig.Covector(x, comps)
    G.sharp(w, damping=0.1), G.flat(v), G.inner(v, v), G.matrix(x), G.mv(x, comps)
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(comps, [0.4, -1.1])


def test_bad_damping_is_refused():
    w = ig.Covector(X, np.ones(2))
    for G in (ig.EuclideanMetric(2), METRICS["matrix"]()):
        for bad in (-1.0, float("nan")):
            with pytest.raises(ValueError, match="damping"):
                G.sharp(w, damping=bad)


def test_batched_log_dist_and_geodesic_of_a_metric_given_point_by_point(backend_name):
    """A metric function written for one point: batches are solved pair by pair (they used to fail with a
    broadcasting error deep in the collocation code), against the half-plane's closed-form distance."""
    from .conftest import as_backend, half_plane_dist
    H = ig.Manifold(2, half_plane_metric(), domain=lambda x: x[1] > 0)
    Xb = np.array([[0.0, 1.0], [0.5, 2.0], [-0.3, 0.6]])
    Yb = np.array([[1.0, 1.5], [0.2, 0.7], [0.4, 0.9]])
    if backend_name == "torch":  # torch metrics are solved by shooting, not collocation: two pairs suffice
        Xb, Yb = Xb[:2], Yb[:2]
    x, y = as_backend(Xb, backend_name), as_backend(Yb, backend_name)
    d = B.to_numpy(H.dist(x, y))
    np.testing.assert_allclose(d, [half_plane_dist(a, b_) for a, b_ in zip(Xb, Yb)], rtol=1e-9)
    v = H.log(x, y)
    assert type(v.components) is type(x) and tuple(v.components.shape) == Yb.shape
    np.testing.assert_allclose(B.to_numpy(H.exp(x, v)), Yb, atol=1e-9)
    if backend_name == "torch":
        return
    # one start, several ends: the leading axes broadcast
    np.testing.assert_allclose(B.to_numpy(H.dist(x[0], y)), [half_plane_dist(Xb[0], b_) for b_ in Yb], rtol=1e-9)
    path = H.geodesic(x, y)
    assert tuple(path(0.5).shape) == (3, 2) and tuple(path(np.array([0.0, 0.5, 1.0])).shape) == (3, 3, 2)
    np.testing.assert_allclose(B.to_numpy(path(1.0)), Yb, atol=1e-9)
    for i in range(3):
        np.testing.assert_allclose(B.to_numpy(path(0.5))[i], B.to_numpy(H.geodesic(x[i], y[i])(0.5)), atol=1e-12)


def test_a_cost_that_is_not_one_real_number_is_refused_by_name(backend_name):
    from .conftest import as_backend
    x0 = as_backend([0.5, 1.0], backend_name)
    with pytest.raises(ValueError, match=r"cost must return a scalar.*shape \(2,\)"):
        ig.solvers.GradientDescent(0.1).minimize(ig.Euclidean(2), lambda x: x ** 2, x0)
    with pytest.raises(TypeError, match="cost must return a real number"):
        ig.Euclidean(2).differential(lambda x: "cost", x0)


@pytest.mark.parametrize("make", [lambda: ig.Gaussian(dim=2), lambda: ig.Gaussian(dim=2, chart="natural"),
                                  lambda: ig.Categorical(3), lambda: ig.Categorical(3, chart="natural"),
                                  lambda: ig.Bernoulli()],
                         ids=["gaussian", "gaussian-natural", "categorical", "categorical-natural", "bernoulli"])
def test_statistical_manifolds_move_to_first_order_and_invert_exp(make):
    M = make()
    x = M.random_point(np.random.default_rng(1))
    v = 0.1 * np.random.default_rng(0).standard_normal(M.dim)
    h = 1e-6
    for move in (M.retract, M.exp):
        d = (B.to_numpy(move(x, M.vector(x, h * v))) - B.to_numpy(move(x, M.vector(x, -h * v)))) / (2 * h)
        np.testing.assert_allclose(d, v, atol=1e-8)
    y = M.exp(x, M.vector(x, v))
    np.testing.assert_allclose(B.to_numpy(M.log(x, y).components), v, atol=1e-10)
    assert float(M.dist(x, y)) == pytest.approx(float(M.metric.norm(M.vector(x, v))), rel=1e-10)
