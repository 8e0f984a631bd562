"""Layer coverage: every (layer x representation) pair is exact to its definition (dense float64 reference).

Each model has (N, C) or (N, T, C) outputs under the categorical Fisher; the
representations are compared with the reference's GGN, its diagonal, its
per-module blocks, and (for K-FAC's layers without Kronecker factors) its
diagonal.  A float32 LSTM's curvature is the same computed under ``torch.no_grad()`` (the optimizer's step).
"""
import math

import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from . import _dense_reference as ref  # noqa: E402
from ._dense_reference import rel  # noqa: E402

EXACT = 1e-10
N, T, D, C = 3, 4, 4, 3


class Seq(torch.nn.Module):
    """``head(body(x))`` with the body's output flattened to (N, -1) when ``flatten``."""

    def __init__(self, body, head_in, flatten=True):
        super().__init__()
        self.body, self.flatten = body, flatten
        self.head = torch.nn.Linear(head_in, C)

    def forward(self, x):
        h = self.body(x)
        if isinstance(h, tuple):
            h = h[0]
        h = torch.tanh(h)
        return self.head(h.flatten(1) if self.flatten else h)


class LinearAttention(torch.nn.Module):
    """Single-head self-attention written from Linear layers, (N, T, D) -> (N, T, D)."""

    def __init__(self, d):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        a = torch.softmax(self.q(x) @ self.k(x).transpose(1, 2) / x.shape[-1] ** 0.5, -1)
        return self.o(a @ self.v(x))


class MHA(torch.nn.Module):
    def __init__(self, d, batch_first):
        super().__init__()
        self.batch_first = batch_first
        self.attn = torch.nn.MultiheadAttention(d, 2, batch_first=batch_first)

    def forward(self, x):
        if not self.batch_first:
            x = x.transpose(0, 1)
        h = self.attn(x, x, x, need_weights=False)[0]
        return h if self.batch_first else h.transpose(0, 1)


def _rms_norm():
    return torch.nn.RMSNorm(D) if hasattr(torch.nn, "RMSNorm") else None


def make(name):
    torch.manual_seed(0)
    seq_x = torch.randn(N, T, D)
    if name == "linear":
        return Seq(torch.nn.Linear(D, 5), 5), torch.randn(N, D)
    if name == "conv1d":
        return Seq(torch.nn.Conv1d(2, 4, 3, padding=1, groups=2, padding_mode="circular"), 4 * 5), \
            torch.randn(N, 2, 5)
    if name == "conv2d":
        return Seq(torch.nn.Conv2d(2, 3, 3, padding=1, stride=2), 3 * 2 * 2), torch.randn(N, 2, 4, 4)
    if name == "conv2d_groups_reflect":
        return Seq(torch.nn.Conv2d(2, 4, 3, padding=1, groups=2, padding_mode="reflect"), 4 * 9), \
            torch.randn(N, 2, 3, 3)
    if name == "conv3d":
        return Seq(torch.nn.Conv3d(1, 2, 2), 2 * 1 * 1 * 2), torch.randn(N, 1, 2, 2, 3)
    if name == "embedding":
        return Seq(torch.nn.Embedding(6, D), D, flatten=False), torch.randint(0, 6, (N, T))
    if name == "layernorm":
        return Seq(torch.nn.LayerNorm(D), D, flatten=False), seq_x
    if name == "rmsnorm":
        return Seq(_rms_norm(), D, flatten=False), seq_x
    if name == "groupnorm":
        return Seq(torch.nn.GroupNorm(2, 4), 4 * 3), torch.randn(N, 4, 3)
    if name == "batchnorm_eval":
        bn = torch.nn.BatchNorm1d(D)
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2)
        return Seq(bn, D).eval(), torch.randn(N, D)
    if name == "linear_attention":
        return Seq(LinearAttention(D), D, flatten=False), seq_x
    if name == "mha":
        return Seq(MHA(D, True), D, flatten=False), seq_x
    if name == "mha_seq_first":
        return Seq(MHA(D, False), D, flatten=False), seq_x
    if name in ("rnn", "lstm", "gru"):
        cls = {"rnn": torch.nn.RNN, "lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[name]
        return Seq(cls(D, 3, batch_first=True), 3, flatten=False), seq_x
    raise ValueError(name)


LAYERS = ["linear", "conv1d", "conv2d", "conv2d_groups_reflect", "conv3d", "embedding", "layernorm", "rmsnorm",
          "groupnorm", "batchnorm_eval", "linear_attention", "mha", "mha_seq_first", "rnn", "lstm", "gru"]


def _setup(name):
    if name == "rmsnorm" and _rms_norm() is None:
        pytest.skip("torch without nn.RMSNorm")
    model, X = make(name)
    model = model.double()
    X = X if not X.is_floating_point() else X.double()
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    return space, model, ref.ggn(model, (X,), "categorical")


@pytest.mark.parametrize("name", LAYERS)
def test_layer_exact_in_every_representation(name):
    space, model, G = _setup(name)
    assert rel(space.curvature("dense").to_dense(), G) < EXACT
    assert rel(space.curvature("diag").to_dense(), torch.diag(torch.diagonal(G))) < EXACT
    assert rel(space.curvature("block").to_dense(), ref.block_diagonal(G, model)) < EXACT
    for kind in ("kfac", "ekfac"):
        check_kronecker_family(space.curvature(kind), space, G)


def check_kronecker_family(K, space, G):
    """Diagonal blocks are the exact diagonal; EKFAC's scales are G's diagonal in the Kronecker eigenbasis."""
    for b in K.blocks:
        if b.kind == "diag":
            idx = torch.cat([torch.arange(space.layout.offsets[n], space.layout.offsets[n] + space.layout.numels[n])
                             for n in b.names])
            got = torch.cat([b.d[n].reshape(-1) for n in b.names])
            assert rel(got, torch.diagonal(G)[idx]) < EXACT
        elif b.kind == "ekfac":
            # a diagonal factor's basis (an Embedding's input side) is the identity
            Ua, Ug = (torch.eye(F.shape[0], dtype=F.dtype) if U is None else U.contiguous()
                      for U, F in zip(b.basis(), (b.A, b.G)))
            idx = b.flat_index(space.layout)
            Q = torch.kron(Ug, Ua)
            assert rel(b.s.reshape(-1), torch.diagonal(Q.T @ G[idx][:, idx] @ Q)) < EXACT


@pytest.mark.parametrize("name", LAYERS)
def test_layer_exact_implicit(name):
    # attention included: the linearisation runs the composite attention kernel (double backward, forward AD)
    space, model, G = _setup(name)
    assert rel(space.curvature("implicit").to_dense(), G) < EXACT


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_language_model_with_frozen_recurrence(cell):
    """Embedding + LSTM/GRU + per-token classifier, recurrent weights frozen: exact diag and K-FAC embedding block."""
    torch.manual_seed(0)

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(7, D)
            self.rnn = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(D, 5, batch_first=True)
            self.out = torch.nn.Linear(5, 7)

        def forward(self, x):
            return self.out(self.rnn(self.emb(x))[0])

    model = LM().double()
    for p in model.rnn.parameters():
        p.requires_grad_(False)
    X = torch.randint(0, 7, (N, T))
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    G = ref.ggn(model, (X,), "categorical")
    assert rel(space.curvature("diag").to_dense(), torch.diag(torch.diagonal(G))) < EXACT
    (Ge,) = ref.blocks(G, model, [["emb.weight"]])
    # K-FAC-reduce: the Embedding's exact diagonal block (the mean of one-hot vectors is not one-hot)
    K = space.curvature("kfac", kfac_approx="reduce")
    emb = next(b for b in K.blocks if "emb.weight" in b.names)
    assert rel(emb.d["emb.weight"].reshape(-1), torch.diagonal(Ge)) < EXACT
    # K-FAC-expand: diag(token frequencies) ⊗ G
    emb = next(b for b in space.curvature("kfac").blocks if "emb.weight" in b.names)
    assert emb.kind == "kfac" and torch.equal(emb.A, torch.bincount(X.reshape(-1), minlength=7).double() / X.numel())


@pytest.mark.parametrize("kind", ["dense", "diag"])
def test_float32_lstm_curvature_under_no_grad_is_the_one_outside(kind, caplog):
    """A float32 LSTM's kernel takes an inference path without a backward under no_grad; the curvature's jacrev
    (dense) and per-example vjps (diag) run with grad enabled: the same matrix, and no fallback to a loop."""
    torch.manual_seed(0)
    model, X = make("lstm")
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    outside = space.curvature(kind).to_dense()
    with torch.no_grad(), caplog.at_level("DEBUG", logger="infogeo.nn.curvature.layers.module"):
        inside = space.curvature(kind).to_dense()
    assert torch.equal(inside, outside)
    assert not [r for r in caplog.records if "vmap failed" in r.getMessage()]


def test_a_float32_lstm_trains_with_the_dense_curvature():
    """The optimizer's step runs under no_grad; the dense curvature of a float32 LSTM is computed all the same."""
    torch.manual_seed(0)
    model, X = make("lstm")
    y = torch.randint(0, C, (N, T))
    opt = ig.nn.NaturalGradient(model, curvature="dense")
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(X).reshape(-1, C), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(map(math.isfinite, losses)) and all(b < a for a, b in zip(losses, losses[1:])), losses


class _PackedRNN(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.emb, self.rnn, self.head = torch.nn.Embedding(9, 3), cell(3, 4, batch_first=True), torch.nn.Linear(4, 3)

    def forward(self, x, lengths):
        packed = torch.nn.utils.rnn.pack_padded_sequence(self.emb(x), lengths, batch_first=True, enforce_sorted=False)
        h = self.rnn(packed)[1]
        return self.head((h[0] if isinstance(h, tuple) else h)[-1])


@pytest.mark.parametrize("cell", [torch.nn.LSTM, torch.nn.GRU], ids=["lstm", "gru"])
def test_a_recurrent_layer_on_a_packed_sequence_has_its_exact_diagonal(cell):
    """An LSTM/GRU called on a PackedSequence: torch.func cannot run it (``Cannot access data pointer of Tensor that
    doesn't have storage``), so every kind that needs its per-example products failed; autograd computes them.
    The diagonal against one computed here from autograd's Jacobian rows, :math:`\\frac1N\\sum_n J_n^T(\\mathrm{diag}
    (p_n) - p_np_n^T)J_n`; the optimizer steps with each kind."""
    torch.manual_seed(0)
    model = _PackedRNN(cell).double()
    x, lengths = torch.randint(1, 9, (4, 6)), torch.tensor([6, 3, 5, 2])
    params = [p for p in model.parameters()]
    z = model(x, lengths)
    N, C = z.shape
    J = torch.stack([torch.cat([g.reshape(-1) for g in torch.autograd.grad(z[n, c], params, retain_graph=True)])
                     for n in range(N) for c in range(C)]).reshape(N, C, -1)
    prob = torch.softmax(z.detach(), -1)
    H = torch.diag_embed(prob) - prob.unsqueeze(-1) * prob.unsqueeze(-2)
    want = torch.einsum("ncp,ncd,ndp->p", J, H, J) / N
    space = ig.nn.ParameterSpace(model, "categorical", data=(x, lengths))
    got = torch.cat([d.reshape(-1) for d in space.curvature("diag").diagonal().values()])
    assert rel(got, want) < EXACT
    y = torch.tensor([0, 2, 1, 1])
    for kw in ({"curvature": "diag"}, {"curvature": "ekfac"}, {"curvature": "kfac", "step_rule": "graft"}):
        torch.manual_seed(0)
        m = _PackedRNN(cell).double()
        opt = ig.nn.NaturalGradient(m, fisher="exact", **kw)
        for _ in range(2):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(m(x, lengths), y).backward()
            opt.step()
        assert all(torch.isfinite(p).all() for p in m.parameters())
