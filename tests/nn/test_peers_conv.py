"""Convolution nets against their definitions and against peers (curvlinops, BackPACK), float64.

* K-FAC factors of Conv1d/2d/3d layers (stride, dilation, padding modes, ``padding="same"``, with and
  without bias, one and several input channels) against factors written from Grosse & Martens (2016) and
  Eschenhagen et al. (2023) with input patches gathered by explicit loops over output positions and
  kernel offsets, and output-gradient factors from ``jacrev`` of the rest of the network;
* K-FAC and EKFAC against curvlinops' ``KFACLinearOperator`` / ``EKFACLinearOperator`` (Conv2d with zero
  padding: curvlinops extracts patches with ``F.unfold``, which knows neither other padding modes nor
  asymmetric ``"same"`` padding, and supports no Conv1d/Conv3d);
* the exact diagonal against BackPACK's ``DiagGGNExact`` (conv nets, outputs with a middle axis), the
  Monte Carlo diagonal's mean against it;
* GGN products against curvlinops' ``GGNLinearOperator`` on a CNN, batch size 1, float32 and float64; the
  empirical Fisher of per-position logits against its ``EFLinearOperator``.

Conventions: infogeo's curvature is :math:`\\frac1N\\sum_n J_n^T H_n J_n` (losses summed over positions,
averaged over examples), so a peer run with ``reduction="sum"`` is divided by ``N``.
"""
import copy
import itertools
import math
import warnings

import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from . import _dense_reference as ref  # noqa: E402
from ._dense_reference import rel  # noqa: E402

F = torch.nn.functional
EXACT = 1e-10
N, C = 3, 3


# ----------------------------------------------------------------- from the definitions
def loop_patches(m, x):
    """Input patches ``(N, L, C_in prod(kernel))`` of a convolution, channel major, by explicit loops."""
    nd = len(m.kernel_size)
    if m.padding == "valid":
        pads = [(0, 0)] * nd
    elif m.padding == "same":   # torch pads the extra element of an odd total on the right
        pads = [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for d, k in zip(m.dilation, m.kernel_size)]
    else:
        pads = [(p, p) for p in m.padding]
    flat = [p for lr in reversed(pads) for p in lr]
    xp = F.pad(x, flat, mode="constant" if m.padding_mode == "zeros" else m.padding_mode)
    S = xp.shape[2:]
    L = [(S[i] - m.dilation[i] * (m.kernel_size[i] - 1) - 1) // m.stride[i] + 1 for i in range(nd)]
    rows = []
    for o in itertools.product(*map(range, L)):
        cols = []
        for c in range(x.shape[1]):
            for k in itertools.product(*map(range, m.kernel_size)):
                cols.append(xp[(slice(None), c) + tuple(o[i] * m.stride[i] + k[i] * m.dilation[i] for i in range(nd))])
        rows.append(torch.stack(cols, -1))
    return torch.stack(rows, 1)


class ConvNet(torch.nn.Module):
    """``conv -> tanh -> conv2 -> tanh -> flatten -> linear``; ``rest`` is everything after ``conv``."""

    def __init__(self, conv, x):
        super().__init__()
        self.conv = conv
        self.conv2 = type(conv)(conv.out_channels, 2, 2)
        with torch.no_grad():
            n_out = self.conv2(torch.tanh(conv(x[:1].to(conv.weight.dtype)))).numel()
        self.fc = torch.nn.Linear(n_out, C)

    def rest(self, h):
        return self.fc(torch.tanh(self.conv2(torch.tanh(h))).flatten(1))

    def forward(self, x):
        return self.rest(self.conv(x))


def definition_factors(model, X, approx):
    r"""``(A, G)`` of ``model.conv`` under the categorical Fisher, from the definitions.

    expand: :math:`A = \frac1{NL}\sum_{n,l}\bar a_{nl}\bar a_{nl}^T`,
    :math:`G = \frac1N\sum_{n,l} J_{nl}^T H_n J_{nl}` (:math:`J_{nl}` the outputs' Jacobian in the
    layer's output at position :math:`l`); reduce: the patches averaged and the Jacobians summed over
    positions first.
    """
    m = model.conv
    with torch.no_grad():
        h = m(X)
    P = loop_patches(m, X)
    if m.bias is not None:
        P = torch.cat([P, torch.ones(P.shape[:-1] + (1,), dtype=P.dtype)], -1)
    H = ref.output_hessian("categorical", model.rest(h).detach())
    Jo = torch.func.vmap(torch.func.jacrev(lambda hn: model.rest(hn[None])[0]))(h).flatten(3)  # (N, C, out, L)
    if approx == "expand":
        A = torch.einsum("nli,nlj->ij", P, P) / (P.shape[0] * P.shape[1])
        G = torch.einsum("ncol,ncd,ndpl->op", Jo, H, Jo) / X.shape[0]
    else:
        a = P.mean(1)
        A = a.T @ a / X.shape[0]
        Js = Jo.sum(-1)
        G = torch.einsum("nco,ncd,ndp->op", Js, H, Js) / X.shape[0]
    return A, G.detach()


CONVS = {
    "1d_circular_stride": (lambda: torch.nn.Conv1d(2, 3, 3, stride=2, padding=1, padding_mode="circular"), (2, 7)),
    "1d_same_asymmetric_dilated": (lambda: torch.nn.Conv1d(3, 2, 2, dilation=3, padding="same"), (3, 6)),
    "2d_reflect_strided_dilated": (lambda: torch.nn.Conv2d(2, 3, (2, 3), stride=(2, 1), dilation=(1, 2),
                                                           padding=(1, 2), padding_mode="reflect"), (2, 5, 6)),
    "2d_same_no_bias": (lambda: torch.nn.Conv2d(3, 4, 3, padding="same", bias=False), (3, 4, 4)),
    "2d_stride_drops_inputs": (lambda: torch.nn.Conv2d(2, 3, 3, stride=3, padding=2), (2, 6, 7)),
    "2d_one_channel": (lambda: torch.nn.Conv2d(1, 3, 2, stride=2), (1, 5, 5)),
    "3d_replicate": (lambda: torch.nn.Conv3d(2, 3, (2, 1, 2), stride=(1, 2, 1), padding=1,
                                             padding_mode="replicate"), (2, 3, 4, 3)),
    "3d_dilated_no_bias": (lambda: torch.nn.Conv3d(2, 2, 2, dilation=(2, 1, 1), bias=False), (2, 4, 3, 3)),
}


def conv_net(name, batch=N):
    make, shape = CONVS[name]
    torch.manual_seed(0)
    X = torch.randn(batch, *shape, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Using padding='same' with even kernel")
        return ConvNet(make(), X).double(), X


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize("approx", ["expand", "reduce"])
@pytest.mark.parametrize("name", list(CONVS))
def test_convolution_factors_equal_their_definitions(name, approx):
    model, X = conv_net(name)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    K = space.curvature("kfac", kfac_approx=approx)
    assert [b.kind for b in K.blocks] == ["kfac"] * 3
    A, G = definition_factors(model, X, approx)
    assert rel(K.blocks[0].A, A) < EXACT and rel(K.blocks[0].G, G) < EXACT
    # EKFAC's scales are the exact block's diagonal in that Kronecker eigenbasis
    E = space.curvature("ekfac", kfac_approx=approx)
    b = E.blocks[0]
    Ua, Ug = b.basis()
    idx = b.flat_index(space.layout)
    Q = torch.kron(Ug, Ua)
    Gb = ref.ggn(model, (X,), "categorical")[idx][:, idx]
    assert rel(b.s.reshape(-1), torch.diagonal(Q.T @ Gb @ Q)) < EXACT


def _peer_dense(op, params, dtype):
    return op @ torch.eye(sum(p.numel() for p in params), dtype=dtype)


@pytest.mark.parametrize("approx", ["expand", "reduce"])
@pytest.mark.parametrize("name", ["2d_same_no_bias", "2d_stride_drops_inputs", "2d_one_channel"])
def test_kfac_equals_curvlinops_on_conv2d(name, approx):
    curvlinops = pytest.importorskip("curvlinops")
    model, X = conv_net(name)
    y = torch.randint(0, C, (N,), generator=torch.Generator().manual_seed(1))
    params = list(model.parameters())
    K = curvlinops.KFACLinearOperator(model, torch.nn.CrossEntropyLoss(reduction="sum"), params, [(X, y)],
                                      fisher_type="type-2", kfac_approx=approx, separate_weight_and_bias=False,
                                      check_deterministic=False)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    assert rel(space.curvature("kfac", kfac_approx=approx).to_dense(), _peer_dense(K, params, X.dtype) / N) < EXACT


def ekfac_cnn():
    """Enough examples for every Kronecker factor of the conv layers to be non-singular under both flavours
    (with weight sharing, EKFAC's scales depend on the eigenbasis chosen in a factor's null space)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 2, stride=2, padding=1), torch.nn.Tanh(),
                                torch.nn.Conv2d(3, 2, 2, dilation=2, padding=1), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(2 * 3 * 3, C)).double()
    X = torch.randn(24, 2, 4, 4, dtype=torch.float64)
    return model, X, torch.randint(0, C, (24,), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("fisher", ["type-2", "empirical"])
@pytest.mark.parametrize("approx", ["expand", "reduce"])
def test_ekfac_equals_curvlinops_on_a_cnn(approx, fisher):
    curvlinops = pytest.importorskip("curvlinops")
    if not hasattr(curvlinops, "EKFACLinearOperator"):
        pytest.skip("curvlinops without EKFAC")
    model, X, y = ekfac_cnn()
    params = list(model.parameters())
    E = curvlinops.EKFACLinearOperator(model, torch.nn.CrossEntropyLoss(reduction="sum"), params, [(X, y)],
                                       fisher_type=fisher, kfac_approx=approx, separate_weight_and_bias=False,
                                       check_deterministic=False)
    space = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y)
    ours = space.curvature("ekfac", "exact" if fisher == "type-2" else "empirical", kfac_approx=approx)
    for b in ours.blocks[:2]:   # the premise: no null space in the conv layers' factors
        assert torch.linalg.eigvalsh(b.A).min() > 1e-6 and torch.linalg.eigvalsh(b.G).min() > 1e-6
    assert rel(ours.to_dense(), _peer_dense(E, params, X.dtype) / X.shape[0]) < EXACT


# ----------------------------------------------------------------- BackPACK: diagonal GGN
FULL_BACKWARD_HOOK = "ignore:Full backward hook"   # BackPACK's own module hooks on inputs without grad


def backpack_diag(model, loss, X, y):
    backpack = pytest.importorskip("backpack")
    from backpack.extensions import DiagGGNExact
    model, loss = backpack.extend(copy.deepcopy(model)), backpack.extend(loss)   # its hooks stay on the copy
    with backpack.backpack(DiagGGNExact()):
        loss(model(X), y).backward()
    return torch.cat([p.diag_ggn_exact.reshape(-1) for p in model.parameters()])


def flat_diag(curvature):
    return torch.cat([t.reshape(-1) for t in curvature.diagonal().values()])


def diag_nets():
    torch.manual_seed(0)
    c1 = torch.nn.Conv1d(2, 3, 3, stride=2, padding=2, dilation=2)
    c3 = torch.nn.Conv3d(2, 3, 2, stride=(1, 2, 1), padding=1)
    return {
        "conv1d": (torch.nn.Sequential(c1, torch.nn.Sigmoid(), torch.nn.Flatten(), torch.nn.Linear(3 * 5, C)),
                   torch.randn(4, 2, 9)),
        "conv2d": (torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, stride=2, padding=1), torch.nn.Tanh(),
                                       torch.nn.Conv2d(3, 2, 2, dilation=2, padding=1, bias=False), torch.nn.ReLU(),
                                       torch.nn.Flatten(), torch.nn.Linear(2 * 3 * 3, C)), torch.randn(4, 2, 6, 6)),
        "conv3d": (torch.nn.Sequential(c3, torch.nn.Tanh(), torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 3 * 4, C)),
                   torch.randn(4, 2, 3, 4, 3)),
    }


@pytest.mark.filterwarnings(FULL_BACKWARD_HOOK)
@pytest.mark.parametrize("name", ["conv1d", "conv2d", "conv3d"])
def test_exact_diagonal_equals_backpack(name):
    model, X = diag_nets()[name]
    model, X = model.double(), X.double()
    y = torch.randint(0, C, (X.shape[0],), generator=torch.Generator().manual_seed(1))
    space = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y)
    theirs = backpack_diag(model, torch.nn.CrossEntropyLoss(), X, y)
    assert rel(flat_diag(space.curvature("diag")), theirs) < EXACT


class PerPosition(torch.nn.Module):
    """A 1-d CNN classifying every position: (N, C_in, T) -> (N, T, C)."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Conv1d(2, 4, 3, padding=1), torch.nn.Tanh(), torch.nn.Conv1d(4, C, 1))

    def forward(self, x):
        return self.net(x).transpose(1, 2)


@pytest.mark.filterwarnings(FULL_BACKWARD_HOOK)
def test_diagonal_with_a_middle_axis_equals_backpack_and_monte_carlo_is_unbiased():
    torch.manual_seed(0)
    model = PerPosition().double()
    X = torch.randn(4, 2, 5, dtype=torch.float64)
    y = torch.randint(0, C, (4, 5), generator=torch.Generator().manual_seed(1))
    space = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y)
    # BackPACK takes (N, C, T) logits; the sum reduction over positions divided by N is infogeo's convention
    theirs = backpack_diag(model.net, torch.nn.CrossEntropyLoss(reduction="sum"), X, y) / 4
    assert rel(flat_diag(space.curvature("diag")), theirs) < EXACT
    gen = torch.Generator().manual_seed(0)
    w = torch.rand(theirs.shape, generator=gen, dtype=theirs.dtype)
    R = 150
    est = torch.stack([(flat_diag(space.curvature("diag", "mc", samples=2, generator=gen)) * w).sum()
                       for _ in range(R)])
    se = est.std() / math.sqrt(R)
    assert se > 0 and abs(est.mean() - (theirs * w).sum()) < 4 * se


@pytest.mark.filterwarnings(FULL_BACKWARD_HOOK)
def test_mse_diagonal_equals_backpack():
    """``nn.MSELoss()`` (mean over all N C entries) as the output metric: the GGN of that very loss."""
    model, X = diag_nets()["conv2d"]
    model, X = model.double(), X.double()
    y = torch.randn(X.shape[0], C, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    space = ig.nn.ParameterSpace(model, torch.nn.MSELoss(), data=X, targets=y)
    assert rel(flat_diag(space.curvature("diag")), backpack_diag(model, torch.nn.MSELoss(), X, y)) < EXACT


# ----------------------------------------------------------------- curvlinops: GGN products
@pytest.mark.parametrize("dtype,tol", [(torch.float64, EXACT), (torch.float32, 1e-5)])
@pytest.mark.parametrize("batch", [1, 4])
def test_ggn_products_equal_curvlinops_on_a_cnn(batch, dtype, tol):
    curvlinops = pytest.importorskip("curvlinops")
    model, X = diag_nets()["conv2d"]
    model, X = model.to(dtype), X[:batch].to(dtype)
    y = torch.randint(0, C, (batch,), generator=torch.Generator().manual_seed(1))
    params = list(model.parameters())
    G = _peer_dense(curvlinops.GGNLinearOperator(model, torch.nn.CrossEntropyLoss(), params, [(X, y)],
                                                 check_deterministic=False), params, dtype)
    space = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y)
    I = torch.eye(space.dim, dtype=dtype)
    products = torch.stack([space.layout.flatten(space.metric.mv(None, space.layout.unflatten(e))) for e in I], 1)
    assert rel(products, G) < tol
    assert rel(space.curvature("implicit") @ I, G) < tol
    assert rel(space.curvature("dense").to_dense(), G) < tol
    assert rel(space.curvature("diag").to_dense(), torch.diag(torch.diagonal(G))) < tol
    assert rel(space.curvature("block").to_dense(), ref.block_diagonal(G, model)) < tol
    K = curvlinops.KFACLinearOperator(model, torch.nn.CrossEntropyLoss(reduction="sum"), params, [(X, y)],
                                      fisher_type="type-2", separate_weight_and_bias=False,
                                      check_deterministic=False)
    assert rel(space.curvature("kfac").to_dense(), _peer_dense(K, params, dtype) / batch) < tol


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_empirical_fisher_equals_curvlinops_with_a_middle_axis(reduction):
    """The empirical Fisher of ``CrossEntropyLoss`` on per-position logits: curvlinops' ``EFLinearOperator``
    sums the outer products of the gradients of the torch loss's terms, rescaled by its reduction, ours too.
    (``model.net`` gives the (N, C, T) logits torch's loss takes.  With ``ignore_index`` curvlinops still
    divides by all N T positions, torch by the counted ones.)"""
    curvlinops = pytest.importorskip("curvlinops")
    torch.manual_seed(0)
    model = PerPosition().double()
    X = torch.randn(4, 2, 5, dtype=torch.float64)
    y = torch.randint(0, C, (4, 5), generator=torch.Generator().manual_seed(1))
    loss = torch.nn.CrossEntropyLoss(reduction=reduction)
    params = list(model.parameters())
    theirs = _peer_dense(curvlinops.EFLinearOperator(model.net, loss, params, [(X, y)],
                                                     check_deterministic=False), params, X.dtype)
    space = ig.nn.ParameterSpace(model, loss, data=X, targets=y)
    for kind in ("dense", "diag", "block"):
        ours = space.curvature(kind, "empirical").to_dense()
        want = theirs if kind == "dense" else (torch.diag(torch.diagonal(theirs)) if kind == "diag"
                                               else ref.block_diagonal(theirs, model))
        assert rel(ours, want) < EXACT, kind
