"""Every output shape (N, *middle, C) x loss x representation against the dense float64 reference.

Convention: per-position losses summed over the middle axes and averaged over N
(tests/nn/_dense_reference.py builds G = 1/N sum_n sum_t J_nt^T H_nt J_nt from it).
"""
import math

import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from . import _dense_reference as ref  # noqa: E402
from ._dense_reference import rel  # noqa: E402

EXACT = 1e-10
N, T, D, C = 3, 4, 3, 3


class Mix(torch.nn.Module):
    """Couples positions without parameters (like attention): h + mean over positions."""

    def forward(self, h):
        return h + h.mean(1, keepdim=True)


class ChannelsLast(torch.nn.Module):
    def forward(self, x):
        return x.permute(0, 2, 3, 1)


def _model(shape: str):
    torch.manual_seed(0)
    if shape == "NC":
        m = torch.nn.Sequential(torch.nn.Linear(D, 5), torch.nn.Tanh(), torch.nn.Linear(5, C))
        X = torch.randn(N, D)
    elif shape == "NTC":  # per-position layers with a position-coupling step in between
        m = torch.nn.Sequential(torch.nn.Linear(D, 5), torch.nn.Tanh(), Mix(), torch.nn.LayerNorm(5),
                                torch.nn.Linear(5, C))
        X = torch.randn(N, T, D)
    elif shape == "NHWC":  # a segmentation head: convolution, then a per-pixel classifier
        m = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.Tanh(), ChannelsLast(),
                                torch.nn.Linear(4, C))
        X = torch.randn(N, 2, 3, 3)
    else:  # "multi": (N, A, B, C) from a Linear on (N, A, B, D) with a coupling over A
        m = torch.nn.Sequential(torch.nn.Linear(D, 4), torch.nn.Tanh(), Mix(), torch.nn.Linear(4, C))
        X = torch.randn(N, 2, 3, D)
    return m.double(), X.double()


LOSSES = {"categorical": "categorical", "bernoulli": "bernoulli", "euclidean": "euclidean",
          "gaussian": None}


def _space(shape, loss, targets=None):
    model, X = _model(shape)
    metric = ig.nn.GaussianFisher(variance=2.0) if loss == "gaussian" else loss
    return ig.nn.ParameterSpace(model, metric, data=X, targets=targets), model, X


def _targets(loss, z):
    g = torch.Generator().manual_seed(3)
    if loss == "categorical":
        return torch.randint(0, z.shape[-1], z.shape[:-1], generator=g)
    if loss == "bernoulli":
        return torch.randint(0, 2, z.shape, generator=g).double()
    return torch.randn(z.shape, generator=g, dtype=z.dtype)


SHAPES = ["NC", "NTC", "NHWC", "multi"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("loss", list(LOSSES))
def test_exact_representations_match_dense_reference(shape, loss):
    space, model, X = _space(shape, loss)
    G = ref.ggn(model, (X,), loss, variance=2.0)
    assert rel(space.curvature("dense").to_dense(), G) < EXACT
    assert rel(space.curvature("implicit").to_dense(), G) < EXACT
    assert rel(space.curvature("diag").to_dense(), torch.diag(torch.diagonal(G))) < EXACT
    assert rel(space.curvature("block").to_dense(), ref.block_diagonal(G, model)) < EXACT
    # K-FAC's exact diagonal blocks (LayerNorm) and the dense reference agree too
    K = space.curvature("kfac")
    for b in K.blocks:
        if b.kind == "diag":
            for n in b.names:
                (Gb,) = ref.blocks(G, model, [[n]])
                assert rel(b.d[n].reshape(-1), torch.diagonal(Gb)) < EXACT


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("loss", ["categorical", "bernoulli", "euclidean"])
def test_empirical_dense_and_diag_agree_with_definition(shape, loss):
    space, model, X = _space(shape, loss)
    t = _targets(loss, space.outputs)
    space.targets = t
    F = ref.empirical_fisher(model, (X,), loss, t)
    assert rel(space.curvature("dense", "empirical").to_dense(), F) < EXACT
    assert rel(space.curvature("diag", "empirical").to_dense(), torch.diag(torch.diagonal(F))) < EXACT
    assert rel(space.curvature("block", "empirical").to_dense(), ref.block_diagonal(F, model)) < EXACT


@pytest.mark.parametrize("shape", ["NTC", "NHWC"])
@pytest.mark.parametrize("kind", ["diag", "block"])
def test_monte_carlo_unbiased_on_middle_axes(shape, kind):
    """MC (one backward pass per sample at all positions) averages to the exact curvature: 3 standard errors."""
    space, model, X = _space(shape, "categorical")
    exact = space.curvature(kind).to_dense()
    w = torch.rand(exact.shape, generator=torch.Generator().manual_seed(1), dtype=exact.dtype)
    w = w * (exact != 0)
    gen = torch.Generator().manual_seed(0)
    R = 150
    est = torch.stack([(space.curvature(kind, "mc", samples=1, generator=gen).to_dense() * w).sum()
                       for _ in range(R)])
    se = est.std() / math.sqrt(R)
    assert se > 0
    assert abs(est.mean() - (exact * w).sum()) < 3 * se


def test_monte_carlo_unbiased_for_a_metric_known_by_its_product():
    """The generic sampler (square root times Gaussian noise) draws independently at every position."""
    model, X = _model("NTC")
    A = torch.tensor([[2.0, 0.5, 0.0], [0.5, 1.0, 0.3], [0.0, 0.3, 1.5]], dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, ig.nn.HessianOutput(lambda z, v: v @ A), data=X)
    exact = space.curvature("diag").to_dense()
    Gd = torch.diagonal(ref.pullback(*_jac_and_const(model, X, A)))
    assert rel(torch.diagonal(exact), Gd) < EXACT
    w = torch.diag(torch.rand(exact.shape[0], generator=torch.Generator().manual_seed(1), dtype=exact.dtype))
    gen = torch.Generator().manual_seed(0)
    R = 150
    est = torch.stack([(space.curvature("diag", "mc", generator=gen).to_dense() * w).sum() for _ in range(R)])
    se = est.std() / math.sqrt(R)
    assert abs(est.mean() - (exact * w).sum()) < 3 * se


def _jac_and_const(model, X, A):
    J, z = ref.jacobian(model, (X,))
    return J, A.expand(z.shape + (z.shape[-1],))
