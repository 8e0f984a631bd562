"""What a public function returns never is (or shares memory with) the caller's input: a run that stops
at iteration 0, a result and its history, and a point made from the caller's array."""
import numpy as np
import pytest

import infogeo as ig

B = ig.backend
S = ig.solvers


def quad(x):
    return B.sum((x - 1.0) ** 2)


SOLVERS = {
    "gradient_descent": lambda **k: S.GradientDescent(step_size=0.1, **k),
    "damped_newton": lambda **k: S.DampedNewton(**k),
    "trust_region": lambda **k: S.TrustRegion(**k),
    "proximal_point": lambda **k: S.ProximalPoint(lam=1.0, **k),
    "mirror_descent": lambda **k: S.MirrorDescent(**k),
}


@pytest.mark.parametrize("name", sorted(SOLVERS))
@pytest.mark.parametrize("max_iter", [0, 3])
def test_results_share_no_memory_with_x0_or_the_history(name, max_iter):
    x0 = np.array([0.0, 0.5])                      # (mean, variance); MirrorDescent needs a family
    res = SOLVERS[name](max_iter=max_iter).minimize(ig.Gaussian(1), quad, x0)
    assert not np.shares_memory(res.x, x0)
    for entry in res.history:
        assert not np.shares_memory(entry["x"], x0)
    assert not np.shares_memory(res.x, res.history[-1]["x"])
    res.x[0] = 5.0
    np.testing.assert_array_equal(x0, [0.0, 0.5])
    assert res.history[-1]["x"][0] != 5.0


def test_a_point_is_a_new_array():
    a = np.array([0.3, 1.0, 2.0])
    G = ig.Gaussian(1)
    for M in (G, ig.Euclidean(3)):
        coords = a[:M.dim].copy()
        p = M.point(coords)
        assert not np.shares_memory(p, coords)
        coords[0] = 7.0
        assert p[0] == 0.3


def test_a_point_from_a_tensor_is_a_clone_that_keeps_the_gradient():
    torch = pytest.importorskip("torch")
    t = torch.tensor([0.3, 1.0], dtype=torch.float64, requires_grad=True)
    p = ig.Euclidean(2).point(t)
    assert p is not t and p.data_ptr() != t.data_ptr()
    (p * p).sum().backward()
    assert torch.equal(t.grad, 2 * t.detach())


def test_chart_maps_of_any_charted_manifold_never_return_a_view():
    # ChartedManifold.to_chart/from_chart handed on a view for charts that coincide; only ExponentialFamily
    # copied (its override): the copy is now made at the root, for every ChartedManifold
    from infogeo.geometry.charts import ChartedManifold
    C = ig.Categorical(3)     # its mean and standard charts coincide
    p = np.array([0.2, 0.3])
    for y in (ChartedManifold.to_chart(C, p, "mean"), ChartedManifold.from_chart(C, p, "mean")):
        assert not np.may_share_memory(y, p)
        y[0] = 0.9
    assert p[0] == 0.2
