"""Figures: drawn on pyplot's axes (so plt.savefig works), the numbers attached to them checked against closed forms."""
import numpy as np
import pytest

pytest.importorskip("matplotlib")
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo import backend as B  # noqa: E402

from ._helpers import UnivariateGaussianChart, fisher_rao_normal  # noqa: E402
from scipy.optimize import brentq  # noqa: E402


@pytest.fixture(scope="module")
def M():
    return UnivariateGaussianChart()


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _ink(path) -> float:
    """Fraction of the PNG's pixels that are not background white."""
    img = plt.imread(path)[..., :3]
    return float((img < 0.95).any(axis=-1).mean())


def test_import_infogeo_does_not_import_matplotlib():
    import subprocess
    import sys
    code = "import sys, infogeo; assert 'matplotlib' not in sys.modules and 'pymanopt' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=".", env={"PYTHONPATH": "src"})


def test_kl_ball_small_eps_hugs_the_metric_ellipse(M):
    ax = ig.viz.plot_kl_ball(M, [[0.0, 1.0], [1.0, 0.5]], 0.02, n_rays=72)
    (b1, b2) = ax.infogeo_data
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
    ax = ig.viz.plot_geodesics(M, p, q=[q], n=6, radius=1.0, n_t=21, circle_rays=40)
    data = ax.infogeo_data
    assert len(data["fan"]) == 6 and [len(ring) for _, ring in data["circles"]] == [40] * 4
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
    axes = ig.viz.plot_gradient_field(M, cost, xlim=(-1, 1), ylim=(-0.5, 2), n=5, grid=10)
    assert len(axes) == 2 and axes[0].figure is axes[1].figure is plt.gcf()
    d = axes[0].infogeo_data
    assert (d["points"][:, 1] > 0).all() and len(d["points"]) == 20  # the row sigma = -0.5 is skipped
    for x, v, n in zip(d["points"], d["vanilla"], d["natural"]):
        np.testing.assert_allclose(v, -np.array([2 * x[0], 6 * (x[1] - 0.5)]), rtol=1e-12)
        np.testing.assert_allclose(n, v * np.array([x[1] ** 2, x[1] ** 2 / 2]), rtol=1e-12)


def test_trajectories_two_views(tmp_path):
    f = lambda x: B.stack([1.0 - x[0], 10.0 * (x[1] - x[0] ** 2)])  # noqa: E731
    cost = lambda x: B.sum(f(x) ** 2)  # noqa: E731
    run = ig.solvers.GradientDescent(1e-3, max_iter=20).minimize(ig.Euclidean(2), cost, B.array([-1.0, 1.0]))
    axes = ig.viz.plot_trajectories({"GD": run}, cost, output_map=f, output_cost=lambda z: B.sum(z ** 2),
                                    optimum=[1.0, 1.0], grid=20)
    d = axes[0].infogeo_data
    np.testing.assert_allclose(d["input space"]["GD"], run.path()[:, :2])
    np.testing.assert_allclose(d["output space"]["GD"][0], [2.0, 0.0])
    out = tmp_path / "t.png"
    plt.savefig(out)
    assert _ink(out) > 0.01
    with pytest.raises(ValueError):
        ig.viz.plot_trajectories({}, cost)


def test_trajectory_legends_say_when_a_run_did_not_converge():
    cost = lambda x: B.sum(x ** 2)  # noqa: E731
    M, x0 = ig.Euclidean(2), B.array([1.0, 1.0])
    runs = {"limit": ig.solvers.GradientDescent(0.1, max_iter=3).minimize(M, cost, x0),
            "failed": ig.solvers.GradientDescent(5.0).minimize(ig.Manifold(2, domain=lambda x: x[0] > 0), cost,
                                                               B.array([1.0, 1.0])),
            "done": ig.solvers.GradientDescent(0.5).minimize(M, cost, x0),
            "array": np.array([[1.0, 1.0], [0.0, 0.0]])}
    assert [r.status for r in list(runs.values())[:3]] == [1, 3, 0]
    ax = ig.viz.plot_trajectories(runs, cost, grid=10)
    labels = ax.get_legend_handles_labels()[1]
    assert labels[:4] == ["limit (3 it., iteration limit)", f"failed ({runs['failed'].nit} it., failed)",
                          "done (1 it.)", "array (1 it.)"]
    plt.close("all")


def _calls(M):
    """One call of every plotting function, as f(ax=None or axes)."""
    f = lambda x: B.stack([1.0 - x[0], 10.0 * (x[1] - x[0] ** 2)])  # noqa: E731
    path = np.array([[-1.0, 1.0], [-0.5, 0.5], [0.0, 0.2], [1.0, 1.0]])
    return {
        "plot_kl_ball": (1, lambda ax: ig.viz.plot_kl_ball(M, [0.0, 1.0], 0.05, n_rays=24, ax=ax)),
        "plot_geodesics": (1, lambda ax: ig.viz.plot_geodesics(M, [0.0, 1.0], n=4, n_t=10, circle_rays=16, ax=ax)),
        "plot_trajectories (one view)": (1, lambda ax: ig.viz.plot_trajectories(
            {"path": path}, lambda x: B.sum(f(x) ** 2), grid=12, ax=ax)),
        "plot_trajectories (two views)": (2, lambda ax: ig.viz.plot_trajectories(
            {"path": path}, lambda x: B.sum(f(x) ** 2), output_map=f, grid=12, ax=ax)),
        "plot_gradient_field": (2, lambda ax: ig.viz.plot_gradient_field(
            M, lambda x: x[0] ** 2 + x[1] ** 2, xlim=(-1, 1), ylim=(0.2, 2), n=4, grid=8, ax=ax)),
    }


@pytest.mark.parametrize("name", list(_calls(UnivariateGaussianChart())))
def test_plt_savefig_after_a_call_writes_the_picture(M, name, tmp_path):
    """No ax: the function draws through pyplot, so plt.savefig (and plt.show) see the picture."""
    panels, call = _calls(M)[name]
    out = call(None)
    axes = [out] if panels == 1 else list(out)
    assert len(axes) == panels and all(isinstance(a, matplotlib.axes.Axes) for a in axes)
    assert axes[0].figure is plt.gcf() and (panels > 1 or axes[0] is plt.gca())
    assert all(a.lines or a.collections for a in axes)
    plt.savefig(tmp_path / "f.png")
    assert _ink(tmp_path / "f.png") > 0.01, "plt.savefig wrote a blank picture"


@pytest.mark.parametrize("name", list(_calls(UnivariateGaussianChart())))
def test_given_axes_are_drawn_on_and_returned(M, name):
    panels, call = _calls(M)[name]
    fig, given = plt.subplots(1, panels + 1)  # one more panel that must stay empty
    plt.figure()  # another current figure: nothing may go there
    out = call(given[0] if panels == 1 else given[:panels])
    returned = [out] if panels == 1 else list(out)
    assert all(r is g for r, g in zip(returned, given[:panels]))
    assert all(g.lines or g.collections for g in given[:panels])
    assert not (given[-1].lines or given[-1].collections) and not plt.gcf().axes
    with pytest.raises(ValueError, match="ax"):
        call(given if panels == 1 else given[0])  # the wrong number of axes


def test_several_panels_go_to_a_new_figure_when_the_current_one_is_in_use(M):
    plt.plot([0, 1])
    first = plt.gcf()
    axes = _calls(M)["plot_gradient_field"][1](None)
    assert axes[0].figure is not first and axes[0].figure is plt.gcf() and len(first.axes) == 1


def test_legends_sit_outside_the_data(M):
    ax = ig.viz.plot_kl_ball(M, [[0.0, 1.0], [1.5, 0.5]], 0.05, n_rays=24)
    plt.gcf().canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # right of the axes, over no curve


def test_plot_gaussians_draws_the_covariance_ellipses():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    G = ig.Gaussian(2)
    P = np.stack([G.point(mean=[0.0, 1.0], cov=[[2.0, 0.5], [0.5, 1.0]]), G.point(mean=[3.0, 0.0], cov=np.eye(2))])
    fig, axes = plt.subplots(1, 2)
    ax = ig.viz.plot_gaussians(G, P, ax=axes[1], n_std=2.0, color=["C0", "C1"])
    assert ax is axes[1] and len(axes[0].lines) == 0
    np.testing.assert_allclose(ax.infogeo_data["covs"][0], [[2.0, 0.5], [0.5, 1.0]])
    x, y = ax.lines[0].get_data()
    d = np.stack([x, y], axis=1) - [0.0, 1.0]
    np.testing.assert_allclose(np.einsum("ni,ij,nj->n", d, np.linalg.inv([[2.0, 0.5], [0.5, 1.0]]), d), 4.0)
    plt.close(fig)
    with pytest.raises(ValueError, match="sample_dim"):
        ig.viz.plot_gaussians(ig.Gaussian(1), [0.0, 1.0])
