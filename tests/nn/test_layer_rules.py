"""Layer rules on the models people bring: Hugging Face GPT-2 (Conv1D, keyword inputs, output_fn, tied
embeddings), weights used outside their module, masked positions, and a user's own registered rule.

Every curvature is checked against a dense float64 pullback written here from ``torch.func.jacrev`` and
closed-form output Hessians (nothing from infogeo's estimation code), or against an equivalent model whose
curvature is already checked (an ``nn.Linear`` in place of a transposed-weight layer).
"""
from functools import partial
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.func import functional_call, jacrev  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo.nn.curvature import layers as L  # noqa: E402

from ._dense_reference import block_diagonal, rel  # noqa: E402


def dense_pullback(model, call, z_of, H_of, names=None):
    r""":math:`\frac1N\sum_{n,t} J_{nt}^T H_{nt} J_{nt}` of ``z_of(call(model, params))`` ``(N, *mid, C)``."""
    p = {n: q.detach() for n, q in model.named_parameters() if q.requires_grad}
    names = list(p) if names is None else names

    def f(q):
        return z_of(call({**p, **q}))
    J = jacrev(f)({n: p[n] for n in names})
    z = f({}).detach()
    N, C = z.shape[0], z.shape[-1]
    Jm = torch.cat([J[n].reshape(z.numel(), -1) for n in names], dim=1).reshape(N, -1, C, sum(p[n].numel() for n in names))
    H = H_of(z.reshape(N, -1, C))
    return torch.einsum("ntcp,ntcd,ntdq->pq", Jm, H, Jm) / N


def softmax_hessian(z):
    s = torch.softmax(z, -1)
    return torch.diag_embed(s) - s.unsqueeze(-1) * s.unsqueeze(-2)


def flat(d, names):
    return torch.cat([d[n].reshape(-1) for n in names])


# ---------------------------------------------------------------- Hugging Face GPT-2
def tiny_gpt2(seed=0, **kw):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=23, n_positions=8, n_embd=8, n_layer=1, n_head=2, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, **kw)
    return transformers.GPT2LMHeadModel(cfg).double().eval()


@pytest.fixture(scope="module")
def gpt2_case():
    model = tiny_gpt2()
    ids = torch.randint(0, 23, (3, 5), generator=torch.Generator().manual_seed(1))
    space = ig.nn.ParameterSpace(model, "categorical", data={"input_ids": ids}, output_fn=lambda o: o.logits)
    ref = dense_pullback(model, lambda q: functional_call(model, q, (), {"input_ids": ids}), lambda o: o.logits,
                         softmax_hessian)
    return model, ids, space, ref


def test_gpt2_conv1d_projections_get_kronecker_blocks(gpt2_case):
    model, _, space, _ = gpt2_case
    for kind in ("kfac", "ekfac"):
        C = space.curvature(kind)
        factored = {n for b in C.blocks if b.kind == kind for n in b.names}
        conv1d = {f"{path}.{a}" for path, m in model.named_modules() if type(m).__name__ == "Conv1D"
                  for a in ("weight", "bias")}
        assert len(conv1d) == 8 and conv1d <= factored
        assert f"'{kind}': 4" in repr(C)


@pytest.mark.parametrize("kind", ["diag", "block", "dense"])
def test_gpt2_exact_curvatures_equal_the_dense_pullback(gpt2_case, kind):
    model, _, space, ref = gpt2_case
    C = space.curvature(kind)
    if kind == "diag":
        assert rel(flat(C.diagonal(), space.names), ref.diagonal()) < 1e-10
    else:
        M = C.to_dense()
        support = M != 0
        assert rel(M[support], ref[support]) < 1e-10
        if kind == "dense":
            assert rel(M, ref) < 1e-10


def test_gpt2_kfac_diagonal_blocks_are_exact_where_not_factored(gpt2_case):
    """K-FAC's non-Kronecker blocks (embeddings, the tied output weight, layer norms) are the exact diagonal."""
    model, _, space, ref = gpt2_case
    C = space.curvature("kfac")
    d = C.diagonal()
    exact = dict(zip(space.names, torch.split(ref.diagonal(), [space.layout.numels[n] for n in space.names])))
    for b in C.blocks:
        if b.kind == "diag":
            for n in b.names:
                assert rel(d[n].reshape(-1), exact[n]) < 1e-10, n


def test_t5_with_an_attention_mask_has_exact_blocks():
    """T5's trainable relative position bias reaches the fused attention kernel as its mask; the per-example
    loop (taken where vmap cannot batch the model) must compute attention by the composite kernel, which takes a
    mask that requires grad.  The blocks equal the dense reference's (T5's norm computes in float32: a float32
    tolerance)."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.T5Config(vocab_size=40, d_model=12, d_kv=6, d_ff=16, num_layers=1, num_decoder_layers=1,
                                num_heads=2, dropout_rate=0.0, relative_attention_num_buckets=4,
                                decoder_start_token_id=0)
    model = transformers.T5ForConditionalGeneration(cfg).eval()
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, 3:] = 0
    data = {"input_ids": torch.randint(0, 40, (2, 5), generator=g), "attention_mask": mask,
            "decoder_input_ids": torch.randint(0, 40, (2, 4), generator=g)}
    y = torch.randint(0, 40, (2, 4), generator=g)
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=data, targets=y, output_fn=lambda o: o.logits)
    ref = space.curvature("dense").to_dense()
    for method in ("exact", "mc"):
        B = space.curvature("block", method).to_dense()   # raised the fused kernel's RuntimeError
        assert torch.isfinite(B).all()
    B = space.curvature("block").to_dense()
    assert rel(B[B != 0], ref[B != 0]) < 1e-4


def test_conv1d_kronecker_factors_are_those_of_the_equivalent_linear():
    """A Conv1D layer (weight stored (in, out)) and nn.Linear with the transposed weight have the same K-FAC."""
    pytest.importorskip("transformers")
    from transformers.pytorch_utils import Conv1D
    torch.manual_seed(0)
    conv = Conv1D(5, 4).double()
    lin = torch.nn.Linear(4, 5).double()
    with torch.no_grad():
        lin.weight.copy_(conv.weight.T)
        lin.bias.copy_(conv.bias)
    X = torch.randn(6, 3, 4, dtype=torch.float64)
    for approx in ("expand", "reduce"):
        Kc = ig.nn.ParameterSpace(torch.nn.Sequential(conv, torch.nn.Tanh()), "euclidean", data=X).curvature(
            "kfac", kfac_approx=approx)
        Kl = ig.nn.ParameterSpace(torch.nn.Sequential(lin, torch.nn.Tanh()), "euclidean", data=X).curvature(
            "kfac", kfac_approx=approx)
        (bc,), (bl,) = Kc.blocks, Kl.blocks
        assert bc.transposed and not bl.transposed
        assert rel(bc.A, bl.A) < 1e-13 and rel(bc.G, bl.G) < 1e-13
        v = {"0.weight": torch.randn(4, 5, dtype=torch.float64), "0.bias": torch.randn(5, dtype=torch.float64)}
        vl = {"0.weight": v["0.weight"].T.contiguous(), "0.bias": v["0.bias"]}
        for op in ("mv", "solve"):
            got = Kc.mv(None, v) if op == "mv" else Kc.solve(None, v, damping=0.1)
            want = Kl.mv(None, vl) if op == "mv" else Kl.solve(None, vl, damping=0.1)
            assert rel(got["0.weight"].T, want["0.weight"]) < 1e-12 and rel(got["0.bias"], want["0.bias"]) < 1e-12
        # the dense form puts every entry at the transposed weight's place
        P = Kc.to_dense()
        perm = torch.arange(20).reshape(4, 5).T.reshape(-1)
        idx = torch.cat([perm, torch.arange(20, 25)])
        assert rel(P[idx][:, idx], Kl.to_dense()) < 1e-13


def test_conv1d_kfac_is_exact_for_one_layer_under_the_euclidean_metric():
    pytest.importorskip("transformers")
    from transformers.pytorch_utils import Conv1D
    torch.manual_seed(1)
    model = Conv1D(3, 4).double()
    X = torch.randn(5, 2, 4, dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, "euclidean", data=X)
    ref = dense_pullback(model, lambda q: functional_call(model, q, (X,)), lambda z: z,
                         lambda z: torch.eye(3, dtype=z.dtype).expand(z.shape + (3,)))
    for kind in ("kfac", "ekfac"):
        assert rel(space.curvature(kind).to_dense(), ref) < 1e-12


@pytest.mark.parametrize("curvature", ["kfac", "ekfac", "diag"])
@pytest.mark.parametrize("fisher", ["mc", "empirical"])
def test_gpt2_trains_with_natural_gradient_in_the_plain_loop(curvature, fisher):
    model = tiny_gpt2(seed=2).train()
    ids = torch.randint(0, 23, (4, 6), generator=torch.Generator().manual_seed(3))
    opt = ig.nn.NaturalGradient(model, curvature=curvature, fisher=fisher, output_fn=lambda o: o.logits,
                                curvature_update_period=2)    # the default step rule and learning rate
    losses = []
    for _ in range(10):
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0] - 0.1 and all(map(lambda v: v == v, losses)), losses
    blocks = {b.kind for b in opt.preconditioner.curvature.blocks}
    assert (curvature in blocks) if curvature != "diag" else blocks == {"diag"}


@pytest.mark.parametrize("kw", [{"curvature": "kfac"}, {"curvature": "kfac", "step_rule": "graft"},
                                {"curvature": "ekfac"}, {"curvature": "diag"}], ids=["kfac", "graft", "ekfac", "diag"])
def test_gpt2_gradient_checkpointing_trains_as_without_and_the_reentrant_kind_is_refused(kw):
    """Hugging Face's gradient checkpointing: without reentrance the run equals the plain one bit for bit; with
    ``use_reentrant=True`` the step raises, naming the setting to use (before: the blocks' curvature was taken as
    zero, unseen).  The parameters whose statistics come from per-example products of the whole network (the tied
    embedding, the position embedding) re-evaluate it under ``torch.func``, which refused the checkpointing's
    saved-tensor hooks and the ``requires_grad_`` of Hugging Face's input hook: every kind but the default failed."""
    def run(kwargs):
        model = tiny_gpt2(seed=2).train()
        if kwargs is not None:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        ids = torch.randint(0, 23, (4, 6), generator=torch.Generator().manual_seed(3))
        opt = ig.nn.NaturalGradient(model, output_fn=lambda o: o.logits, curvature_update_period=1, **kw)
        for _ in range(3):
            opt.zero_grad()
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
        flags = [m.gradient_checkpointing for m in model.modules() if hasattr(m, "gradient_checkpointing")]
        assert flags and all(flags) == (kwargs is not None)   # put back after each re-evaluation
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.equal(run({"use_reentrant": False}), run(None))
    with pytest.raises(ValueError, match="use_reentrant"):
        run({"use_reentrant": True})


# ---------------------------------------------------------------- a parameter is every use of it
#: ways of writing a read-out through the embedding's weight outside any module (``.T`` and ``.mT`` are
#: attributes, which reach the watch of the forward as a getter rather than as a function of the weight)
READOUTS = {"F.linear": lambda h, w: F.linear(h, w), "h @ w.T": lambda h, w: h @ w.T,
            "matmul(h, w.mT)": lambda h, w: torch.matmul(h, w.mT),
            "einsum": lambda h, w: torch.einsum("ntd,vd->ntv", h, w)}


class TiedLM(torch.nn.Module):
    """Embedding, a hidden layer, and the output projection tied to the embedding (by a module sharing it,
    or by one of the :data:`READOUTS`)."""

    def __init__(self, V=7, d=4, functional=True, readout="F.linear"):
        super().__init__()
        self.emb = torch.nn.Embedding(V, d)
        self.hidden = torch.nn.Linear(d, d)
        self.functional, self.readout = functional, READOUTS[readout]
        if not functional:
            self.head = torch.nn.Linear(d, V, bias=False)
            self.head.weight = self.emb.weight

    def forward(self, x):
        h = torch.tanh(self.hidden(self.emb(x)))
        return self.readout(h, self.emb.weight) if self.functional else self.head(h)


class TwiceOutside(torch.nn.Module):
    """A Linear layer's weight used again outside the layer (a second, functional application)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 3)
        self.b = torch.nn.Linear(3, 2)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        return self.b(torch.tanh(F.linear(h, self.a.weight)))


@pytest.mark.parametrize("make", [lambda: TiedLM(functional=False), TwiceOutside]
                         + [partial(TiedLM, readout=r) for r in READOUTS],
                         ids=["module-tie", "used-outside"] + [f"functional-tie {r}" for r in READOUTS])
def test_a_parameter_is_every_use_of_it(make):
    torch.manual_seed(0)
    model = make().double()
    X = (torch.randint(0, 7, (5, 3)) if isinstance(model, TiedLM) else torch.randn(5, 3, dtype=torch.float64))
    y = (torch.randint(0, 7, (5, 3)) if isinstance(model, TiedLM) else torch.randint(0, 2, (5,)))
    space = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y)
    ref = dense_pullback(model, lambda q: functional_call(model, q, (X,)), lambda z: z, softmax_hessian)
    assert rel(flat(space.curvature("diag").diagonal(), space.names), ref.diagonal()) < 1e-10
    blk = space.curvature("block").to_dense()
    assert rel(blk[blk != 0], ref[blk != 0]) < 1e-10
    for kind in ("kfac", "ekfac"):
        C = space.curvature(kind)
        d = C.diagonal()
        for b in C.blocks:
            if b.kind == "diag":
                i = torch.cat([torch.arange(space.layout.offsets[n], space.layout.offsets[n] + space.layout.numels[n])
                               for n in b.names])
                assert rel(flat(d, b.names), ref.diagonal()[i]) < 1e-10, (kind, b.names)
    # the empirical Fisher: one loss-gradient column per position
    zz = functional_call(model, dict(model.named_parameters()), (X,)).detach()
    g = torch.softmax(zz, -1) - F.one_hot(y, zz.shape[-1]).to(zz)
    emp = dense_pullback(model, lambda q: functional_call(model, q, (X,)), lambda z: z,
                         lambda z: g.reshape(z.shape).unsqueeze(-1) * g.reshape(z.shape).unsqueeze(-2))
    assert rel(flat(space.curvature("diag", "empirical").diagonal(), space.names), emp.diagonal()) < 1e-10


def test_tied_weights_train_with_the_optimizer_like_the_dense_direction():
    """The optimizer's diagonal direction on a tied model equals the dense reference's diagonal solve."""
    torch.manual_seed(0)
    model = TiedLM(functional=False).double()
    X, y = torch.randint(0, 7, (6, 3)), torch.randint(0, 7, (6, 3))
    ref = dense_pullback(model, lambda q: functional_call(model, q, (X,)), lambda z: z, softmax_hessian)
    pre = ig.nn.Preconditioner(model, "diag", damping=1e-2, fisher="exact", kl_clip=None, ema_decay=0.0)
    loss = F.cross_entropy(model(X).reshape(-1, 7), y.reshape(-1), reduction="sum") / X.shape[0]
    loss.backward()
    g = torch.cat([p.grad.reshape(-1).clone() for _, p in model.named_parameters()])
    pre.step()
    got = torch.cat([p.grad.reshape(-1) for _, p in model.named_parameters()])
    assert rel(got, g / (ref.diagonal() + 1e-2)) < 1e-10


# ---------------------------------------------------------------- masked positions
def test_kfac_input_factor_leaves_out_positions_without_loss():
    """One Linear layer, Euclidean metric at some positions only: K-FAC (expand) is exact, so A must average
    over the positions that carry a loss and G count only those."""
    from infogeo.nn.output_metrics import WeightedOutput, output_metric
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).double()
    X = torch.randn(5, 6, 4, dtype=torch.float64)
    w = (torch.rand(5, 6, generator=torch.Generator().manual_seed(2)) > 0.4).double()
    space = ig.nn.ParameterSpace(model, WeightedOutput(output_metric("euclidean"), w), data=X)
    ref = dense_pullback(model, lambda q: functional_call(model, q, (X,)), lambda z: z,
                         lambda z: w.reshape(5, 6, 1, 1) * torch.eye(3, dtype=z.dtype).expand(z.shape + (3,)))
    assert rel(space.curvature("kfac").to_dense(), ref) < 1e-12


def test_cross_entropy_ignore_index_masks_the_input_factor():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()
    X = torch.randn(4, 6, 4, dtype=torch.float64)
    y = torch.randint(0, 3, (4, 6))
    y[:, 3:] = -100
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)
    A = space.curvature("kfac").blocks[0].A
    a = torch.cat([X[:, :3].reshape(-1, 4), torch.ones(12, 1, dtype=torch.float64)], dim=1)
    assert rel(A, a.T @ a / 12) < 1e-13


# ---------------------------------------------------------------- outputs of the Jacobian's own forward
def test_sampled_dense_uses_the_outputs_of_the_differentiable_forward():
    """nn.TransformerEncoder in eval with a padding mask takes a fused path under no_grad whose outputs
    differ at padded positions; the empirical dense curvature must use the differentiable forward's."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=True)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.out = enc, torch.nn.Linear(8, 3)

        def forward(self, x, mask):
            return self.out(self.enc(x, src_key_padding_mask=mask))
    model = M().double().eval()
    X = torch.randn(3, 4, 8, dtype=torch.float64)
    mask = torch.zeros(3, 4, dtype=torch.bool)
    mask[:, 3] = True
    y = torch.randint(0, 3, (3, 4))
    space = ig.nn.ParameterSpace(model, "categorical", data=(X, mask), targets=y)
    call = lambda q: functional_call(model, q, (X, mask))  # noqa: E731
    z = call(dict(model.named_parameters())).detach()
    g = torch.softmax(z, -1) - F.one_hot(y, 3).to(z)
    ref = dense_pullback(model, call, lambda z: z, lambda zz: g.unsqueeze(-1) * g.unsqueeze(-2))
    assert rel(space.curvature("dense", "empirical").to_dense(), ref) < 1e-10


# ---------------------------------------------------------------- a user's own layer
class Scaled(torch.nn.Module):
    """A user's layer: z = 2 (W a) + b, with its own parameters; the generic rule gives it a diagonal block."""

    def __init__(self, i, o):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(o, i))
        self.bias = torch.nn.Parameter(torch.randn(o))

    def forward(self, a):
        return 2 * a @ self.weight.T + self.bias


class ScaledRule(L.LinearRule):
    name = "scaled"
    description = "a user's Linear with a factor 2"

    def matches(self, module, args, kwargs):
        return isinstance(module, Scaled) and len(args) == 1 and not kwargs

    def inputs(self, layer):
        a = 2 * layer.inputs[0]
        return a.reshape(a.shape[0], -1, a.shape[-1]), None


def test_a_registered_rule_gives_a_users_layer_kronecker_factors():
    torch.manual_seed(0)
    model = torch.nn.Sequential(Scaled(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2)).double()
    X = torch.randn(6, 4, dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    assert [b.kind for b in space.curvature("kfac").blocks] == ["kfac", "diag"]
    exact_diag = flat(space.curvature("diag").diagonal(), space.names)
    L.register(ScaledRule())
    try:
        assert L.RULES[0].name == "scaled" and "`scaled`" in L.support_table()
        K = space.curvature("kfac")
        assert [b.kind for b in K.blocks] == ["kfac", "kfac"]
        # the rule's rows reproduce the exact diagonal, and K-FAC stays block-diagonal
        assert rel(flat(space.curvature("diag").diagonal(), space.names), exact_diag) < 1e-12
        ref = dense_pullback(model, lambda q: functional_call(model, q, (X,)), lambda z: z, softmax_hessian)
        M = K.to_dense()
        assert bool((M[block_diagonal(torch.ones_like(ref), model) == 0] == 0).all())
    finally:
        L.unregister("scaled")
    assert all(r.name != "scaled" for r in L.RULES)


def test_registry_refuses_what_is_not_a_rule():
    with pytest.raises(TypeError, match="LayerRule"):
        L.register(object())
    with pytest.raises(ValueError, match="no layer rule named"):
        L.register(ScaledRule(), before="nope")
    with pytest.raises(ValueError, match="cannot be removed"):
        L.unregister("module")


def test_the_empirical_fisher_of_sequence_outputs_says_once_what_it_costs():
    from infogeo.nn import curvature
    curvature._WARNED.clear()
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).double()
    X, y = torch.randn(4, 5, 3, dtype=torch.float64), torch.randint(0, 2, (4, 5))
    space = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y)
    with pytest.warns(RuntimeWarning, match="5 positions per example back-propagates one column per position"):
        space.curvature("diag", "empirical")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        space.curvature("diag", "empirical")     # said once per output shape
        space.curvature("diag", "mc")


@pytest.mark.parametrize("kind", ["kfac", "ekfac"])
def test_factors_too_large_on_both_sides_fall_back_to_the_exact_diagonal_and_say_so(kind):
    """A layer whose factors would both exceed max_factor_dim gets its exact diagonal block instead (one side too
    wide keeps that side's diagonal: tests/nn/test_kron_layouts.py)."""
    from infogeo.nn.curvature import kfac
    kfac._SAID.clear()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 9)).double()
    X = torch.randn(6, 3, dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    with pytest.warns(RuntimeWarning, match=r"both sides of its Kronecker factors \(9 and 5\)"):
        C = space.curvature(kind, max_factor_dim=4)
    assert [b.kind for b in C.blocks] == [kind, "diag"]
    exact = space.curvature("diag").diagonal()
    got = C.diagonal()
    for n in ("2.weight", "2.bias"):
        assert rel(got[n], exact[n]) < 1e-12


@pytest.mark.parametrize("kind", ["kfac", "ekfac", "diag", "block", "dense", "implicit"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_models_solve_in_the_curvatures_precision(kind, dtype):
    """space.curvature(kind).solve(space.differential()) on a half-precision model: statistics in float32, the
    direction finite and returned in the parameters' dtype; a NaN right-hand side is refused."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).to(dtype)
    X, y = torch.randn(8, 3).to(dtype), torch.randint(0, 2, (8,))
    space = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y)
    C = space.curvature(kind)
    g = space.differential().components
    d = C.solve(None, g, damping=1e-2)
    assert all(d[n].dtype == dtype and bool(torch.isfinite(d[n]).all()) for n in space.names)
    ref = space.curvature(kind) if kind in ("dense", "implicit") else C
    d32 = ref.solve(None, {n: t.float() for n, t in g.items()}, damping=1e-2)
    for n in space.names:
        assert rel(d[n].float(), d32[n].float()) < 2e-2, n
    bad = dict(g, **{space.names[0]: torch.full_like(g[space.names[0]], float("nan"))})
    with pytest.raises(ValueError, match="NaN or inf"):
        C.solve(None, bad, damping=1e-2)


def test_an_embedding_bag_has_the_kronecker_factors_of_its_bags_token_counts():
    """K-FAC's block of an EmbeddingBag (mean, padding left out) against its definition: A = mean of c c^T over the
    bags' count vectors c (formed by hand), G = mean of the output-gradient outer products (the exact Fisher's
    columns, by autograd on the bag outputs)."""
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(6, 3, mode="mean", padding_idx=0).double()
    model = torch.nn.Sequential(bag, torch.nn.Tanh(), torch.nn.Linear(3, 4)).double()
    X = torch.tensor([[1, 2, 2, 0], [3, 0, 0, 0], [4, 5, 1, 3], [0, 0, 0, 0], [5, 5, 5, 2]])
    y = torch.tensor([0, 1, 2, 3, 1])
    space = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y)
    block = next(b for b in space.curvature("kfac", "exact").blocks if b.names == ["0.weight"])
    c = torch.zeros(5, 6, dtype=torch.float64)
    for n, row in enumerate(X.tolist()):
        kept = [t for t in row if t != 0]
        for t in kept:
            c[n, t] += 1.0 / len(kept)
    assert torch.allclose(block.A, c.T @ c / 5, rtol=1e-12, atol=1e-15)
    # G: the exact Fisher's columns at the bag outputs, sqrt(H) pulled back through the read-out
    h = bag(X)
    z = model[2](torch.tanh(h))
    p = torch.softmax(z, -1)
    H = torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
    J = torch.stack([torch.autograd.functional.jacobian(lambda u: model[2](torch.tanh(u)), h[n]) for n in range(5)])
    G = torch.einsum("nck,ncd,ndl->kl", J, H, J) / 5
    assert torch.allclose(block.G, G, rtol=1e-10, atol=1e-13)
