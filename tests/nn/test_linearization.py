"""The one linearisation: outputs, J v and J^T u of numpy maps, torch maps and networks, cached per point."""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.func import jacrev  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo.geometry.linearization import Linearization  # noqa: E402
from .conftest import categorical_Gz, flat, reference_metric  # noqa: E402
from .test_space import EXACT, rand_like, rel  # noqa: E402


def rosen_map(x):
    return ig.backend.stack([1 - x[0], 10 * (x[1] - x[0] ** 2), x[0] * x[1]])


def test_numpy_map_products_match_the_jacobian():
    x = np.array([0.3, -1.2])
    J = np.array([[-1.0, 0.0], [-20 * x[0], 10.0], [x[1], x[0]]])
    lin = Linearization(rosen_map, x)
    v, u = np.array([0.7, -0.4]), np.array([1.0, -2.0, 0.5])
    assert np.allclose(lin.outputs, rosen_map(x), rtol=1e-15)
    assert np.allclose(lin.jvp(v), J @ v, rtol=1e-14) and np.allclose(lin.vjp(u), J.T @ u, rtol=1e-14)
    assert not lin.forward_mode


def test_pullback_metric_reuses_the_linearization_per_point():
    G = ig.PullbackMetric(rosen_map, ig.EuclideanMetric(3))
    x, v = np.array([0.3, -1.2]), np.array([0.7, -0.4])
    J = np.array([[-1.0, 0.0], [-20 * x[0], 10.0], [x[1], x[0]]])
    assert np.allclose(G.mv(x, v), J.T @ J @ v, rtol=1e-13)
    lin = G.linearize(x)
    assert G.linearize(x) is lin                   # same point: no new forward pass
    x[1] = 0.5                                     # in-place change of the point: a new linearisation
    assert G.linearize(x) is not lin
    J2 = np.array([[-1.0, 0.0], [-20 * x[0], 10.0], [x[1], x[0]]])
    assert np.allclose(G.mv(x, v), J2.T @ J2 @ v, rtol=1e-13)


def test_torch_tensor_map():
    x = torch.tensor([0.3, -1.2], dtype=torch.float64)
    lin = Linearization(lambda t: torch.stack([t[0] * t[1], torch.sin(t[0])]), x)
    J = torch.tensor([[x[1], x[0]], [torch.cos(x[0]), 0.0]], dtype=torch.float64)
    v, u = torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([0.5, -1.0], dtype=torch.float64)
    assert rel(lin.jvp(v), J @ v) < 1e-15 and rel(lin.vjp(u), J.T @ u) < 1e-15


def test_network_linearization_matches_jacrev(small_mlp):
    model, X = small_mlp
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    x = {n: t * 0.9 for n, t in space.point.items()}      # not the model's current point
    lin = space.linearize(x)
    J = jacrev(space.function)(x)
    z = space.function(x)
    Jm = torch.cat([J[n].reshape(z.numel(), -1) for n in space.names], dim=1)
    v = rand_like(space)
    u = torch.randn(z.shape, dtype=z.dtype, generator=torch.Generator().manual_seed(4))
    assert rel(lin.outputs, z) < 1e-15
    assert rel(lin.jvp(v).reshape(-1), Jm @ flat(v, space.names)) < EXACT
    assert rel(flat(lin.vjp(u), space.names), Jm.T @ u.reshape(-1)) < EXACT


def test_forward_mode_products_match_jacrev(small_mlp):
    model, X = small_mlp
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    x = {n: t * 0.9 for n, t in space.point.items()}
    J = jacrev(space.function)(x)
    z = space.function(x)
    Jm = torch.cat([J[n].reshape(z.numel(), -1) for n in space.names], dim=1)
    vs = [rand_like(space, seed) for seed in (1, 2, 3)]
    u = torch.randn(z.shape, dtype=z.dtype, generator=torch.Generator().manual_seed(4))
    for mode in ("forward", "reverse"):
        lin = space.linearize(x, mode=mode)
        assert lin.forward_mode == (mode == "forward")
        Jv = lin.jvp_many(vs)                                  # forward: the outputs come with the products
        assert Jv.shape == (3,) + tuple(z.shape)
        for k, v in enumerate(vs):
            assert rel(Jv[k].reshape(-1), Jm @ flat(v, space.names)) < EXACT
        assert rel(lin.outputs, z) < 1e-15
        assert rel(flat(lin.vjp(u), space.names), Jm.T @ u.reshape(-1)) < EXACT   # forward: graph recorded now
    fresh = space.linearize(x, mode="forward")
    assert rel(fresh.outputs, z) < 1e-15                       # outputs before any product
    assert rel(flat(fresh.vjp(u), space.names), Jm.T @ u.reshape(-1)) < EXACT
    assert fresh.jvp_many([]).shape == (0,) + tuple(z.shape)
    with pytest.raises(ValueError, match="mode"):
        space.linearize(x, mode="backward")


def test_numpy_map_jvp_many_stacks_the_products():
    x = np.array([0.3, -1.2])
    J = np.array([[-1.0, 0.0], [-20 * x[0], 10.0], [x[1], x[0]]])
    vs = [np.array([0.7, -0.4]), np.array([1.0, 2.0])]
    for mode in ("reverse", "forward"):  # numpy maps take the double vjp in either mode
        out = Linearization(rosen_map, x, mode=mode).jvp_many(vs)
        assert out.shape == (2, 3) and np.allclose(out, np.stack([J @ v for v in vs]), rtol=1e-14)


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_linearization_leaves_batchnorm_buffers_alone(mode):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Tanh(),
                                torch.nn.Linear(4, 2)).double().train()
    X = torch.randn(8, 3, dtype=torch.float64)
    before = {k: b.clone() for k, b in model.state_dict().items()}
    space = ig.nn.ParameterSpace(model, "euclidean", data=X)
    lin = space.linearize(mode=mode)
    v = rand_like(space)
    Jv = lin.jvp(v)
    lin.vjp(torch.ones(8, 2, dtype=torch.float64))
    space.metric.mv(None, rand_like(space))
    J = jacrev(space.function)(dict(space.point))     # the batch statistics' dependence on the parameters included
    Jm = torch.cat([J[n].reshape(16, -1) for n in space.names], dim=1)
    assert rel(Jv.reshape(-1), Jm @ flat(v, space.names)) < EXACT
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)   # num_batches_tracked included


def test_cached_linearization_follows_in_place_updates(small_mlp):
    model, X = small_mlp
    model = copy.deepcopy(model)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    v = rand_like(space)
    first = space.metric.mv(None, v)
    lin = space.metric.linearize()
    again = space.metric.mv(None, v)
    assert space.metric.linearize() is lin  # same point: the forward pass is reused
    assert rel(flat(again, space.names), flat(first, space.names)) < 1e-15
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)  # an optimizer-like in-place step: the cache must not be reused
    G = reference_metric(model, X, categorical_Gz)
    assert rel(flat(space.metric.mv(None, v), space.names), G @ flat(v, space.names)) < EXACT
    # products at other points given explicitly (fresh tensors each time) are never confused
    for scale in (0.5, 2.0):
        x = {n: p.detach() * scale for n, p in model.named_parameters()}
        other = copy.deepcopy(model)
        with torch.no_grad():
            for p in other.parameters():
                p.mul_(scale)
        Gx = reference_metric(other, X, categorical_Gz)
        assert rel(flat(space.metric.mv(x, v), space.names), Gx @ flat(v, space.names)) < EXACT
    lin = space.metric.linearize()
    space.metric.clear_cache()
    assert space.metric.linearize() is not lin



def test_products_fall_back_to_forward_mode_without_double_backward():
    class OnceTanh(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return torch.tanh(x)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * (1 - y * y)

        @staticmethod
        def jvp(ctx, t):
            return t * (1 - ctx.y_for_jvp ** 2)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(output)
            ctx.y_for_jvp = output

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.b(OnceTanh.apply(self.a(x)))

    torch.manual_seed(0)
    model = Net().double()
    X = torch.randn(6, 3, dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    v = rand_like(space)
    G = reference_metric(model, X, categorical_Gz)
    # torch's double backward silently drops the path through a once_differentiable
    # Function; the graph holds a custom Function, so J v is taken by forward mode
    assert space.linearize().forward_mode
    assert rel(flat(space.metric.mv(None, v), space.names), G @ flat(v, space.names)) < EXACT
    # forward mode asked for: the Function's jvp rule, the reference's Gauss-Newton quadratic form
    Jv = space.linearize(mode="forward").jvp_many([v, v])
    Gz = categorical_Gz(space.outputs)
    quad = torch.einsum("ni,nij,nj->", Jv[0], Gz, Jv[1]) / len(X)
    assert rel(quad, flat(v, space.names) @ G @ flat(v, space.names)) < EXACT
    # and for plain modules the double-backward path is the one taken
    plain = ig.nn.ParameterSpace(torch.nn.Sequential(model.a, torch.nn.Tanh(), model.b), "categorical", data=X)
    assert not plain.linearize().forward_mode
