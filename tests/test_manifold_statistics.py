"""Fréchet means and parallel transport on manifolds with exp and log, against independent references."""
import numpy as np
import pytest

import infogeo as ig
from infogeo.geometry import statistics as st
from infogeo.budget import BudgetExceededError

B = ig.backend

# (name, manifold): every family with a closed-form transport, in its default chart and another one
CLOSED = {
    "univariate": lambda: ig.Gaussian(1),
    "univariate-natural": lambda: ig.Gaussian(1).in_chart("natural"),
    "diagonal": lambda: ig.Gaussian(2, covariance="diagonal"),
    "zero_mean": lambda: ig.Gaussian(2, covariance="zero_mean"),
    "zero_mean-natural": lambda: ig.Gaussian(2, covariance="zero_mean").in_chart("natural"),
    "categorical": lambda: ig.Categorical(3),
    "categorical-natural": lambda: ig.Categorical(3).in_chart("natural"),
    "bernoulli": lambda: ig.Bernoulli(),
    "independence": lambda: ig.IndependenceModel(2),
    "fixed": lambda: ig.Gaussian(2, covariance="fixed", cov=np.array([[2.0, 0.5], [0.5, 1.0]])),
}

# the closed form is checked against the ODE on one case per formula (the ODE costs ~1 s each)
ODE_CHECKED = {"univariate-natural", "diagonal", "zero_mean", "categorical", "independence"}


def _np(a):
    return np.asarray(B.to_numpy(a.components if hasattr(a, "components") else a), dtype=float)


def _pair(M, seed):
    rng = np.random.default_rng(seed)
    p, q = M.random_point(rng), M.random_point(rng)
    return p, q, rng


@pytest.mark.parametrize("name", sorted(CLOSED))
def test_closed_transport_equals_the_ode_and_preserves_inner_products(name):
    M = CLOSED[name]()
    p, q, rng = _pair(M, 1)
    assert M.dist(p, q) > 1e-3
    u, v = (M.vector(p, rng.standard_normal(M.dim)) for _ in range(2))
    tu, tv = M.transport(p, q, u), M.transport(p, q, v)
    assert np.allclose(_np(tu.base), _np(q))
    for a, b, ta, tb in ((u, v, tu, tv), (u, u, tu, tu), (v, v, tv, tv)):
        ref = float(M.metric.inner(a, b))
        np.testing.assert_allclose(float(M.metric.inner(ta, tb)), ref, rtol=1e-10, atol=1e-12 * abs(ref) + 1e-14)
    if name in ODE_CHECKED:
        ode = _np(st._transport_ode(M, p, q, u.components))
        np.testing.assert_allclose(_np(tu), ode, rtol=1e-8, atol=1e-9 * np.abs(ode).max())
    # the velocity of the geodesic is transported to minus the log at the far end
    np.testing.assert_allclose(_np(M.transport(p, q, M.log(p, q))), -_np(M.log(q, p)), rtol=1e-8,
                               atol=1e-10 * np.abs(_np(M.log(q, p))).max())


@pytest.mark.parametrize("name", ["univariate", "zero_mean", "categorical"])
def test_transport_there_and_back_and_around_a_loop(name):
    M = CLOSED[name]()
    p, q, rng = _pair(M, 2)
    r = M.random_point(rng)
    v = M.vector(p, rng.standard_normal(M.dim))
    back = M.transport(q, p, M.transport(p, q, v))
    np.testing.assert_allclose(_np(back), _np(v), rtol=1e-8, atol=1e-9 * np.abs(_np(v)).max())
    # around the geodesic triangle p -> q -> r -> p: the norm is kept (the vector turns by the holonomy)
    w = M.transport(r, p, M.transport(q, r, M.transport(p, q, v)))
    np.testing.assert_allclose(float(M.metric.norm(w)), float(M.metric.norm(v)), rtol=1e-8)


@pytest.mark.slow   # four ODE transports with autodiff connection terms: about 5 s
def test_ode_transport_of_the_full_gaussian_keeps_inner_products():
    M = ig.Gaussian(2)
    p, q, rng = _pair(M, 3)
    u, v = (M.vector(p, rng.standard_normal(M.dim)) for _ in range(2))
    tu, tv = M.transport(p, q, u), M.transport(p, q, v)
    np.testing.assert_allclose(float(M.metric.inner(tu, tv)), float(M.metric.inner(u, v)), rtol=1e-8)
    # on the zero-mean sub-family (mu = 0 is totally geodesic) it matches the SPD closed form
    Z = ig.Gaussian(2, covariance="zero_mean")
    P, Q = Z.random_point(rng), Z.random_point(rng)
    V = rng.standard_normal(3)
    full = lambda s: np.concatenate([np.zeros(2), s])  # noqa: E731
    w = M.transport(full(P), full(Q), M.vector(full(P), full(V)))
    np.testing.assert_allclose(_np(w), full(_np(Z.transport(P, Q, Z.vector(P, V)))), rtol=1e-7, atol=1e-9)


def test_transport_batches_and_torch():
    torch = pytest.importorskip("torch")
    M = ig.Gaussian(2, covariance="diagonal")
    rng = np.random.default_rng(4)
    P = np.stack([M.random_point(rng) for _ in range(3)])
    Q = np.stack([M.random_point(rng) for _ in range(3)])
    V = rng.standard_normal((3, M.dim))
    batch = _np(M.transport(P, Q, M.vector(P, V)))
    loop = np.stack([_np(M.transport(P[i], Q[i], M.vector(P[i], V[i]))) for i in range(3)])
    np.testing.assert_allclose(batch, loop, rtol=1e-13)
    Pt, Qt, Vt = (torch.tensor(a, requires_grad=True) for a in (P, Q, V))
    out = M.transport(Pt, Qt, M.vector(Pt, Vt)).components
    np.testing.assert_allclose(out.detach().numpy(), batch, rtol=1e-12)
    out.sum().backward()
    assert torch.isfinite(Qt.grad).all()


def test_transport_rejects_vectors_of_another_point():
    M = ig.Gaussian(1)
    p, q, _ = _pair(M, 5)
    with pytest.raises(ValueError, match="another base point"):
        M.transport(p, q, M.vector(q, np.ones(2)))
    with pytest.raises(TypeError, match="TangentVector"):
        M.transport(p, q, np.ones(2))


# ------------------------------------------------------------------ Fréchet means
def _gradient_norm(M, m, X, w):
    V = _np(M.log(np.broadcast_to(m, X.shape).copy(), X))
    g = w @ V
    return float(np.sqrt(g @ _np(M.metric.matrix(m)) @ g))


@pytest.mark.parametrize("name", ["univariate", "zero_mean", "categorical", "full"])
def test_frechet_mean_is_stationary_and_the_midpoint_is_the_geodesic_at_half(name):
    M = ig.Gaussian(2) if name == "full" else CLOSED[name]()
    rng = np.random.default_rng(6)
    X = np.stack([M.random_point(rng) for _ in range(5)])
    w = rng.uniform(0.5, 1.5, len(X))
    m, info = M.frechet_mean(X, w, method="gradient", return_info=True)
    assert info.success and info.nit >= 1
    scale = np.sqrt(w / w.sum() @ _np(M.dist(np.broadcast_to(m, X.shape).copy(), X)) ** 2)
    assert _gradient_norm(M, _np(m), X, w / w.sum()) <= 1e-9 * scale
    mid = M.frechet_mean(X[:2], method="gradient", tol=1e-12)
    np.testing.assert_allclose(_np(mid), _np(M.geodesic(X[0], X[1])(0.5)), rtol=1e-8, atol=1e-10)


def test_frechet_mean_closed_forms_agree_with_the_descent():
    rng = np.random.default_rng(7)
    for M in (ig.Euclidean(3), CLOSED["fixed"](), CLOSED["independence"](), CLOSED["bernoulli"](),
              ig.Gaussian(1)):
        X = np.stack([M.random_point(rng) for _ in range(4)])
        w = rng.uniform(0.5, 1.5, 4)
        np.testing.assert_allclose(_np(M.frechet_mean(X, w)), _np(M.frechet_mean(X, w, method="gradient",
                                                                                   tol=1e-12)),
                                   rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(_np(M.frechet_mean(X[:2], [1, 3])), _np(M.geodesic(X[0], X[1])(0.75)),
                                   rtol=1e-9, atol=1e-11)


def test_frechet_mean_of_univariate_gaussians_against_geomstats_poincare_half_plane():
    pytest.importorskip("geomstats")
    from geomstats.geometry.hyperboloid import Hyperboloid  # noqa: F401  (the backend must load)
    from geomstats.geometry.poincare_half_space import PoincareHalfSpace
    from geomstats.learning.frechet_mean import FrechetMean
    rng = np.random.default_rng(8)
    mu, sigma = rng.normal(0, 2, 7), rng.uniform(0.3, 3, 7)
    w = rng.uniform(0.2, 1.0, 7)
    G = ig.Gaussian(1)
    ours = _np(G.frechet_mean(np.stack([mu, sigma ** 2], axis=1), w, tol=1e-13))
    # N(mu, sigma^2) -> (mu / sqrt 2, sigma): the Fisher metric is twice the half-plane metric (same mean)
    space = PoincareHalfSpace(2)
    est = FrechetMean(space)
    est.set(max_iter=1000, epsilon=1e-14, init_step_size=1.0)
    theirs = est.fit(np.stack([mu / np.sqrt(2), sigma], axis=1), weights=w).estimate_
    theirs = np.array([np.sqrt(2) * theirs[0], theirs[1] ** 2])
    # geomstats stops at a gradient of about 1e-8 (its own criterion), ours at 1e-13 relative: compare at 2e-6,
    # and check that ours is the more stationary of the two
    np.testing.assert_allclose(ours, theirs, rtol=2e-6)
    X, wn = np.stack([mu, sigma ** 2], axis=1), w / w.sum()
    assert _gradient_norm(G, ours, X, wn) <= _gradient_norm(G, theirs, X, wn)


def test_frechet_mean_of_zero_mean_gaussians_against_geomstats_spd():
    pytest.importorskip("geomstats")
    from geomstats.geometry.spd_matrices import SPDAffineMetric, SPDMatrices
    from geomstats.learning.frechet_mean import FrechetMean
    rng = np.random.default_rng(9)
    mats = []
    for _ in range(6):
        A = rng.standard_normal((3, 3))
        mats.append(A @ A.T + 0.5 * np.eye(3))
    mats = np.stack(mats)
    Z = ig.Gaussian(3, covariance="zero_mean")
    ours = _np(Z.cov(Z.frechet_mean(Z.point(cov=mats), tol=1e-13)))
    space = SPDMatrices(3, equip=False)
    space.equip_with_metric(SPDAffineMetric)
    est = FrechetMean(space)
    est.set(max_iter=1000, epsilon=1e-14)
    theirs = est.fit(mats).estimate_   # the factor 1/2 of the Fisher metric does not move the mean
    np.testing.assert_allclose(ours, theirs, rtol=2e-6)   # geomstats' stopping rule: a gradient of ~1e-8


def test_frechet_mean_batches_torch_and_errors():
    torch = pytest.importorskip("torch")
    M = ig.Gaussian(1)
    rng = np.random.default_rng(10)
    X = np.stack([np.stack([M.random_point(rng) for _ in range(4)]) for _ in range(2)])   # (2, 4, 2)
    means = _np(M.frechet_mean(X))
    np.testing.assert_allclose(means[1], _np(M.frechet_mean(X[1])), rtol=1e-12)
    mt = M.frechet_mean(torch.tensor(X[0]))
    assert isinstance(mt, torch.Tensor)
    np.testing.assert_allclose(mt.numpy(), means[0], rtol=1e-10)
    with pytest.raises(ValueError, match="weights"):
        M.frechet_mean(X[0], [1.0, -1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="shape"):
        M.frechet_mean(X[0, 0])
    with pytest.raises(ValueError, match="outside|positive|variance"):
        M.frechet_mean(np.array([[0.0, 1.0], [0.0, -1.0]]))
    with pytest.raises(BudgetExceededError, match="Fréchet mean"):
        M.frechet_mean(X[0], method="gradient", max_iter=1, tol=1e-15)
    m, info = M.frechet_mean(X[0], method="gradient", max_iter=1, tol=1e-15, return_info=True)
    assert not info.success and info.status == 1 and np.isfinite(info.fun)


@pytest.mark.slow   # the ODE transport of a graphical model (generic geodesics): about 7 s
def test_transport_in_a_gaussian_graphical_model_keeps_inner_products():
    P = np.array([[1, 1, 0], [1, 1, 1], [0, 1, 1]], bool)
    G = ig.Gaussian(3, precision_pattern=P).in_chart("natural")
    rng = np.random.default_rng(11)
    p = G.random_point(rng)
    q = G.natural_point(G.to_natural(p) + 0.1 * rng.standard_normal(G.dim))
    u, v = (G.vector(p, rng.standard_normal(G.dim)) for _ in range(2))
    tu, tv = G.transport(p, q, u), G.transport(p, q, v)
    np.testing.assert_allclose(float(G.metric.inner(tu, tv)), float(G.metric.inner(u, v)), rtol=1e-8)


@pytest.mark.parametrize("shape", [(0, 2), (3, 0, 2), (0, 3, 2)])
def test_frechet_mean_of_no_points_is_a_clear_error(shape):
    """It raised ZeroDivisionError (found by an independent QA sweep)."""
    for method in ("auto", "gradient"):
        with pytest.raises(ValueError, match="no points"):
            ig.Gaussian(1).frechet_mean(np.ones(shape), method=method)


@pytest.mark.parametrize("kwargs, error", [
    (dict(weights="abc"), TypeError), (dict(weights=np.ones(3) + 1j), TypeError),
    (dict(weights=np.ones((3, 1))), ValueError), (dict(tol=float("nan")), ValueError),
    (dict(tol=-1.0), ValueError), (dict(tol=0.0), ValueError), (dict(tol="a"), TypeError)])
def test_frechet_mean_refuses_bad_weights_and_tol(kwargs, error):
    """Found by an independent fault-battery sweep: complex or (n, 1) weights were used silently, a NaN tol
    ran out the budget."""
    X = np.array([[0.0, 1.0], [2.0, 0.25], [1.0, 4.0]])
    with pytest.raises(error, match="weights|tol"):
        ig.stats.frechet_mean(ig.Gaussian(1), X, **kwargs)


def test_weights_near_the_largest_float_are_normalised_without_overflow():
    """Weights of 1e308 each passed validation, then their sum overflowed: the mean came back as the first point
    with success=True."""
    G = ig.Gaussian(1)
    X = np.array([[0.0, 1.0], [0.0, 4.0], [0.0, 0.25], [0.0, 9.0]])
    m, info = G.frechet_mean(X, np.full(4, 1e308), return_info=True)
    assert info.success and np.allclose(m, G.frechet_mean(X), rtol=1e-12, atol=1e-14)
