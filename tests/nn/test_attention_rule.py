"""``nn.MultiheadAttention``'s layer rule: Kronecker factors for its projections where it is self-attention.

The curvatures it gives are checked against dense references with every kind in test_conformance.py; here:
its reading of the module's forward, which calls it takes, and the optimizer's hooks recording it.
"""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo.nn.curvature import layers  # noqa: E402
from infogeo.nn.curvature.layers.attention import self_attention  # noqa: E402

from .test_conformance import SelfAttention  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask",
                                        "ignore:Preconditioner. kl_clip is set but no lr:UserWarning")

N, T, E, H = 3, 5, 8, 2


def _masks():
    g = torch.Generator().manual_seed(3)
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)
    pad = torch.zeros(N, T, dtype=torch.bool)
    pad[1, -2:] = True
    per_head = torch.randn(N * H, T, T, generator=g, dtype=torch.float64)
    return {
        "none": {},
        "causal": {"attn_mask": causal},
        "float mask": {"attn_mask": torch.randn(T, T, generator=g, dtype=torch.float64)},
        "per head": {"attn_mask": per_head},
        "padding": {"key_padding_mask": pad},
        "float padding": {"key_padding_mask": torch.where(pad, float("-inf"), 0.0).double()},
        "both": {"attn_mask": causal, "key_padding_mask": pad},
        "hint": {"attn_mask": causal, "is_causal": True, "need_weights": False},
        "weights per head": {"attn_mask": causal, "average_attn_weights": False},
    }


@pytest.mark.parametrize("case", list(_masks()))
def test_the_attention_run_again_is_the_modules_own(case):
    kwargs = _masks()[case]
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(E, H, batch_first=True).double()
    x = torch.randn(N, T, E, dtype=torch.float64)
    y, w = m(x, x, x, **kwargs)
    qkv = F.linear(x, m.in_proj_weight, m.in_proj_bias)
    c, w2 = self_attention(m, qkv, kwargs)
    torch.testing.assert_close(F.linear(c, m.out_proj.weight, m.out_proj.bias), y, rtol=1e-12, atol=1e-12)
    if w is None:
        assert w2 is None
    else:
        torch.testing.assert_close(w2, w, rtol=1e-12, atol=1e-12)


class Attend(torch.nn.Module):
    def __init__(self, cross=False, **kw):
        super().__init__()
        self.cross = cross
        self.inp = torch.nn.Linear(3, E)
        self.att = torch.nn.MultiheadAttention(E, H, batch_first=True, **kw)
        self.head = torch.nn.Linear(E, 3)

    def forward(self, x):
        h = self.inp(x)
        kv = torch.tanh(h) if self.cross else h
        return self.head(self.att(h, kv, kv, need_weights=False)[0])


def _kinds(model):
    X = torch.randn(N, T, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    C = ig.nn.ParameterSpace(model.double(), "categorical", data=X).curvature("kfac", "exact")
    return {n: b.kind for b in C.blocks for n in b.names}


def test_self_attention_gets_kronecker_blocks_and_other_attention_its_exact_diagonal():
    torch.manual_seed(0)
    kinds = _kinds(Attend())
    assert kinds["att.in_proj_weight"] == kinds["att.in_proj_bias"] == "kfac"
    assert kinds["att.out_proj.weight"] == kinds["att.out_proj.bias"] == "kfac"
    for model in (Attend(cross=True), Attend(add_bias_kv=True)):
        kinds = _kinds(model)
        assert {kinds[n] for n in kinds if n.startswith("att.")} == {"diag"}, kinds


def test_frozen_projections_leave_the_others_their_factors():
    torch.manual_seed(0)
    model = Attend()
    model.att.in_proj_weight.requires_grad_(False)
    model.att.in_proj_bias.requires_grad_(False)
    kinds = _kinds(model)
    assert "att.in_proj_weight" not in kinds and kinds["att.out_proj.weight"] == "kfac"


def _attention_batch():
    torch.manual_seed(0)
    model = SelfAttention(use_weights=True).double()
    g = torch.Generator().manual_seed(2)
    X = torch.randn(4, 5, 3, generator=g, dtype=torch.float64)
    return model, X, torch.randint(0, 3, (4, 5), generator=g)


def _recorded(model, X, y, kind, fisher, what="stats"):
    pre = ig.nn.Preconditioner(model, curvature=kind, fisher=fisher)
    F.cross_entropy(model(X).reshape(-1, 3), y.reshape(-1)).backward()
    pre.step()
    return getattr(pre.curvature, what)()


def _assert_same(got, reference):
    assert got.keys() == reference.keys()
    for k in got:
        torch.testing.assert_close(got[k], reference[k], rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("kind", ["kfac", "diag"])
def test_the_optimizers_hooks_record_what_the_space_computes(kind):
    """The attention's weights feed the loss too: both outputs' gradients reach the rule through the hooks."""
    model, X, y = _attention_batch()
    reference = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y).curvature(kind, "exact").stats()
    _assert_same(_recorded(model, X, y, kind, "exact"), reference)


class Pooled(torch.nn.Module):
    """One output per example (the empirical Fisher's columns are then the examples' on every route)."""

    def __init__(self):
        super().__init__()
        self.inner = SelfAttention(use_weights=True)

    def forward(self, x):
        return self.inner(x).mean(1)


def _pooled_batch():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    return Pooled().double(), torch.randn(4, 5, 3, generator=g, dtype=torch.float64), torch.randint(0, 3, (4,), generator=g)


def test_the_empirical_diagonal_from_the_users_backward_equals_the_whole_network_routes():
    """The empirical Fisher reads both outputs' gradients from the user's own backward (no pass of its own); its
    exact diagonal equals the one without the attention rule (the parameters then go through the whole network)."""
    got = _recorded(*_pooled_batch(), "diag", "empirical", "diagonal")
    rule = next(r for r in layers.RULES if r.name == "attention")
    layers.unregister("attention")
    try:
        # a model of its own, without the first optimizer's hooks
        reference = _recorded(*_pooled_batch(), "diag", "empirical", "diagonal")
    finally:
        layers.register(rule, before="module")
    assert [r.name for r in layers.RULES][-2:] == ["attention", "module"]
    _assert_same(got, reference)


class CausalEncoder(torch.nn.Module):
    def __init__(self, V):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(E, H, 16, dropout=0.0, batch_first=True, norm_first=True)
        self.emb = torch.nn.Embedding(V, E)
        self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = torch.nn.Linear(E, V)

    def forward(self, x):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.out(self.enc(self.emb(x), mask=mask, is_causal=True))


@pytest.mark.parametrize("kind", ["kfac", "ekfac"])
def test_a_transformer_encoder_trains_with_its_attention_factored(kind):
    torch.manual_seed(0)
    V = 7
    model = CausalEncoder(V)
    opt = ig.nn.NaturalGradient(model, curvature=kind)
    g = torch.Generator().manual_seed(1)
    X = torch.randint(0, V, (8, 6), generator=g)
    y = torch.roll(X, 1, dims=1)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = F.cross_entropy(model(X).reshape(-1, V), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(v == v for v in losses) and losses[-1] < 0.7 * losses[0], losses
    blocks = {n: b.kind for b in opt.preconditioner.curvature.blocks for n in b.names}
    assert blocks["enc.layers.0.self_attn.in_proj_weight"] == kind
    assert blocks["enc.layers.1.self_attn.out_proj.weight"] == kind
