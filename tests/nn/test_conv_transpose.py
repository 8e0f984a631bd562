"""The ``conv_transpose`` layer rule (``ConvTranspose1d/2d/3d``, one group) against references written here.

Pseudo-gradients against autograd, exact curvatures against a dense float64 ``jacrev`` pullback, and the
Kronecker factors against :math:`A` and :math:`G` from their definition, the output gradient's patches read
with explicit loops over positions and kernel taps (nothing from the rule's own unfolding).
"""
import itertools
import math
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.func import functional_call, jacrev  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo.nn.curvature import _backprop as bp  # noqa: E402

from ._dense_reference import rel  # noqa: E402

_CONV = {1: torch.nn.ConvTranspose1d, 2: torch.nn.ConvTranspose2d, 3: torch.nn.ConvTranspose3d}

# (dimensions, kernel, options, bias, input size): stride 2, dilation 2, padding, output_padding 1 (also past the
# stride, where the padded gradient holds a window beyond the input), kernels of unequal sides
CASES = [
    (1, 3, dict(stride=2, padding=1, output_padding=1), True, 4),
    (1, 2, dict(dilation=2, output_padding=1), False, 4),
    (2, 3, dict(stride=2, dilation=2, padding=1, output_padding=1), True, 3),
    (2, (2, 3), dict(stride=(2, 1), padding=(0, 1)), False, 3),
    (3, 2, dict(stride=2, padding=1, output_padding=1), True, 2),
]
IDS = ["1d-stride-pad-outpad", "1d-dilation-outpad-past-stride", "2d-all", "2d-unequal", "3d"]


def layer(case, seed=0):
    nd, k, kw, bias, size = case
    torch.manual_seed(seed)
    return _CONV[nd](2, 3, k, bias=bias, **kw).double()


def inputs(case, N=3, seed=1):
    nd, size = case[0], case[4]
    return torch.randn((N, 2) + (size,) * nd, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def patches_by_loops(m, g, in_size):
    r""":math:`u_t[o, k] = g[o, s t - p + d k]` (zero outside the output), ``(N, T_in, C_out K)``, by loops."""
    N, C = g.shape[:2]
    kernel, out_size = m.kernel_size, g.shape[2:]
    taps = list(itertools.product(*(range(k) for k in kernel)))
    u = torch.zeros(N, math.prod(in_size), C, len(taps), dtype=g.dtype)
    for ti, t in enumerate(itertools.product(*(range(L) for L in in_size))):
        for ki, k in enumerate(taps):
            pos = [s * a - p + d * b for a, b, s, p, d in zip(t, k, m.stride, m.padding, m.dilation)]
            if all(0 <= q < L for q, L in zip(pos, out_size)):
                u[:, ti, :, ki] = g[(slice(None), slice(None)) + tuple(pos)]
    return u.reshape(N, math.prod(in_size), -1)


def euclidean_pullback(model, X):
    p = {n: q.detach() for n, q in model.named_parameters()}
    J = jacrev(lambda q: functional_call(model, q, (X,)))(p)
    z = model(X)
    Jm = torch.cat([J[n].reshape(z.numel(), -1) for n in p], 1).reshape(X.shape[0], -1,
                                                                       sum(map(torch.numel, p.values())))
    return torch.einsum("nip,niq->pq", Jm, Jm) / X.shape[0]


def flat(d, names):
    return torch.cat([d[n].reshape(-1) for n in names])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_rows_sum_to_the_autograd_gradient(case):
    m, X = layer(case), inputs(case)
    z = m(X)
    T = torch.randn(z.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    space = ig.nn.ParameterSpace(m, "euclidean", data=X)
    cap = bp.capture(space, lambda zz: T.unsqueeze(0), per_position=False)
    (lay,) = cap.layers
    assert lay.rule.name == "conv_transpose"
    rows = {}
    for chunk in lay.rule.rows(lay, space, cap.cols):
        for n, t in chunk.items():
            rows.setdefault(n, []).append(t)
    grads = torch.autograd.grad((z * T).sum(), list(m.parameters()))
    for (n, _), g in zip(m.named_parameters(), grads):
        r = torch.cat(rows[n])
        assert r.shape == (X.shape[0],) + g.shape
        assert rel(r.sum(0), g) < 1e-12, n


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_exact_diagonal_and_block_equal_the_dense_pullback(case):
    m, X = layer(case), inputs(case)
    ref = euclidean_pullback(m, X)
    space = ig.nn.ParameterSpace(m, "euclidean", data=X)
    assert rel(flat(space.curvature("diag").diagonal(), space.names), ref.diagonal()) < 1e-12
    assert rel(space.curvature("block").to_dense(), ref) < 1e-12


@pytest.mark.filterwarnings("ignore:the empirical Fisher of outputs with")
@pytest.mark.parametrize("approx", ["expand", "reduce"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_kronecker_factors_are_those_of_the_definition(case, approx):
    r"""Empirical Fisher under the Euclidean metric (columns: the loss gradient :math:`z - y` at one output position
    each, the output's last axis its features): :math:`A` from the inputs, :math:`G` from the patches by loops,
    the bias's own block from the gradient summed over the output."""
    m, X = layer(case), inputs(case)
    N, in_size = X.shape[0], X.shape[2:]
    z = m(X).detach()
    y = torch.randn(z.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    space = ig.nn.ParameterSpace(m, "euclidean", data=X, targets=y)
    K = space.curvature("kfac", "empirical", kfac_approx=approx)
    r = (z - y).reshape(N, -1, z.shape[-1])
    cols = []                                     # one column per output position (all but the last axis)
    for t in range(r.shape[1]):
        c = torch.zeros_like(r)
        c[:, t] = r[:, t]
        cols.append(c.reshape(z.shape))
    x = X.reshape(N, 2, -1).transpose(1, 2)      # (N, T_in, C_in)
    u = [patches_by_loops(m, c, in_size) for c in cols]
    if approx == "expand":
        A = torch.einsum("nti,ntj->ij", x, x) / x[..., 0].numel()
        G = sum(torch.einsum("nta,ntb->ab", v, v) for v in u) / N
    else:
        xm = x.mean(1)
        A = xm.T @ xm / N
        G = sum(v.sum(1).T @ v.sum(1) for v in u) / N
    blocks = {tuple(b.names): b for b in K.blocks}
    w = blocks[("weight",)]
    assert w.kind == "kfac" and w.transposed and w.bias is None
    assert rel(w.A, A) < 1e-12 and rel(w.G, G) < 1e-12
    if m.bias is not None:
        b = blocks[("bias",)]
        s = [c.reshape(N, 3, -1).sum(2) for c in cols]
        assert rel(b.G, sum(v.T @ v for v in s) / N) < 1e-12 and float(b.A) == 1.0
    # the block's product, at W = weight.reshape(C_in, -1)^T
    V = {n: torch.randn(p.shape, dtype=torch.float64) for n, p in m.named_parameters()}
    W = V["weight"].reshape(2, -1).T
    assert rel(K.mv(None, V)["weight"], (G @ W @ A).T.reshape(m.weight.shape)) < 1e-12


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("geometry", ["one-position", "non-overlapping"])
def test_kfac_of_a_lone_layer_under_the_euclidean_metric_is_exact(nd, bias, geometry):
    r"""One input position (any stride, padding, output_padding), or patches that do not overlap (stride = kernel):
    the weight's block is :math:`G\otimes A` exactly; the bias's own block is exact; K-FAC leaves out only the
    cross terms between the two, and EKFAC equals K-FAC."""
    if geometry == "one-position":
        m = _CONV[nd](3, 2, 3, stride=2, padding=1, output_padding=1, bias=bias).double()
        X = torch.randn((5, 3) + (1,) * nd, dtype=torch.float64)
    else:
        m = _CONV[nd](3, 2, 2, stride=2, output_padding=1, bias=bias).double()
        X = torch.randn((5, 3) + (3 if nd < 3 else 2,) * nd, dtype=torch.float64)
    ref = euclidean_pullback(m, X)
    space = ig.nn.ParameterSpace(m, "euclidean", data=X)
    nw = m.weight.numel()
    if bias:
        ref[:nw, nw:] = 0
        ref[nw:, :nw] = 0
    for kind in ("kfac", "ekfac"):
        C = space.curvature(kind)
        assert [b.names for b in C.blocks] == [["weight"]] + ([["bias"]] if bias else [])
        assert rel(C.to_dense(), ref) < 1e-12, kind


def test_grouped_and_depthwise_convolutions_stay_exact_on_the_generic_rule():
    """groups > 1 (ordinary or transposed, depthwise among them): the generic rule, exact diagonal blocks."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, groups=4, padding=1), torch.nn.Tanh(),
                                torch.nn.ConvTranspose2d(4, 2, 2, stride=2, groups=2)).double()
    X = torch.randn(3, 4, 3, 3, dtype=torch.float64)
    ref = euclidean_pullback(model, X)
    space = ig.nn.ParameterSpace(model, "euclidean", data=X)
    K = space.curvature("kfac")
    assert {b.kind for b in K.blocks} == {"diag"}
    assert rel(flat(K.diagonal(), space.names), ref.diagonal()) < 1e-12
    B = space.curvature("block").to_dense()
    assert rel(B[B != 0], ref[B != 0]) < 1e-12


def test_the_rule_takes_only_calls_it_can_read():
    from infogeo.nn.curvature import layers
    x = torch.zeros(2, 4, 3, 3)
    conv = torch.nn.ConvTranspose2d(4, 2, 3)
    assert layers.rule_for(conv, (x,), {}).name == "conv_transpose"
    assert layers.rule_for(conv, (x[0],), {}).name == "module"                      # unbatched
    assert layers.rule_for(conv, (x,), {"output_size": [5, 5]}).name == "module"    # output_size: its own padding
    assert layers.rule_for(torch.nn.ConvTranspose2d(4, 2, 3, groups=2), (x,), {}).name == "module"
    with pytest.raises(RuntimeError, match="bound"):
        layers.rule_for(conv, (x,), {}).outputs(torch.zeros(2, 2, 5, 5))


def test_a_conv_autoencoder_trains_with_natural_gradient():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, stride=2, padding=1), torch.nn.Tanh(),
                                torch.nn.ConvTranspose2d(4, 1, 3, stride=2, padding=1, output_padding=1))
    X = torch.randn(16, 1, 8, 8)
    opt = ig.nn.NaturalGradient(model, output_metric="euclidean")
    losses = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(15):
            opt.zero_grad()
            loss = F.mse_loss(model(X), X, reduction="sum") / X.shape[0]
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    assert all(v == v for v in losses) and losses[-1] < 0.7 * losses[0], losses
    kinds = {b.kind: b.names for b in opt.preconditioner.curvature.blocks}
    assert "kfac" in kinds
    factored = {n for b in opt.preconditioner.curvature.blocks if b.kind == "kfac" for n in b.names}
    assert {"2.weight", "2.bias", "0.weight", "0.bias"} <= factored
