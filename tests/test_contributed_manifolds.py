"""Conformance suite run on every file in manifolds/."""
import numpy as np
import pytest

import infogeo as ig
from infogeo import backend as B
from infogeo.contrib import available_manifolds

NAMES = available_manifolds()


def test_the_contributed_families_are_found():
    assert {"beta", "dirichlet", "gamma", "poisson"} <= set(NAMES)
    with pytest.raises(LookupError, match="available"):
        ig.load_manifold("no_such_family")


@pytest.fixture(params=NAMES)
def family(request):
    return ig.load_manifold(request.param)


def _points(M, n=3):
    return [M.random_point(rng=k) for k in range(n)]


def test_metric_is_spd_and_fisher_is_hessian_of_psi_and_of_kl(family):
    for x in _points(family):
        G = np.asarray(B.to_numpy(family.metric.matrix(x)))
        np.testing.assert_allclose(G, G.T, atol=1e-12)
        assert np.linalg.eigvalsh(G).min() > 0
        # Fisher in the natural chart = Hessian of psi (autodiff, independent of the chart machinery)
        th = family.to_natural(x)
        H = np.asarray(B.to_numpy(B.hessian(family.log_partition, th)))
        J = np.asarray(B.to_numpy(B.jacobian(family.to_natural, x)))
        np.testing.assert_allclose(J.T @ H @ J, G, rtol=1e-8, atol=1e-10)
        # Fisher = Hessian of q -> KL(p || q) at q = p, in the current chart
        K = np.asarray(B.to_numpy(B.hessian(lambda q: family.kl(x, q), x)))
        np.testing.assert_allclose(K, G, rtol=1e-7, atol=1e-10)


def test_exp_log_round_trip(family):
    x = family.random_point(rng=0)
    u = np.random.default_rng(1).standard_normal(family.dim)
    v = family.vector(x, B.array(u))
    v = v * (0.3 / float(family.metric.norm(v)))         # a short geodesic keeps the ODE solves cheap
    y = family.exp(x, v)
    np.testing.assert_allclose(B.to_numpy(family.log(x, y).components), B.to_numpy(v.components), rtol=1e-6, atol=1e-9)
    assert float(family.dist(x, y)) == pytest.approx(0.3, rel=1e-7)


def test_named_parameters():
    assert ig.load_manifold("beta").point(alpha=1.0, beta=1.0).tolist() == [1.0, 1.0]
    assert ig.load_manifold("dirichlet").point(concentration=[1, 2, 3]).tolist() == [1.0, 2.0, 3.0]
    P = ig.load_manifold("poisson")
    x, y = P.point(rate=2.0), P.point(rate=4.0)
    assert float(P.dist(x, y)) == pytest.approx(2 * (2 - np.sqrt(2)), rel=1e-9)   # 2|sqrt(l1) - sqrt(l2)|
    assert ig.load_manifold("gamma").parameters(ig.load_manifold("gamma").point(shape=2.0, rate=3.0)) == \
        {"shape": 2.0, "rate": 3.0}
    with pytest.raises(ValueError):
        ig.load_manifold("beta").point(alpha=-1.0, beta=1.0)
    with pytest.raises(ValueError):
        ig.load_manifold("dirichlet").point(concentration=[1, 2])


@pytest.mark.parametrize("name", ["beta", "dirichlet", "gamma"])
def test_distance_agrees_with_geomstats(name):
    pytest.importorskip("geomstats")
    import importlib
    ig_geo = type("gs", (), {m: importlib.import_module(f"geomstats.information_geometry.{m}")
                             for m in ("beta", "dirichlet", "gamma")})
    M = ig.load_manifold(name)
    if name == "beta":
        space = ig_geo.beta.BetaDistributions()
        pts = [M.point(alpha=1.5, beta=2.0), M.point(alpha=3.0, beta=1.2)]
        to_gs = lambda x: np.array([M.parameters(x)["alpha"], M.parameters(x)["beta"]])  # noqa: E731
    elif name == "dirichlet":
        space = ig_geo.dirichlet.DirichletDistributions(3)
        pts = [M.point(concentration=[1.0, 2.0, 3.0]), M.point(concentration=[2.5, 1.5, 1.0])]
        to_gs = lambda x: M.parameters(x)["concentration"]  # noqa: E731
    else:
        space = ig_geo.gamma.GammaDistributions()
        pts = [M.point(shape=2.0, rate=3.0), M.point(shape=4.0, rate=1.5)]
        # geomstats' natural coordinates for Gamma are (shape, mean = shape / rate)
        to_gs = lambda x: np.array([M.parameters(x)["shape"], M.parameters(x)["shape"] / M.parameters(x)["rate"]])  # noqa: E731
    ours = float(M.dist(*pts))
    theirs = float(space.metric.dist(to_gs(pts[0]), to_gs(pts[1])))
    # Beta and Dirichlet agree to 1e-6; geomstats' Gamma solver at its default tolerance is off by ~5e-6
    assert ours == pytest.approx(theirs, rel=1e-6 if name != "gamma" else 1e-5)
