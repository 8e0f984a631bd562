"""Closed-form Fisher-Rao geometry: distances, exp/log, geodesics, against independent references."""
import numpy as np
import pytest

import infogeo as ig
from infogeo import backend as B
from infogeo.geometry import geodesics as generic
from infogeo.statistical import FullGaussian

from .conftest import make, points

CLOSED = ["bernoulli", "categorical3", "independence2", "gauss1", "gauss2", "diag2", "fixed2", "zeromean2"]


def test_univariate_gaussian_distance_worked_number():
    G = ig.Gaussian(dim=1)
    d = G.dist(G.point(mean=0.0, std=1.0), G.point(mean=1.0, std=2.0))
    assert d == pytest.approx(np.sqrt(2) * np.arccosh(1.375), rel=1e-14)
    assert d == pytest.approx(1.189380931, abs=1e-9)


def test_categorical_distance_is_twice_the_bhattacharyya_angle():
    C = ig.Categorical(4)
    rng = np.random.default_rng(0)
    for _ in range(5):
        p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
        d = C.dist(C.point(probs=p), C.point(probs=q))
        assert d == pytest.approx(2 * np.arccos(np.sum(np.sqrt(p * q))), rel=1e-12)


def test_full_gaussian_shooting_in_one_dimension_equals_the_half_plane_formula():
    F1, U = FullGaussian(dim=1), ig.Gaussian(dim=1)
    rng = np.random.default_rng(1)
    for _ in range(4):
        m, s = rng.normal(size=2) * 2, rng.uniform(0.3, 3, size=2)
        p, q = (B.array([m[i], s[i] ** 2]) for i in range(2))
        assert F1.dist(p, q) == pytest.approx(U.dist(p, q), rel=1e-10)
        np.testing.assert_allclose(F1.log(p, q).components, U.log(p, q).components, rtol=1e-9, atol=1e-10)


def test_full_gaussian_with_equal_means_is_half_the_affine_invariant_distance():
    G = ig.Gaussian(dim=3)
    rng = np.random.default_rng(2)
    A, Bm = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    S1, S2 = A @ A.T + np.eye(3), Bm @ Bm.T + 0.5 * np.eye(3)
    mu = rng.normal(size=3)
    lam = np.linalg.eigvals(np.linalg.solve(S1, S2)).real
    expected = np.sqrt(0.5 * np.sum(np.log(lam) ** 2))
    assert G.dist(G.point(mean=mu, cov=S1), G.point(mean=mu, cov=S2)) == pytest.approx(expected, rel=1e-10)
    Z = ig.Gaussian(dim=3, covariance="zero_mean")
    assert Z.dist(Z.point(cov=S1), Z.point(cov=S2)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name", CLOSED)
def test_distance_is_symmetric_and_satisfies_the_triangle_inequality(name):
    M = make(name)
    for seed in range(3):
        a, b, c = points(M, 3, seed=100 + seed)
        dab, dba = M.dist(a, b), M.dist(b, a)
        assert dab == pytest.approx(dba, rel=1e-9)
        assert M.dist(a, c) <= dab + M.dist(b, c) + 1e-10
        assert M.dist(a, a) == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("name", CLOSED)
@pytest.mark.parametrize("chart", ["standard", "natural", "mean"])
def test_exp_log_round_trip_and_distance_is_log_norm(name, chart):
    M = make(name).in_chart(chart)
    a, b = points(M, 2, seed=7)
    v = M.log(a, b)
    np.testing.assert_allclose(B.to_numpy(M.exp(a, v)), B.to_numpy(b), rtol=1e-9, atol=1e-9)
    assert float(M.metric.norm(v)) == pytest.approx(M.dist(a, b), rel=1e-9)
    # log(exp(v)) = v for a short vector
    w = 0.1 * v
    np.testing.assert_allclose(B.to_numpy(M.log(a, M.exp(a, w)).components), B.to_numpy(w.components),
                               rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", ["gauss1", "gauss2", "diag2", "zeromean2", "categorical3", "independence2"])
def test_closed_form_exp_solves_the_geodesic_equation(name):
    """Against the core's generic geodesics (autodiff Christoffel symbols + DOP853)."""
    M = make(name)
    a, b = points(M, 2, seed=9)
    v = 0.5 * M.log(a, b).components
    ode = generic.exp(M.metric, a, v)
    np.testing.assert_allclose(B.to_numpy(M.metric.exp(a, v)), B.to_numpy(ode), rtol=1e-8, atol=1e-9)


def test_geodesic_midpoint_halves_the_distance():
    G = ig.Gaussian(dim=2)
    p = G.point(mean=[0, 0], cov=[[1, 0], [0, 1]])
    q = G.point(mean=[1.0, -2.0], cov=[[2.0, 0.7], [0.7, 1.0]])
    path = G.geodesic(p, q)
    np.testing.assert_allclose(path(0.0), p, atol=1e-12)
    np.testing.assert_allclose(path(1.0), q, atol=1e-9)
    mid = path(0.5)
    d = G.dist(p, q)
    assert G.dist(p, mid) == pytest.approx(d / 2, rel=1e-8)
    assert G.dist(mid, q) == pytest.approx(d / 2, rel=1e-8)
    assert path(np.linspace(0, 1, 5)).shape == (5, 5)


@pytest.mark.slow
def test_full_gaussian_far_apart_points_converge():
    G = ig.Gaussian(dim=2)
    p = G.point(mean=[0, 0], cov=np.eye(2))
    q = G.point(mean=[8.0, -6.0], cov=[[0.05, 0.0], [0.0, 20.0]])
    v = G.log(p, q)
    np.testing.assert_allclose(G.exp(p, v), q, rtol=1e-9, atol=1e-9)


class TestGeomstats:
    """geomstats' univariate, centered and categorical Fisher-Rao spaces are valid references."""

    def test_univariate(self):
        from geomstats.information_geometry.normal import UnivariateNormalDistributions
        U, G = UnivariateNormalDistributions(), ig.Gaussian(dim=1)
        rng = np.random.default_rng(3)
        for _ in range(3):
            m, s = rng.normal(size=2), rng.uniform(0.2, 3, size=2)
            ref = float(U.metric.dist(np.array([m[0], s[0]]), np.array([m[1], s[1]])))
            assert G.dist(G.point(mean=m[0], std=s[0]), G.point(mean=m[1], std=s[1])) == pytest.approx(ref, rel=1e-9)

    def test_centered(self):
        from geomstats.information_geometry.normal import CenteredNormalDistributions
        Z = ig.Gaussian(dim=2, covariance="zero_mean")
        S1, S2 = np.array([[2.0, 0.3], [0.3, 0.5]]), np.array([[0.7, -0.2], [-0.2, 1.4]])
        ref = float(CenteredNormalDistributions(2).metric.dist(S1, S2))
        assert Z.dist(Z.point(cov=S1), Z.point(cov=S2)) == pytest.approx(ref, rel=1e-9)

    def test_categorical(self):
        from geomstats.information_geometry.categorical import CategoricalDistributions
        C, p, q = ig.Categorical(3), np.array([0.2, 0.3, 0.5]), np.array([0.6, 0.3, 0.1])
        ref = float(CategoricalDistributions(3).metric.dist(p, q))
        assert C.dist(C.point(probs=p), C.point(probs=q)) == pytest.approx(ref, rel=1e-9)


def test_mean_std_chart_of_the_diagonal_gaussian():
    """(mu, sigma) chart: closed-form Fisher vs autodiff J^T grad^2 psi J, the closed-form KL, same distances."""
    M = ig.Gaussian(dim=2, covariance="diagonal").in_chart("mean_std")
    std = ig.Gaussian(dim=2, covariance="diagonal")
    p, q = np.array([0.3, -1.0, 1.7, 0.4]), np.array([1.0, 0.2, 0.8, 0.9])
    np.testing.assert_allclose(M.fisher(p), M._fisher_autodiff(p), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(M.fisher(p), np.diag([1, 1, 2, 2]) / np.r_[p[2:], p[2:]] ** 2, rtol=1e-12)
    m1, m2, s1, s2 = p[:2], q[:2], p[2:], q[2:]
    kl = np.sum(np.log(s2 / s1) + (s1 ** 2 + (m1 - m2) ** 2) / (2 * s2 ** 2) - 0.5)
    assert float(M.kl(p, q)) == pytest.approx(kl, rel=1e-12)
    to_std = lambda x: np.r_[x[:2], x[2:] ** 2]  # noqa: E731
    assert float(M.dist(p, q)) == pytest.approx(float(std.dist(to_std(p), to_std(q))), rel=1e-12)
    np.testing.assert_allclose(M.exp(p, M.log(p, q)), q, rtol=1e-10)
    assert M.coordinate_names == (r"$\mu_1$", r"$\mu_2$", r"$\sigma_1$", r"$\sigma_2$")
    with pytest.raises(ValueError, match="standard deviations"):
        M.point([0.0, 0.0, 1.0, -1.0])
