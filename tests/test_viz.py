"""Figures: the numbers attached to them are checked against closed forms."""
import numpy as np
import pytest

pytest.importorskip("matplotlib")

import infogeo as ig  # noqa: E402
from infogeo import backend as B  # noqa: E402

from ._helpers import UnivariateGaussianChart, fisher_rao_normal  # noqa: E402
from scipy.optimize import brentq  # noqa: E402


@pytest.fixture(scope="module")
def M():
    return UnivariateGaussianChart()


def test_import_infogeo_does_not_import_matplotlib():
    import subprocess
    import sys
    code = "import sys, infogeo; assert 'matplotlib' not in sys.modules and 'pymanopt' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=".", env={"PYTHONPATH": "src"})


def test_kl_ball_small_eps_hugs_the_metric_ellipse(M):
    fig = ig.viz.plot_kl_ball(M, [[0.0, 1.0], [1.0, 0.5]], 0.02, n_rays=72)
    (b1, b2) = fig.infogeo_curves
    for b in (b1, b2):
        assert not np.isnan(b["r_forward"]).any() and not np.isnan(b["r_reverse"]).any()
        # the reverse ball within 3 %, the forward ball within 15 % (its cubic term is 5/3 r^3 along sigma)
        assert b["deviation_reverse"] < 0.03
        assert b["deviation_forward"] < 0.15
    # the picture is scale invariant in (mu, sigma): the same relative deviation at every centre
    assert b1["deviation_forward"] == pytest.approx(b2["deviation_forward"], rel=1e-6)


def test_kl_ball_large_eps_departs_from_the_ellipse(M):
    b = ig.viz.kl_ball(M, B.array([0.0, 1.0]), 1.0, n_rays=72)
    assert b["deviation_forward"] > 0.10 and b["deviation_reverse"] > 0.10


def test_kl_ball_deviation_shrinks_like_sqrt_eps(M):
    d = [ig.viz.kl_ball(M, B.array([0.0, 1.0]), e, n_rays=36, reverse=False)["deviation_forward"]
         for e in (0.02, 0.0002)]
    assert d[0] / d[1] == pytest.approx(10.0, rel=0.15)


def test_kl_ball_radii_match_an_independent_root(M):
    """Along +sigma, KL(p||q) = log s + 1/(2 s^2) - 1/2 (mu fixed, s0 = 1); solve it separately."""
    eps = 0.02
    b = ig.viz.kl_ball(M, B.array([0.0, 1.0]), eps, n_rays=8)
    s_up = brentq(lambda s: np.log(s) + 1 / (2 * s * s) - 0.5 - eps, 1.0, 3.0, xtol=1e-15)
    assert b["r_forward"][2] == pytest.approx(s_up - 1.0, rel=1e-10)          # angle pi/2
    s_dn = brentq(lambda s: np.log(s) + 1 / (2 * s * s) - 0.5 - eps, 0.3, 1.0, xtol=1e-15)
    assert b["r_forward"][6] == pytest.approx(1.0 - s_dn, rel=1e-10)          # angle 3 pi/2
    # along mu: KL = r^2 / 2 exactly, the same as the metric ellipse
    assert b["r_forward"][0] == pytest.approx(np.sqrt(2 * eps), rel=1e-10)
    assert b["r_metric"][0] == pytest.approx(np.sqrt(2 * eps), rel=1e-12)


def test_kl_ball_bad_input(M):
    with pytest.raises(ValueError, match="eps"):
        ig.viz.kl_ball(M, B.array([0.0, 1.0]), -1.0)
    with pytest.raises(ValueError, match="domain"):
        ig.viz.kl_ball(M, B.array([0.0, -1.0]), 0.1)
    with pytest.raises(TypeError, match="kl"):
        ig.viz.kl_ball(ig.Euclidean(2), B.array([0.0, 1.0]), 0.1)
    with pytest.raises(ValueError, match="coords"):
        ig.viz.kl_ball(M, B.array([0.0, 1.0]), 0.1, coords=(0, 0))


def test_geodesic_fan_and_distance(M):
    p, q = np.array([0.0, 1.0]), np.array([2.0, 1.0])
    fig = ig.viz.plot_geodesics(M, p, q=[q], n=6, radius=1.0, n_t=21)
    data = fig.infogeo_data
    assert data["distances"][0] == pytest.approx(fisher_rao_normal(p, q), rel=1e-7)
    np.testing.assert_allclose(data["paths_to"][0][-1], q, atol=1e-8)
    # each geodesic circle lies at the stated Fisher-Rao distance from the centre
    for radius, ring in data["circles"]:
        for y in ring:
            assert fisher_rao_normal(p, y) == pytest.approx(radius, rel=1e-6)


def test_simplex_barycentric():
    np.testing.assert_allclose(ig.viz.barycentric([1, 0, 0]), [0, 0])
    np.testing.assert_allclose(ig.viz.barycentric([1 / 3, 1 / 3, 1 / 3]), [0.5, np.sqrt(3) / 6])
    with pytest.raises(ValueError):
        ig.viz.barycentric([0.5, 0.5])


def test_gradient_field_natural_is_metric_sharp(M):
    cost = lambda x: x[0] ** 2 + 3 * (x[1] - 0.5) ** 2  # noqa: E731
    fig = ig.viz.plot_gradient_field(M, cost, xlim=(-1, 1), ylim=(-0.5, 2), n=5, grid=10)
    d = fig.infogeo_data
    assert (d["points"][:, 1] > 0).all() and len(d["points"]) == 20  # the row sigma = -0.5 is skipped
    for x, v, n in zip(d["points"], d["vanilla"], d["natural"]):
        np.testing.assert_allclose(v, -np.array([2 * x[0], 6 * (x[1] - 0.5)]), rtol=1e-12)
        np.testing.assert_allclose(n, v * np.array([x[1] ** 2, x[1] ** 2 / 2]), rtol=1e-12)


def test_trajectories_two_views(tmp_path):
    f = lambda x: B.stack([1.0 - x[0], 10.0 * (x[1] - x[0] ** 2)])  # noqa: E731
    cost = lambda x: B.sum(f(x) ** 2)  # noqa: E731
    run = ig.solvers.GradientDescent(1e-3, max_iter=20).minimize(ig.Euclidean(2), cost, B.array([-1.0, 1.0]))
    fig = ig.viz.plot_trajectories({"GD": run}, cost, output_map=f, output_cost=lambda z: B.sum(z ** 2),
                                   optimum=[1.0, 1.0], grid=20)
    d = fig.infogeo_data
    np.testing.assert_allclose(d["input space"]["GD"], run.path()[:, :2])
    np.testing.assert_allclose(d["output space"]["GD"][0], [2.0, 0.0])
    out = tmp_path / "t.png"
    fig.savefig(out)
    assert out.stat().st_size > 1000
    with pytest.raises(ValueError):
        ig.viz.plot_trajectories({}, cost)
