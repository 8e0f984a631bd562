"""K-FAC with weight sharing, expand and reduce (Eschenhagen et al., 2023): exactness and curvlinops.

Exactness (their Sec. 3): for deep linear networks with a Euclidean loss,
K-FAC-expand equals the layer blocks of the GGN when the layers act at every
position and the loss is per position ("expand setting"), and K-FAC-reduce when
the positions are summed before the loss ("reduce setting").  curvlinops
implements both flavours; with ``reduction="sum"`` its K-FAC is ``N`` times ours
(``2N`` for ``MSELoss``, whose Hessian is ``2I``) in the settings its own tests
use: expand on networks acting on each position separately, both flavours on
outputs without positions.  Our gradient factor sums over per-output-position
rows (so that Monte Carlo is unbiased for it); curvlinops back-propagates each
square-root column at all output positions at once, which adds cross-position
terms where layers mix positions, and for K-FAC-reduce on per-position outputs.
"""
import math

import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from . import _dense_reference as ref  # noqa: E402
from ._dense_reference import rel  # noqa: E402
from .test_shapes import Mix  # noqa: E402

EXACT = 1e-10
N, T, D, C = 4, 3, 3, 2


class SumPositions(torch.nn.Module):
    def forward(self, h):
        return h.sum(1)


def deep_linear(setting):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(D, 4), torch.nn.Linear(4, 3), torch.nn.Linear(3, C)]
    if setting == "reduce":
        layers.insert(2, SumPositions())
    return torch.nn.Sequential(*layers).double(), torch.randn(N, T, D, dtype=torch.float64)


@pytest.mark.parametrize("setting", ["expand", "reduce"])
def test_exact_for_deep_linear_networks_in_their_setting(setting):
    model, X = deep_linear(setting)
    space = ig.nn.ParameterSpace(model, "euclidean", data=X)
    Gb = ref.block_diagonal(ref.ggn(model, (X,), "euclidean"), model)
    own = space.curvature("kfac", kfac_approx=setting).to_dense()
    other = space.curvature("kfac", kfac_approx="reduce" if setting == "expand" else "expand").to_dense()
    assert rel(own, Gb) < EXACT
    assert rel(other, Gb) > 1e-3   # the other flavour is an approximation there


def test_flavours_agree_without_weight_sharing():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D, 4), torch.nn.Tanh(), torch.nn.Linear(4, C)).double()
    space = ig.nn.ParameterSpace(model, "categorical", data=torch.randn(N, D, dtype=torch.float64))
    assert rel(space.curvature("kfac", kfac_approx="reduce").to_dense(),
               space.curvature("kfac", kfac_approx="expand").to_dense()) < EXACT


class Channels(torch.nn.Module):
    """The model's (N, ..., C) outputs as (N, C, ...), the layout torch's CrossEntropyLoss expects."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x).movedim(-1, 1)


class MeanPositions(torch.nn.Module):
    def forward(self, h):
        return h.mean(1)


def _models():
    torch.manual_seed(0)
    seq = torch.nn.Sequential(torch.nn.Linear(D, 4), torch.nn.Tanh(), torch.nn.Linear(4, C)).double()
    pooled = torch.nn.Sequential(torch.nn.Linear(D, 4), torch.nn.Tanh(), MeanPositions(),
                                 torch.nn.Linear(4, C)).double()
    conv = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 2, stride=1, padding=1), torch.nn.Tanh(), torch.nn.Flatten(),
                               torch.nn.Linear(3 * 4 * 4, C)).double()
    return {"sequence": (seq, torch.randn(N, T, D, dtype=torch.float64)),
            "pooled": (pooled, torch.randn(N, T, D, dtype=torch.float64)),
            "conv": (conv, torch.randn(N, 2, 3, 3, dtype=torch.float64))}


# per-position outputs with K-FAC-expand (the expand setting); outputs without positions (the reduce
# setting: positions pooled inside the network, or a convolution's patches) with both flavours
CASES = [("sequence", "expand"), ("pooled", "expand"), ("pooled", "reduce"), ("conv", "expand"),
         ("conv", "reduce")]


@pytest.mark.parametrize("fisher", ["type-2", "empirical"])
@pytest.mark.parametrize("loss", ["categorical", "euclidean"])
@pytest.mark.parametrize("which,approx", CASES)
def test_matches_curvlinops(which, approx, loss, fisher):
    curvlinops = pytest.importorskip("curvlinops")
    model, X = _models()[which]
    z = model(X).detach()
    g = torch.Generator().manual_seed(1)
    if loss == "categorical":
        y = torch.randint(0, C, z.shape[:-1], generator=g)
        loss_func = torch.nn.CrossEntropyLoss(reduction="sum")
        wrapped, scale = Channels(model), N
    else:
        y = torch.randn(z.shape, generator=g, dtype=z.dtype)
        loss_func = torch.nn.MSELoss(reduction="sum")
        wrapped, scale = model, 2 * N * (2 if fisher == "empirical" else 1)
    params = [p for p in model.parameters()]
    K = curvlinops.KFACLinearOperator(wrapped, loss_func, params, [(X, y)], fisher_type=fisher,
                                      kfac_approx=approx, separate_weight_and_bias=False,
                                      check_deterministic=False)
    theirs = (K @ torch.eye(sum(p.numel() for p in params), dtype=X.dtype)) / scale
    space = ig.nn.ParameterSpace(model, loss, data=X, targets=y)
    ours = space.curvature("kfac", "exact" if fisher == "type-2" else "empirical", kfac_approx=approx)
    assert rel(ours.to_dense(), theirs) < EXACT


@pytest.mark.parametrize("approx", ["expand", "reduce"])
def test_monte_carlo_unbiased_where_layers_mix_positions(approx):
    """E[K-FAC MC] = K-FAC exact (3 standard errors) on a network that couples positions."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D, 4), torch.nn.Tanh(), Mix(), torch.nn.Linear(4, C)).double()
    space = ig.nn.ParameterSpace(model, "categorical", data=torch.randn(N, T, D, dtype=torch.float64))
    exact = space.curvature("kfac", kfac_approx=approx).to_dense()
    w = torch.rand(exact.shape, generator=torch.Generator().manual_seed(1), dtype=exact.dtype) * (exact != 0)
    gen = torch.Generator().manual_seed(0)
    R = 200
    est = torch.stack([(space.curvature("kfac", "mc", generator=gen, kfac_approx=approx).to_dense() * w).sum()
                       for _ in range(R)])
    se = est.std() / math.sqrt(R)
    assert se > 0
    assert abs(est.mean() - (exact * w).sum()) < 3 * se


class ChannelsLastConv(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x):
        return self.conv(x).flatten(2).transpose(1, 2)


@pytest.mark.parametrize("conv", [lambda: torch.nn.Conv1d(2, 3, 3, padding=1, padding_mode="reflect"),
                                  lambda: torch.nn.Conv2d(2, 3, 2, stride=2, padding="valid"),
                                  lambda: torch.nn.Conv3d(2, 3, 2, padding=1)])
def test_expand_exact_for_a_convolution_with_a_loss_per_position(conv):
    """A convolution is a Linear over patches: with a per-position Euclidean loss, K-FAC-expand is its GGN."""
    torch.manual_seed(0)
    model = ChannelsLastConv(conv()).double()
    X = torch.randn(N, 2, *([4] * len(model.conv.kernel_size)), dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, "euclidean", data=X)
    assert rel(space.curvature("kfac").to_dense(), ref.ggn(model, (X,), "euclidean")) < EXACT
    assert [b.kind for b in space.curvature("kfac").blocks] == ["kfac"]
