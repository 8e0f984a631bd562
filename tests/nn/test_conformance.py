"""Conformance of every curvature kind (the kinds table) on every layer rule (the rules registry) and output shape.

Each kind states what of the exact curvature it reproduces (``Kind.exact``); the views below check exactly
that against a dense float64 pullback written from ``torch.func.jacrev`` and closed-form output Hessians.
A kind added to the table without a view here fails :func:`test_every_kind_has_a_conformance_view`; a rule
added to the registry without a model here fails :func:`test_every_rule_has_a_model`.
"""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.func import functional_call, jacrev  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo.nn.curvature import kinds, layers  # noqa: E402

from ._dense_reference import rel  # noqa: E402

TOL = 1e-10
pytestmark = pytest.mark.filterwarnings("ignore:the empirical Fisher of outputs with")


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(6, 4)
        self.mix = torch.nn.Linear(4, 4)

    def forward(self, x):
        return F.linear(torch.tanh(self.mix(self.emb(x))), self.emb.weight)


class Seq(torch.nn.Module):
    """Embedding, LayerNorm, a GRU (the generic module rule) and a Linear head, outputs (N, T, C)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(5, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.rnn = torch.nn.GRU(4, 3, batch_first=True)
        self.head = torch.nn.Linear(3, 4)

    def forward(self, x):
        return self.head(self.rnn(self.norm(self.emb(x)))[0])


class SelfAttention(torch.nn.Module):
    """``nn.MultiheadAttention`` on its own input, batch first, with a causal mask and a padding mask;
    with ``use_weights``, its attention weights feed the outputs too."""

    def __init__(self, use_weights=False):
        super().__init__()
        self.use_weights = use_weights
        self.inp = torch.nn.Linear(3, 4)
        self.att = torch.nn.MultiheadAttention(4, 2, batch_first=True)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = self.inp(x)
        N, T = h.shape[:2]
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        # the last key is padding in some sequences, by their own input (per example, as a padding mask is)
        padding = torch.cat([torch.zeros(N, T - 1, dtype=torch.bool), x[:, -1:, 0] > 0], 1)
        a, w = self.att(h, h, h, attn_mask=causal, key_padding_mask=padding, need_weights=self.use_weights)
        out = torch.tanh(a) + (w @ h if self.use_weights else h)
        return self.head(out)


def _encoder_layer():
    """A transformer block as torch builds it (self-attention with its is_causal hint, feed-forward, norms)."""
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = torch.nn.Linear(3, 4)
            self.block = torch.nn.TransformerEncoderLayer(4, 2, dim_feedforward=5, dropout=0.0, batch_first=True)
            self.head = torch.nn.Linear(4, 3)

        def forward(self, x):
            T = x.shape[1]
            mask = torch.nn.Transformer.generate_square_subsequent_mask(T, dtype=x.dtype)
            return self.head(self.block(self.inp(x), src_mask=mask, is_causal=True))
    return Block()


def _conv1d_model():
    pytest.importorskip("transformers")
    from transformers.pytorch_utils import Conv1D
    return torch.nn.Sequential(Conv1D(5, 3), torch.nn.Tanh(), Conv1D(3, 5))


# name -> (model factory, input factory (generator), number of classes, the rules it exercises)
MODELS = {
    "mlp": (lambda: torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)),
            lambda g: torch.randn(5, 3, generator=g, dtype=torch.float64), 3, {"linear"}),
    "mlp-positions": (lambda: torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)),
                      lambda g: torch.randn(4, 3, 3, generator=g, dtype=torch.float64), 3, {"linear"}),
    "cnn": (lambda: torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.Tanh(), torch.nn.Flatten(),
                                        torch.nn.Linear(3 * 4 * 4, 3)),
            lambda g: torch.randn(4, 2, 4, 4, generator=g, dtype=torch.float64), 3, {"conv", "linear"}),
    # stride, padding and output_padding; the bias a block of its own
    "conv-transpose": (lambda: torch.nn.Sequential(torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1,
                                                                            output_padding=1),
                                                   torch.nn.Tanh(), torch.nn.Flatten(), torch.nn.Linear(3 * 6 * 6, 3)),
                       lambda g: torch.randn(4, 2, 3, 3, generator=g, dtype=torch.float64), 3,
                       {"conv_transpose", "linear"}),
    # alone, dilation, output_padding past the stride, no bias: outputs (N, C_out, L) classified over L
    "conv-transpose-1d": (lambda: torch.nn.ConvTranspose1d(3, 2, 3, dilation=2, output_padding=1, bias=False),
                          lambda g: torch.randn(4, 3, 4, generator=g, dtype=torch.float64), 9, {"conv_transpose"}),
    "hf-conv1d": (_conv1d_model, lambda g: torch.randn(4, 3, 3, generator=g, dtype=torch.float64), 3, {"hf_conv1d"}),
    "sequence": (Seq, lambda g: torch.randint(0, 5, (3, 4), generator=g), 4, {"embedding", "module", "linear"}),
    # tokens repeat within a sequence, and padding_idx (no gradient) occurs
    # bags of tokens, averaged (padding left out) and summed, then a hidden layer
    "embedding-bag": (lambda: torch.nn.Sequential(torch.nn.EmbeddingBag(6, 4, mode="mean", padding_idx=0),
                                                  torch.nn.Tanh(), torch.nn.Linear(4, 3)),
                      lambda g: torch.randint(0, 6, (5, 3), generator=g), 3, {"embedding_bag", "linear"}),
    "embedding-bag-sum": (lambda: torch.nn.EmbeddingBag(5, 3, mode="sum"),
                          lambda g: torch.randint(0, 5, (6, 4), generator=g), 3, {"embedding_bag"}),
    "embedding": (lambda: torch.nn.Embedding(6, 3, padding_idx=0),
                  lambda g: torch.randint(0, 6, (4, 5), generator=g), 3, {"embedding"}),
    "attention": (SelfAttention, lambda g: torch.randn(3, 4, 3, generator=g, dtype=torch.float64), 3,
                  {"attention", "linear"}),
    "attention-weights": (lambda: SelfAttention(use_weights=True),
                          lambda g: torch.randn(3, 4, 3, generator=g, dtype=torch.float64), 3, {"attention", "linear"}),
    "encoder-layer": (_encoder_layer, lambda g: torch.randn(2, 4, 3, generator=g, dtype=torch.float64), 3,
                      {"attention", "linear", "module"}),
    "tied": (Tied, lambda g: torch.randint(0, 6, (4, 3), generator=g), 6, {"network", "linear"}),
}

#: rules that the parameter space never uses (the optimizers' BatchNorm in training mode)
OPTIMIZER_ONLY = {"batchnorm"}


def test_every_rule_has_a_model():
    covered = set().union(*(m[3] for m in MODELS.values()))
    missing = {r.name for r in layers.RULES} - covered - OPTIMIZER_ONLY
    assert not missing, f"add a conformance model for the layer rule(s) {missing}"


def reference(model, X, C, y):
    """``(G, F_emp, g)``: the exact Fisher, the empirical Fisher (per position) and the loss gradient, float64."""
    p = {n: q.detach() for n, q in model.named_parameters()}
    J = jacrev(lambda q: functional_call(model, q, (X,)))(p)
    z = functional_call(model, p, (X,)).detach()
    N = z.shape[0]
    Jm = torch.cat([J[n].reshape(z.numel(), -1) for n in p], 1).reshape(N, -1, C, sum(t.numel() for t in p.values()))
    zz = z.reshape(N, -1, C)
    s = torch.softmax(zz, -1)
    H = torch.diag_embed(s) - s.unsqueeze(-1) * s.unsqueeze(-2)
    g = s - F.one_hot(y.reshape(N, -1), C).to(s)
    pull = lambda M: torch.einsum("ntcp,ntcd,ntdq->pq", Jm, M, Jm) / N  # noqa: E731
    grad = torch.einsum("ntcp,ntc->p", Jm, g) / N
    return pull(H), pull(g.unsqueeze(-1) * g.unsqueeze(-2)), grad


def indices(space, names):
    return torch.cat([torch.arange(space.layout.offsets[n], space.layout.offsets[n] + space.layout.numels[n])
                      for n in names])


def flat(d, names):
    return torch.cat([d[n].reshape(-1) for n in names])


def view_dense(space, C, ref):
    assert rel(C.to_dense(), ref) < TOL


def view_implicit(space, C, ref):
    v = torch.randn(space.layout.size, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    assert rel(C @ v, ref @ v) < TOL


def view_diag(space, C, ref):
    assert rel(flat(C.diagonal(), space.names), ref.diagonal()) < TOL


def view_block(space, C, ref):
    for b in C.blocks:
        i = indices(space, b.names)
        if b.kind == "dense":
            assert rel(b.M, ref[i][:, i]) < TOL, b.names
        else:
            assert rel(flat(b.diagonal(), b.names), ref.diagonal()[i]) < TOL, b.names


def _diag_blocks_exact(space, C, ref):
    for b in C.blocks:
        if b.kind == "diag":
            assert rel(flat(b.diagonal(), b.names), ref.diagonal()[indices(space, b.names)]) < TOL, b.names


def view_kfac(space, C, ref):
    _diag_blocks_exact(space, C, ref)
    M = C.to_dense()
    assert rel(M, M.T) < 1e-13 and float(torch.linalg.eigvalsh(M).min()) > -1e-10 * float(M.abs().max())


def view_ekfac(space, C, ref):
    _diag_blocks_exact(space, C, ref)
    for b in C.blocks:
        if b.kind == "ekfac":
            idx = b.flat_index(space.layout)
            Ua, Ug = (torch.eye(F.shape[0], dtype=F.dtype) if U is None else U.contiguous()
                      for U, F in zip(b.basis(), (b.A, b.G)))
            Q = torch.kron(Ug, Ua)
            exact = torch.diagonal(Q.T @ ref[idx][:, idx] @ Q)   # the exact block's diagonal in the eigenbasis
            assert rel(b.s.reshape(-1), exact) < TOL, b.names


def view_gradient(space, C, grad):
    """Shampoo's statistics of one batch: each matrix's gradient outer products, the squares of the others."""
    for b in C.blocks:
        if b.kind == "shampoo":
            M = grad[b.weight].reshape(b.wshape[0], -1)
            assert rel(b.G, M @ M.T) < TOL and rel(b.A, M.T @ M) < TOL, b.names
        else:
            for n in b.names:
                assert grad[n].dim() < 2 and rel(b.d[n], grad[n] ** 2) < TOL, n
    M = C.to_dense()
    assert rel(M, M.T) < 1e-13 and float(torch.linalg.eigvalsh(M).min()) > -1e-10 * float(M.abs().max())


VIEWS = {"dense": view_dense, "implicit": view_implicit, "diag": view_diag, "block": view_block,
         "kfac": view_kfac, "ekfac": view_ekfac}


#: the kinds that represent the model's metric (the others are gradient statistics: test_gradient_statistics.py)
METRIC_KINDS = {name: row for name, row in kinds.KINDS.items() if row.statistics == "metric"}


def test_every_kind_has_a_conformance_view():
    missing = set(METRIC_KINDS) - set(VIEWS)
    assert not missing, f"add a conformance view for the curvature kind(s) {missing}"


@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("method", ["exact", "empirical"])
def test_every_kind_on_every_rule(model_name, method):
    make, inputs, C, _ = MODELS[model_name]
    torch.manual_seed(0)
    model = make().double().eval()
    g = torch.Generator().manual_seed(1)
    X = inputs(g)
    z0 = model(X)
    y = torch.randint(0, C, z0.shape[:-1], generator=g)
    G, Femp, grad = reference(model, X, C, y)
    ref = G if method == "exact" else Femp
    space = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y)
    for name, row in METRIC_KINDS.items():
        if name == "implicit" and model_name.startswith("embedding-bag"):
            # torch has neither forward-mode AD nor a double backward for embedding_bag: a clear refusal
            with pytest.raises(ValueError, match="forward-mode autodiff or a double backward"):
                space.curvature(name, method).mv(space.layout.unflatten(torch.ones(space.layout.size,
                                                                                 dtype=torch.float64)))
            continue
        VIEWS[name](space, space.curvature(name, method), ref)
    for name, row in kinds.KINDS.items():
        if row.statistics == "gradient":   # the loss gradient's own statistics: the empirical method only
            if method == "empirical":
                view_gradient(space, space.curvature(name, method), space.layout.unflatten(grad))
            else:
                with pytest.raises(ValueError, match="method='empirical'"):
                    space.curvature(name, method)
    # the aliases select the same representation
    for word, name in kinds.ALIASES.items():
        if name in METRIC_KINDS:
            assert type(space.curvature(word, method)) is type(space.curvature(name, method))


def test_unknown_kinds_and_methods_name_what_is_accepted():
    model = torch.nn.Linear(2, 2)
    space = ig.nn.ParameterSpace(model, "categorical", data=torch.randn(3, 2))
    with pytest.raises(ValueError, match="expected one of"):
        space.curvature("kronecker")
    with pytest.raises(ValueError, match="expected one of"):
        space.curvature("diag", "approximate")
    assert "`kfac`" in kinds.table() and "`ekfac`" in kinds.table()


def test_the_documentation_tables_are_the_registries():
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "docs" / "nn.md").read_text(encoding="utf-8")
    for name, table in (("kinds", kinds.table()), ("rules", layers.support_table())):
        start = text.index(f"<!-- {name}:")
        body = text[text.index("-->", start) + 3:text.index(f"<!-- end {name} -->")].strip()
        assert body == table, f"docs/nn.md's {name} table is out of date; paste infogeo.nn.curvature's table() there"
