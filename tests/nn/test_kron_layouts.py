"""Kronecker blocks: one class per damped inverse, and factors with one diagonal side (Embedding inputs, a
vocabulary-sized output side), against dense float64 references written here from ``torch.func.jacrev``."""
import inspect
import math

import pytest

torch = pytest.importorskip("torch")
from torch.func import functional_call, jacrev  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo.nn.curvature import eigenbasis as EB  # noqa: E402
from infogeo.nn.curvature import kron as B  # noqa: E402
from infogeo.nn.curvature import ekfac, kfac, kinds, layers  # noqa: E402

from ._dense_reference import rel  # noqa: E402

F64 = torch.float64


def euclidean_pullback(model, X):
    r""":math:`\frac1N J^TJ` of the model's outputs (Euclidean output metric), over all its parameters."""
    p = {n: q.detach() for n, q in model.named_parameters()}
    J = jacrev(lambda q: functional_call(model, q, (X,)))(p)
    z = model(X)
    Jm = torch.cat([J[n].reshape(z.numel(), -1) for n in p], 1)
    return Jm.T @ Jm / z.shape[0]


def categorical_pullback(model, X):
    """The exact Fisher of a categorical output (softmax over the last axis), over all parameters."""
    p = {n: q.detach() for n, q in model.named_parameters()}
    J = jacrev(lambda q: functional_call(model, q, (X,)))(p)
    z = model(X).detach()
    C = z.shape[-1]
    Jm = torch.cat([J[n].reshape(z.numel(), -1) for n in p], 1).reshape(-1, C, sum(q.numel() for q in p.values()))
    s = torch.softmax(z.reshape(-1, C), -1)
    H = torch.diag_embed(s) - s.unsqueeze(-1) * s.unsqueeze(-2)
    return torch.einsum("rcp,rcd,rdq->pq", Jm, H, Jm) / z.shape[0]


def flat(d):
    return torch.cat([t.reshape(-1) for t in d.values()])


# ----------------------------------------------------------------- the damped inverses are classes

def train_losses(model, opt, X, y, steps):
    """The batch losses of ``steps`` optimizer steps on one batch (cross-entropy)."""
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(X), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses

def test_the_inverse_option_selects_the_block_class():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    space = ig.nn.ParameterSpace(model, "categorical", data=torch.randn(6, 3, dtype=F64))
    for word, cls in (("eigen", EB.ExactKronBlock), ("tikhonov", B.TikhonovKronBlock)):
        assert kinds.KINDS["kfac"].inverse(word) is cls
        K = space.curvature("kfac", inverse=word)
        assert all(type(b) is cls for b in K.blocks) and all(type(b) is cls for b in K.ema(K, 0.5).blocks)
    E = space.curvature("ekfac")
    assert all(type(b) is ekfac.EigenKronBlock for b in E.blocks)
    # EKFAC shares the eigenbasis, not K-FAC's inverse; no class switches on an option
    assert issubclass(ekfac.EigenKronBlock, EB.EigenbasisKronBlock)
    assert not issubclass(ekfac.EigenKronBlock, EB.ExactKronBlock)
    for cls in (B.KronBlock, EB.ExactKronBlock, B.TikhonovKronBlock, ekfac.EigenKronBlock):
        assert "inverse" not in inspect.signature(cls.__init__).parameters
    with pytest.raises(ValueError, match=r"expected one of \('eigen', 'tikhonov'\)"):
        space.curvature("kfac", inverse="cholesky")


# ----------------------------------------------------------------- Embedding
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_kfac_is_exact_for_one_layer_under_the_euclidean_metric(padding_idx):
    """One-hot inputs: A = diag(token counts)/(NT), G = T I, and G ⊗ A is the exact block diag(counts)/N ⊗ I
    (tokens repeat within a sequence; the padding row has no gradient, so no curvature)."""
    torch.manual_seed(0)
    model = torch.nn.Embedding(7, 3, padding_idx=padding_idx).double()
    X = torch.randint(0, 7, (5, 4), generator=torch.Generator().manual_seed(1))
    X[0, :2] = 2
    X[1, 1] = 2
    X[2, :3] = 5      # a token three times in one sequence
    ref = euclidean_pullback(model, X)
    space = ig.nn.ParameterSpace(model, "euclidean", data=X)
    v = {"weight": torch.randn(7, 3, dtype=F64, generator=torch.Generator().manual_seed(2))}
    lam = 0.1
    want = torch.linalg.solve(ref + lam * torch.eye(21, dtype=F64), v["weight"].reshape(-1))
    for kind, options in (("kfac", {"inverse": "eigen"}), ("kfac", {"inverse": "tikhonov"}), ("ekfac", {})):
        C = space.curvature(kind, **options)
        (b,) = C.blocks
        assert b.A.shape == (7,) and b.G.shape == (3, 3), kind        # diag(A) ⊗ G over the rows of the weight
        assert rel(C.to_dense(), ref) < 1e-12, kind
        assert rel(flat(C.diagonal()), ref.diagonal()) < 1e-12, kind
        if options.get("inverse") != "tikhonov":     # the factored damping is not the damped block
            assert rel(flat(C.solve(None, v, damping=lam)), want) < 1e-12, kind
    if padding_idx is not None:
        assert float(space.curvature("kfac").blocks[0].A[padding_idx]) == 0.0


def test_embedding_in_a_network_ekfac_scales_are_the_exact_blocks_diagonal_in_the_basis():
    """Embedding -> tanh -> Linear head, categorical outputs per position: EKFAC's scales of the Embedding are the
    diagonal of the exact block in the basis U_G ⊗ I, and K-FAC with reduce gives the exact diagonal block."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(6, 4, padding_idx=0), torch.nn.Tanh(),
                                torch.nn.Linear(4, 3)).double()
    X = torch.randint(0, 6, (4, 5), generator=torch.Generator().manual_seed(3))
    ref = categorical_pullback(model, X)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    E = space.curvature("ekfac")
    b = E.blocks[0]
    assert b.names == ["0.weight"] and b.A.dim() == 1
    idx = b.flat_index(space.layout)
    Ua, Ug = b.basis()
    assert Ua is None
    Q = torch.kron(Ug.contiguous(), torch.eye(6, dtype=F64))
    assert rel(b.s.reshape(-1), torch.diagonal(Q.T @ ref[idx][:, idx] @ Q)) < 1e-10
    R = space.curvature("kfac", kfac_approx="reduce")
    assert [blk.kind for blk in R.blocks] == ["kfac", "diag"]   # the mean of one-hot vectors is not one-hot
    d = R.diagonal()["0.weight"].reshape(-1)
    assert rel(d, ref.diagonal()[:24]) < 1e-10


def test_embedding_options_that_change_its_backward_take_the_generic_rule():
    for kw in ({"max_norm": 1.0}, {"scale_grad_by_freq": True}, {"sparse": True}):
        m = torch.nn.Embedding(5, 2, **kw)
        assert layers.rule_for(m, (torch.zeros(3, dtype=torch.long),), {}).name == "module", kw
    assert layers.rule_for(torch.nn.Embedding(5, 2), (torch.zeros(3, dtype=torch.long),), {}).name == "embedding"


# ----------------------------------------------------------------- a side too wide keeps its diagonal
def _vocab_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(9, 4), torch.nn.Tanh(), torch.nn.Linear(4, 9)).double()


@pytest.mark.parametrize("inverse", ["eigen", "tikhonov"])
def test_a_side_wider_than_max_factor_dim_keeps_its_diagonal(inverse):
    """Linear(9 -> 4) has a 10-wide input side and Linear(4 -> 9) a 9-wide output side: with max_factor_dim=8 they
    get diag(A) and diag(G), the other factor whole and equal to the full K-FAC's; the warning states the layout."""
    kfac._SAID.clear()
    model = _vocab_model()
    X = torch.randn(7, 3, 9, dtype=F64, generator=torch.Generator().manual_seed(4))
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    full = space.curvature("kfac", inverse=inverse)
    with pytest.warns(RuntimeWarning, match=r"its factors are diag\(G\) \(9\) ⊗ A \(5×5\) instead"):
        C = space.curvature("kfac", inverse=inverse, max_factor_dim=8)
    b0, b1 = C.blocks
    assert (b0.G.dim(), b0.A.dim(), b1.G.dim(), b1.A.dim()) == (2, 1, 1, 2)
    f0, f1 = full.blocks
    assert rel(b0.G, f0.G) < 1e-12 and rel(b0.A, f0.A.diagonal()) < 1e-12
    assert rel(b1.A, f1.A) < 1e-12 and rel(b1.G, f1.G.diagonal()) < 1e-12
    lam = 0.05
    v = {n: torch.randn_like(p, generator=torch.Generator().manual_seed(5)) for n, p in model.named_parameters()}
    for b in C.blocks:
        idx, M = b.dense(space.layout)
        assert rel(M, torch.kron(torch.diag(b.G) if b.G.dim() == 1 else b.G,
                                 torch.diag(b.A) if b.A.dim() == 1 else b.A)) < 1e-15
        vb = {n: v[n] for n in b.names}
        x = b.join(vb).reshape(-1)                  # row-major vec of [W b], the order of kron(G, A)
        got = b.join(b.solve(vb, lam)).reshape(-1)
        if inverse == "eigen":
            want = torch.linalg.solve(M + lam * torch.eye(M.shape[0], dtype=F64), x)
        else:
            gg, ga = b.tikhonov_split(lam)
            Gd = torch.diag(b.G) if b.G.dim() == 1 else b.G
            Ad = torch.diag(b.A) if b.A.dim() == 1 else b.A
            pi = math.sqrt(float(Ad.diagonal().mean() / Gd.diagonal().mean()))
            assert gg == pytest.approx(math.sqrt(lam) / pi) and ga == pytest.approx(math.sqrt(lam) * pi)
            want = torch.linalg.solve(torch.kron(Gd + gg * torch.eye(Gd.shape[0], dtype=F64),
                                                 Ad + ga * torch.eye(Ad.shape[0], dtype=F64)), x)
        assert rel(got, want) < 1e-10


def test_ekfac_with_a_diagonal_side_measures_the_exact_blocks_diagonal_in_its_basis():
    model = _vocab_model()
    X = torch.randn(6, 9, dtype=F64, generator=torch.Generator().manual_seed(6))
    ref = categorical_pullback(model, X)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    kfac._SAID.clear()
    with pytest.warns(RuntimeWarning, match="instead"):
        E = space.curvature("ekfac", max_factor_dim=8)
    for b in E.blocks:
        idx = b.flat_index(space.layout)
        Ua, Ug = (torch.eye(F.shape[0], dtype=F64) if U is None else U.contiguous()
                  for U, F in zip(b.basis(), (b.A, b.G)))
        Q = torch.kron(Ug, Ua)
        assert rel(b.s.reshape(-1), torch.diagonal(Q.T @ ref[idx][:, idx] @ Q)) < 1e-10
    # the checkpoint form of the bases (a diagonal side's identity is an empty tensor) goes back in
    saved = E.bases()
    assert saved["0/U_A"].numel() == 0 and saved["1/U_G"].numel() == 0
    E2 = space.curvature("ekfac", max_factor_dim=8)
    E2.adopt_bases(saved)
    assert all(a.basis()[1] is None or torch.equal(a.basis()[1], c.basis()[1]) for a, c in zip(E2.blocks, E.blocks))


@pytest.mark.parametrize("cls", [EB.ExactKronBlock, B.TikhonovKronBlock])
@pytest.mark.parametrize("diag", ["A", "G", None])
def test_solve_from_rows_equals_the_solve_of_their_gradient(cls, diag):
    g = torch.Generator().manual_seed(7)
    n_out, n_in, R = 5, 4, 3
    a, b = torch.randn(R, n_in, dtype=F64, generator=g), torch.randn(R, n_out, dtype=F64, generator=g)
    A = torch.randn(n_in + 1, n_in + 1, dtype=F64, generator=g)
    G = torch.randn(n_out, n_out, dtype=F64, generator=g)
    A, G = A @ A.T, G @ G.T
    A = A.diagonal().clone() if diag == "A" else A
    G = G.diagonal().clone() if diag == "G" else G
    blk = cls("w", "b", (n_out, n_in), A, G)
    V = b.T @ torch.cat([a, torch.ones(R, 1, dtype=F64)], 1)
    direct = blk.solve({"w": V[:, :-1], "b": V[:, -1]}, 0.1)
    rows = blk.solve_rows(b, a, 0.1)
    assert all(rel(rows[n], direct[n]) < 1e-12 for n in ("w", "b"))
    # the factorisation a distributed owner broadcasts (placeholders for a diagonal side's basis) goes back in
    other = cls("w", "b", (n_out, n_in), A, G)
    other.adopt([t.clone() for t in blk.factorisation(0.1)], 0.1)
    assert all(rel(other.solve({"w": V[:, :-1], "b": V[:, -1]}, 0.1)[n], direct[n]) == 0 for n in ("w", "b"))
    assert [t.shape for t in blk.factorisation_like()] == [t.shape for t in blk.factorisation(0.1)]


@pytest.mark.parametrize("curvature", ["kfac", "ekfac"])
def test_the_optimizer_trains_with_a_diagonal_side(curvature):
    model = _vocab_model()
    X = torch.randn(32, 9, dtype=F64, generator=torch.Generator().manual_seed(8))
    y = torch.randint(0, 9, (32,), generator=torch.Generator().manual_seed(9))
    kfac._SAID.clear()
    opt = ig.nn.NaturalGradient(model, curvature=curvature, max_factor_dim=8, curvature_update_period=1)
    with pytest.warns(RuntimeWarning, match="instead"):
        losses = train_losses(model, opt, X, y, 25)
    assert all(math.isfinite(v) for v in losses) and losses[-1] < 0.9 * losses[0]


@pytest.mark.parametrize("curvature", ["kfac", "ekfac"])
def test_the_optimizer_gives_an_embedding_its_kronecker_block(curvature):
    """Embedding -> tanh -> Linear on token sequences: the optimizer's curvature holds diag(A) ⊗ G for the Embedding
    (EKFAC's scales measured by the rule's scatter-adds) and training makes progress."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(11, 6, padding_idx=0), torch.nn.Tanh(),
                                torch.nn.Linear(6, 3)).double()
    X = torch.randint(0, 11, (24, 5), generator=torch.Generator().manual_seed(10))
    y = (X % 3).long()
    opt = ig.nn.NaturalGradient(model, curvature=curvature, curvature_update_period=1)
    losses = []
    for _ in range(25):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(X).reshape(-1, 3), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    (emb,) = [b for b in opt.preconditioner.estimate.solver.blocks if b.names == ["0.weight"]]
    assert emb.kind == curvature and emb.A.shape == (11,) and emb.G.shape == (6, 6)
    assert all(math.isfinite(v) for v in losses) and losses[-1] < 0.9 * losses[0]


# ----------------------------------------------------------------- the bytes a dense factor may take
def test_a_factor_over_max_factor_bytes_keeps_its_diagonal_the_exact_expectation_of_that_layout():
    """Linear(5 -> 40) under the categorical Fisher: its output factor (40² float64 entries, 12,800 bytes) is over
    max_factor_bytes=10,000, so the block is diag(G) ⊗ A with, written here from the softmax,
    diag(G) = mean_n s_n ⊙ (1 - s_n) (the diagonal of E[diag(s) - s sᵀ]) and A = mean_n [a_n, 1][a_n, 1]ᵀ;
    the warning names the layer, the side and the bytes; the optimizer trains with it, without NaN."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 40)).double()
    X = torch.randn(16, 5, dtype=F64, generator=torch.Generator().manual_seed(11))
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    kfac._SAID.clear()
    with pytest.warns(RuntimeWarning, match=r"layer '0': a dense Kronecker factor of its output side 40 would "
                                            r"take 12,800 bytes .*max_factor_bytes=10,000"):
        C = space.curvature("kfac", inverse="eigen", max_factor_bytes=10_000)
    (b,) = C.blocks
    assert b.G.dim() == 1 and b.A.shape == (6, 6)
    s = torch.softmax(model(X), -1).detach()
    a = torch.cat([X, torch.ones(16, 1, dtype=F64)], 1)
    assert rel(b.G, (s * (1 - s)).mean(0)) < 1e-12
    assert rel(b.A, a.T @ a / 16) < 1e-12
    # the layout's block is the exact Fisher's diagonal on the output side: diag(G) ⊗ A, solved exactly
    lam = 0.1
    M = torch.kron(torch.diag(b.G), b.A)
    v = {n: torch.randn_like(p, generator=torch.Generator().manual_seed(12)) for n, p in model.named_parameters()}
    want = torch.linalg.solve(M + lam * torch.eye(M.shape[0], dtype=F64), b.join(v).reshape(-1))
    assert rel(b.join(b.solve(v, lam)).reshape(-1), want) < 1e-10
    assert space.curvature("kfac").blocks[0].G.dim() == 2   # the default keeps it dense
    y = torch.randint(0, 40, (16,), generator=torch.Generator().manual_seed(13))
    opt = ig.nn.NaturalGradient(model, curvature="kfac", max_factor_bytes=10_000, curvature_update_period=1)
    losses = train_losses(model, opt, X, y, 20)
    assert opt.preconditioner.solver.blocks[0].G.dim() == 1
    assert all(math.isfinite(x) for x in losses) and losses[-1] < 0.9 * losses[0]


def test_the_default_limits_keep_a_4096_side_dense_and_a_vocabulary_side_diagonal():
    for itemsize in (4, 8):
        assert kfac.dense_side(4096, itemsize) and not kfac.dense_side(50257, itemsize)
    # raising max_factor_dim alone does not let a 10.1 GB float32 factor through: the bytes still guard it
    assert not kfac.dense_side(50257, 4, max_factor_dim=10 ** 6)
    assert kfac.dense_side(50257, 4, max_factor_dim=10 ** 6, max_factor_bytes=50257 ** 2 * 4)


@pytest.mark.parametrize("curvature", ["kfac", "ekfac", "shampoo"])
@pytest.mark.parametrize("option,value", [("max_factor_bytes", 0), ("max_factor_bytes", -1),
                                          ("max_factor_bytes", "1GB"), ("max_factor_dim", 2.5)])
def test_limits_that_cannot_be_used_are_refused_by_name(curvature, option, value):
    model = _vocab_model()
    space = ig.nn.ParameterSpace(model, "categorical", data=torch.randn(4, 9, dtype=F64),
                                 targets=torch.randint(0, 9, (4,)))
    with pytest.raises(ValueError, match=f"{option} must be a positive whole number .*got {value!r}"):
        space.curvature(curvature, "empirical" if curvature == "shampoo" else "exact", **{option: value})
