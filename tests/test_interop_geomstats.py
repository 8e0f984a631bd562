"""infogeo.interop.geomstats: point conversions, and the same problems solved by both libraries."""
import numpy as np
import pytest

import infogeo as ig
from infogeo import backend as B

pytest.importorskip("geomstats")
from infogeo.interop import geomstats as igs  # noqa: E402


def _np(a):
    return np.asarray(B.to_numpy(a), dtype=float)


# (infogeo manifold, two points by named parameters, the geomstats coordinates of the first)
CASES = {
    "univariate": (lambda: ig.Gaussian(1), dict(mean=[0.3], std=[1.5]), dict(mean=[-1.0], std=[0.7]), [0.3, 1.5]),
    "diagonal": (lambda: ig.Gaussian(2, "diagonal"), dict(mean=[0.3, 1.0], var=[1.5, 2.0]),
                 dict(mean=[-1.0, 0.0], var=[0.7, 1.0]), [0.3, 1.0, 1.5, 2.0]),
    "centered": (lambda: ig.Gaussian(2, "zero_mean"), dict(cov=[[2.0, 0.3], [0.3, 1.0]]),
                 dict(cov=[[1.0, -0.2], [-0.2, 0.5]]), [[2.0, 0.3], [0.3, 1.0]]),
    "categorical": (lambda: ig.Categorical(3), dict(probs=[0.2, 0.3, 0.5]), dict(probs=[0.6, 0.1, 0.3]),
                    [0.2, 0.3, 0.5]),
    "bernoulli": (lambda: ig.Bernoulli(), dict(prob=0.2), dict(prob=0.7), [0.2, 0.8]),
    "gamma": (lambda: ig.load_manifold("gamma"), dict(shape=2.0, rate=4.0), dict(shape=4.0, rate=1.5), [2.0, 0.5]),
    "beta": (lambda: ig.load_manifold("beta"), dict(alpha=1.5, beta=2.0), dict(alpha=3.0, beta=1.2), [1.5, 2.0]),
    "dirichlet": (lambda: ig.load_manifold("dirichlet"), dict(concentration=[1.0, 2.0, 3.0]),
                  dict(concentration=[2.5, 1.5, 1.0]), [1.0, 2.0, 3.0]),
    "poisson": (lambda: ig.load_manifold("poisson"), dict(rate=2.0), dict(rate=5.0), [2.0]),
    "exponential": (lambda: ig.load_manifold("exponential"), dict(rate=2.0), dict(rate=5.0), [2.0]),
    "multinomial": (lambda: ig.load_manifold("multinomial", k=3, n=5), dict(probs=[0.2, 0.3, 0.5]),
                    dict(probs=[0.6, 0.1, 0.3]), [0.2, 0.3, 0.5]),
}
CLOSED = ["univariate", "diagonal", "centered", "categorical", "bernoulli", "poisson", "exponential", "multinomial"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_points_convert_both_ways_in_every_chart(case):
    make, a, _, gs_coords = CASES[case]
    M = make()
    for chart in ("standard", "natural"):
        Mc = M.in_chart(chart)
        x = Mc.point(**a)
        y = igs.to_geomstats(Mc, x)
        np.testing.assert_allclose(y, gs_coords, rtol=1e-12)
        np.testing.assert_allclose(_np(igs.from_geomstats(Mc, y)), _np(x), rtol=1e-10, atol=1e-14)
    space = igs.geomstats_space(M)
    assert bool(np.all(space.belongs(np.asarray(gs_coords))))
    back = igs.infogeo_manifold(space)
    assert type(back).__name__ in {c.__name__ for c in type(M).__mro__} and back.dim == M.dim


@pytest.mark.parametrize("case", CLOSED)
def test_closed_form_distances_agree(case):
    make, a, b, _ = CASES[case]
    M = make()
    x, y = M.point(**a), M.point(**b)
    space = igs.geomstats_space(M)
    theirs = float(space.metric.dist(igs.to_geomstats(M, x), igs.to_geomstats(M, y)))
    assert float(M.dist(x, y)) == pytest.approx(theirs, rel=1e-12)


def test_batches_convert_row_by_row():
    M = ig.load_manifold("gamma")
    X = np.stack([M.point(shape=2.0, rate=4.0), M.point(shape=1.0, rate=1.0)])
    np.testing.assert_allclose(igs.to_geomstats(M, X), [[2.0, 0.5], [1.0, 1.0]])


def test_unsupported_families_and_bad_points_fail_clearly():
    with pytest.raises(NotImplementedError, match="no geomstats counterpart for VonMises"):
        igs.geomstats_space(ig.load_manifold("von_mises"))
    with pytest.raises(NotImplementedError, match="supported"):
        igs.to_geomstats(ig.Gaussian(2), np.array([0.0, 0.0, 1.0, 0.0, 1.0]))
    with pytest.raises(NotImplementedError, match="no infogeo family"):
        igs.infogeo_manifold(object())
    with pytest.raises(ValueError):
        igs.from_geomstats(ig.Gaussian(1), [0.0, -1.0])          # negative standard deviation
    with pytest.raises(ValueError):
        igs.from_geomstats(ig.Categorical(3), [0.5, 0.6, 0.1])   # off the simplex
    with pytest.raises(ValueError, match="finite"):
        igs.from_geomstats(ig.load_manifold("beta"), [np.nan, 1.0])
    with pytest.raises(ValueError, match="shape"):
        igs.to_geomstats(ig.load_manifold("beta"), np.array([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="tolerances"):
        igs.tighten_geodesic_solvers(igs.geomstats_space(ig.load_manifold("gamma"), tol=None), tol=2.0)


def test_geomstats_default_bvp_tolerance_is_what_limits_gamma_agreement():
    """geomstats' default log (solve_bvp tol 1e-3) is ~5e-6 off; the tightened one matches to ~1e-12."""
    M = ig.load_manifold("gamma")
    a, b = igs.to_geomstats(M, M.point(shape=2.0, rate=3.0)), igs.to_geomstats(M, M.point(shape=4.0, rate=1.5))
    loose = float(igs.geomstats_space(M, tol=None).metric.dist(a, b))
    tight = float(igs.geomstats_space(M).metric.dist(a, b))
    assert abs(loose - tight) / tight > 1e-6
    # geomstats' own exp(log) round trip with the tightened solvers
    space = igs.geomstats_space(M)
    v = space.metric.log(b, a)
    np.testing.assert_allclose(space.metric.exp(v, a), b, rtol=1e-8)


# ----------------------------------------------------------------------------- the same problem, both libraries
def test_gamma_geodesic_midpoint():
    M = ig.load_manifold("gamma")
    x, y = M.point(shape=2.0, rate=3.0), M.point(shape=4.0, rate=1.5)
    ours = igs.to_geomstats(M, M.geodesic(x, y)(0.5))
    space = igs.geomstats_space(M)
    theirs = np.asarray(space.metric.geodesic(initial_point=igs.to_geomstats(M, x),
                                              end_point=igs.to_geomstats(M, y))(0.5)).reshape(-1)
    np.testing.assert_allclose(ours, theirs, rtol=1e-7)


def test_frechet_mean_of_univariate_normals():
    from geomstats.learning.frechet_mean import FrechetMean
    M = ig.Gaussian(1)
    pts = [M.point(mean=[m], std=[s]) for m, s in [(0.0, 1.0), (1.0, 0.5), (-0.5, 2.0), (2.0, 1.5)]]
    # infogeo: Riemannian gradient descent with unit step on f = sum d^2 / 2n (grad f = -mean of logs)
    x = pts[0]
    for _ in range(100):
        v = sum(_np(M.log(x, p).components) for p in pts) / len(pts)
        x = M.exp(x, M.vector(x, B.array(v)))
        if np.linalg.norm(v) < 1e-13:
            break
    fm = FrechetMean(igs.geomstats_space(M))
    fm.optimizer.epsilon, fm.optimizer.max_iter = 1e-13, 1000
    fm.fit(np.stack([igs.to_geomstats(M, p) for p in pts]))
    # geomstats' optimiser stops at a relative gradient of ~1e-7 whatever epsilon says; ours at 1e-13
    np.testing.assert_allclose(igs.to_geomstats(M, x), fm.estimate_, rtol=1e-6)


@pytest.mark.parametrize("name, truth", [("gamma", dict(shape=2.5, rate=1.5)), ("beta", dict(alpha=2.0, beta=3.0))])
def test_maximum_likelihood_by_natural_gradient_matches_geomstats_fit(name, truth):
    M = ig.load_manifold(name)
    data = M.sample(M.point(**truth), 300, rng=0)
    Mn = M.in_chart("natural")   # natural gradient with unit step is Newton here: quadratic convergence
    start = {"gamma": dict(shape=1.0, rate=1.0 / data.mean()), "beta": dict(alpha=1.0, beta=1.0)}[name]
    res = ig.solvers.GradientDescent(step_size=1.0, grad_tol=1e-12, max_iter=50).minimize(
        Mn, lambda th: -Mn.log_likelihood(th, data), Mn.point(**start))
    assert res.success
    theirs = igs.geomstats_space(M).maximum_likelihood_fit(data)
    np.testing.assert_allclose(igs.to_geomstats(Mn, res.x), theirs, rtol=1e-5)
