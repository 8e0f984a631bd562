"""Blocked Gram products, K-FAC inverses, the meta-device shape probe and BatchNorm."""
import copy
import math

import pytest

torch = pytest.importorskip("torch")
from torch.func import functional_call, jacrev  # noqa: E402

import infogeo as ig  # noqa: E402

# preconditioners here keep the default trust region without a learning rate (warned once each)
pytestmark = pytest.mark.filterwarnings("ignore:Preconditioner. kl_clip is set but no lr:UserWarning")
from infogeo.nn.curvature import _backprop as bp, _reducers as red  # noqa: E402
from .conftest import categorical_Gz, flat, mlp, reference_metric  # noqa: E402
from .test_space import EXACT, rand_like, rel  # noqa: E402


# ----------------------------------------------------------------- Gram products
@pytest.mark.parametrize("n", [5, 256, 600])
def test_gram_matches_matmul(n):
    a = torch.randn(37, n, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
    ref = a.T @ a
    assert rel(red.gram(a), ref) < 1e-14
    big = torch.full((n + 1, n + 1), float("nan"), dtype=torch.float64)
    red.gram(a, out=big[:n, :n])  # a strided view is filled completely
    assert rel(big[:n, :n], ref) < 1e-14 and torch.isnan(big[n]).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gram_of_half_precision_rows_is_summed_in_float32(dtype):
    a = (300 * torch.rand(64, 300, generator=torch.Generator().manual_seed(1))).to(dtype)
    G = red.gram(a)
    ref = a.double().T @ a.double()          # entries ~ 64 * 300^2 / 3 overflow float16's 65504
    assert G.dtype == torch.float32 and torch.isfinite(G).all()
    assert rel(G.double(), ref) < 1e-6


def test_kfac_factors_under_autocast_are_float32():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    pre = ig.nn.Preconditioner(model)
    X, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(X), y)
    loss.backward()
    assert pre.step()
    stats = pre.curvature.stats()
    assert stats and all(t.dtype == torch.float32 for t in stats.values())
    A = stats["0/A"]  # block of the first layer: second moment of its float32 input [x, 1]
    xb = torch.cat([X, torch.ones(32, 1)], 1)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        h = model[1](model[0](X))            # the read-out's input, bfloat16 under autocast
    assert h.dtype == torch.bfloat16
    hb = torch.cat([h.double(), torch.ones(32, 1, dtype=torch.float64)], 1)
    assert rel(stats["1/A"].double(), hb.T @ hb / 32) < 1e-6   # summed in float32, not bfloat16
    assert rel(A.double(), (xb.T @ xb / 32).double()) < 1e-6


# ----------------------------------------------------------------- K-FAC inverses
def kron_blocks(inverse):
    model = mlp(sizes=(4, 6, 3))
    X = torch.randn(9, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    return space, space.curvature("kfac", inverse=inverse)


def block_vector(space, blk, seed=0):
    v = rand_like(space, seed)
    return {n: v[n] for n in blk.names}, torch.cat([v[n].reshape(-1) for n in blk.names])


def to_wbar(blk, d):
    """Row-major vec of [W b] from a {name: tensor} block vector (the order of kron(G, A))."""
    return blk.join(d).reshape(-1)


def test_kfac_eigen_inverse_is_exact_damped_inverse():
    space, K = kron_blocks("eigen")
    lam = 3e-2
    for blk in K.blocks:
        d, _ = block_vector(space, blk)
        M = torch.kron(blk.G, blk.A)
        ref = torch.linalg.solve(M + lam * torch.eye(M.shape[0], dtype=M.dtype), to_wbar(blk, d))
        assert rel(to_wbar(blk, blk.solve(d, lam)), ref) < 1e-10


def test_kfac_tikhonov_inverse_is_factored_damping():
    space, K = kron_blocks("tikhonov")
    lam = 3e-2
    for blk in K.blocks:
        d, _ = block_vector(space, blk)
        A, G = blk.A, blk.G
        pi = math.sqrt((torch.trace(A) / A.shape[0]) / (torch.trace(G) / G.shape[0]))
        IA, IG = torch.eye(A.shape[0], dtype=A.dtype), torch.eye(G.shape[0], dtype=G.dtype)
        M = torch.kron(G + math.sqrt(lam) / pi * IG, A + pi * math.sqrt(lam) * IA)
        ref = torch.linalg.solve(M, to_wbar(blk, d))
        got = to_wbar(blk, blk.solve(d, lam))
        assert rel(got, ref) < 1e-10
        # an approximation of the damped inverse, not the same operator
        exact = torch.linalg.solve(torch.kron(G, A) + lam * torch.eye(M.shape[0], dtype=M.dtype), to_wbar(blk, d))
        assert rel(got, exact) > 1e-3
    # the option survives averaging (the optimizer's EMA) and bad names are refused
    assert all(b.inverse == "tikhonov" for b in K.ema(K, 0.9).blocks)
    with pytest.raises(ValueError, match="unknown K-FAC inverse 'cholesky'"):
        space.curvature("kfac", inverse="cholesky")


# ----------------------------------------------------------------- shape probe
class DataDependent(torch.nn.Module):
    """Python control flow on values and a tensor held outside parameters/buffers: no meta-device run."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3).double()
        self.offset = torch.ones(3, dtype=torch.float64)

    def forward(self, x):
        z = self.lin(x) + self.offset
        return z if float(z.detach().sum()) > -1e9 else -z


def test_shape_probe_falls_back_to_real_forward():
    torch.manual_seed(0)
    model = DataDependent()
    X = torch.randn(5, 4, dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    assert space.batch_size == 5 and torch.allclose(space.outputs, model(X))
    d = space.curvature("diag").diagonal()
    G = reference_metric(model, X, categorical_Gz)
    assert rel(flat(d, space.names), torch.diagonal(G)) < EXACT


# ----------------------------------------------------------------- BatchNorm
def bn_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.BatchNorm1d(5), torch.nn.Tanh(),
                               torch.nn.Linear(5, 3)).double()


def coupled_reference(model, X):
    """(1/N) sum_n J_n^T G_z J_n with J the whole batch's Jacobian (BatchNorm couples the rows)."""
    m = copy.deepcopy(model)
    p = {n: q.detach() for n, q in m.named_parameters()}
    bufs = {n: b.clone() for n, b in m.named_buffers()}
    f = lambda q: functional_call(m, {**q, **{n: b.clone() for n, b in bufs.items()}}, (X,))  # noqa: E731
    J = jacrev(f)(p)
    z = f(p).detach()
    Jm = torch.cat([J[n].reshape(tuple(z.shape) + (-1,)) for n in p], -1)
    return torch.einsum("nmp,nmk,nkq->pq", Jm, categorical_Gz(z), Jm) / z.shape[0]


def test_batchnorm_training_mode_exact_where_defined_and_untouched():
    model = bn_model()
    X = torch.randn(8, 4, dtype=torch.float64)
    before = copy.deepcopy(model.state_dict())
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    G = coupled_reference(model, X)
    v = rand_like(space)
    assert rel(flat(space.metric.mv(None, v), space.names), G @ flat(v, space.names)) < EXACT
    assert rel(space.curvature("dense").to_dense(), G) < EXACT
    C = space.curvature("implicit")
    C.solve(None, v, damping=1e-2)
    for kind in ("diag", "kfac", "ekfac", "block"):
        with pytest.raises(ValueError, match=r"'1'.*BatchNorm1d in training mode.*model\.eval\(\)"):
            space.curvature(kind)
    for k, t in model.state_dict().items():  # running statistics and counters included
        assert torch.equal(t, before[k]), k
    assert all(p.grad is None for p in model.parameters())


def test_batchnorm_eval_mode_per_example_curvatures():
    model = bn_model()
    X = torch.randn(8, 4, dtype=torch.float64)
    with torch.no_grad():
        model[0](X)  # a little non-trivial running statistics
        model[1].running_mean.normal_()
        model[1].running_var.uniform_(0.5, 2.0)
    model.eval()
    before = copy.deepcopy(model.state_dict())
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    G = reference_metric(model, X, categorical_Gz)
    d = space.curvature("diag").diagonal()
    assert rel(flat(d, space.names), torch.diagonal(G)) < EXACT
    for k, t in model.state_dict().items():
        assert torch.equal(t, before[k]), k


def test_diagonal_squares_inputs_in_chunks(monkeypatch, small_mlp):
    """The chunked b2^T (a*a) equals the one-shot product (many one-row chunks here)."""
    from infogeo.nn.curvature import _reducers
    model, X = small_mlp
    monkeypatch.setattr(_reducers, "SQUARE_CHUNK_ELEMENTS", 1)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    d = space.curvature("diag").diagonal()
    G = reference_metric(model, X, categorical_Gz)
    assert rel(flat(d, space.names), torch.diagonal(G)) < EXACT


def test_gradients_taken_at_the_layer_output_edge_survive_in_place_activations():
    # ReLU(inplace=True) overwrites the Linear output after the layer; gradients are
    # taken at the output's autograd edge, so they are those of the pre-activation
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(inplace=True),
                                torch.nn.Linear(5, 3)).double()
    X = torch.randn(9, 4, dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    dense = space.curvature("dense").to_dense()
    d = space.curvature("diag").diagonal()
    got = torch.cat([d[n].reshape(-1) for n in space.names])
    torch.testing.assert_close(got, dense.diagonal(), rtol=1e-10, atol=1e-12)


def test_capture_does_not_keep_layer_outputs_alive():
    import weakref
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))
    space = ig.nn.ParameterSpace(model, "categorical", data=torch.randn(8, 4))
    refs = []
    h = model[0].register_forward_hook(lambda m, a, out: refs.append(weakref.ref(out)))
    freed_during_backward = []
    try:
        bp.capture(space, lambda z: torch.ones((1,) + z.shape),
                   reducer=lambda layer, cols: lambda j, g: freed_during_backward.append(refs[0]() is None))
    finally:
        h.remove()
    # tanh saves its result, not its input: the pre-activation of layer 0 is already
    # freed while the columns are back-propagated, and every layer got its gradient
    assert len(refs) == 1 and freed_during_backward == [True, True]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")  # the asymmetric case, on purpose
@pytest.mark.parametrize("conv", [
    lambda: torch.nn.Conv1d(2, 3, 3, padding=1, padding_mode="circular", stride=2),
    lambda: torch.nn.Conv1d(2, 3, 3, padding="same", dilation=2),
    lambda: torch.nn.Conv2d(2, 3, (2, 3), padding=(1, 0), stride=(1, 2), dilation=(2, 1), padding_mode="reflect"),
    lambda: torch.nn.Conv2d(2, 3, 4, padding="same"),
    lambda: torch.nn.Conv3d(2, 3, 2, padding=1, stride=(1, 2, 1), padding_mode="replicate")])
def test_convolution_patches_reproduce_the_layer(conv):
    """K-FAC's view of a convolution as a Linear over input patches is the layer itself."""
    from infogeo.nn.curvature.layers.conv import ConvRule
    torch.manual_seed(0)
    m = conv().double()
    x = torch.randn(2, 2, *([6] * len(m.kernel_size)), dtype=torch.float64)
    layer = bp.Layer("m", m, {"weight": "weight", "bias": "bias"}, inputs=(x,))
    with torch.no_grad():
        got = ConvRule().ordered_inputs(layer) @ m.weight.reshape(3, -1).T + m.bias
        assert rel(got, m(x).flatten(2).transpose(1, 2)) < 1e-14


def test_foreign_uses_are_found_in_lists_kwargs_and_nested_arguments_but_not_inside_the_owner():
    """A parameter read by a torch function while its owning module is not running is a foreign use, however the
    function receives it (a list for cat, a keyword, a tuple in a list); inside its owner it is not."""
    from infogeo.nn.curvature._backprop import owners
    from infogeo.nn.curvature.uses import ForeignUses

    lin, other = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
    model = torch.nn.ModuleDict({"lin": lin, "other": other})
    x = torch.randn(2, 3)
    uses = {
        "plain": lambda: lin(x),
        "list": lambda: torch.cat([x, lin.weight]),
        "keyword": lambda: torch.nn.functional.linear(x, weight=lin.weight),
        "nested": lambda: torch.stack([t for t in ((x[0], lin.bias),)[0]]),
        "metadata only": lambda: torch.zeros(lin.weight.size()),
    }
    want = {"plain": set(), "list": {"lin.weight"}, "keyword": {"lin.weight"}, "nested": {"lin.bias"},
            "metadata only": set()}
    names = [n for n, _ in model.named_parameters()]
    for case, use in uses.items():
        watch = ForeignUses(dict(model.named_parameters()), owners(model, names))
        with watch:
            use()
        assert watch.foreign == want[case], case


def test_a_block_another_rank_holds_keeps_its_structure_and_no_statistics():
    """Owner-only statistics (:class:`~infogeo.nn.curvature.blocks.AbsentBlock`): a block kept as its structure has
    its kind, parameters and statistics' shapes and no tensor but empty ones; it leaves the curvature's structure
    as it was (averaged statistic by statistic with another of that structure), its statistics given back make a
    block of its own class again, and its products say that another rank holds it."""
    from infogeo.nn.curvature.blocks import AbsentBlock, structure
    from infogeo.nn import distributed as dd
    _, K = kron_blocks("tikhonov")
    kept = [i == 0 for i in range(len(K.blocks))]
    held = K.keeping(kept)
    assert held.same_structure(K) and held.stat_shapes() == K.stat_shapes()
    assert set(held.stats()) == {k for k in K.stats() if k.startswith("0/")}
    for b, orig in zip(held.blocks[1:], K.blocks[1:]):
        assert isinstance(b, AbsentBlock) and b.stats() == {} and b.kind == orig.kind and b.names == orig.names
        assert all(t.numel() == 0 for t in structure(b).stats().values())
        assert structure(b).weight == orig.weight and not b.factorised
        with pytest.raises(RuntimeError, match="held by another rank"):
            b.mv({n: torch.zeros(1) for n in b.names})
    back = held.with_stats(K.stats())
    assert [type(b) for b in back.blocks] == [type(b) for b in K.blocks]
    assert all(torch.equal(back.stats()[k], t) for k, t in K.stats().items())
    averaged = held.ema(held, 0.5)
    assert set(averaged.stats()) == set(held.stats()) and isinstance(averaged.blocks[1], AbsentBlock)
    assert set(held.held_diagonal()) == set(K.blocks[0].names)
    # one process: each tensor's mean is itself, on its owner (rank 0)
    ts = [torch.arange(3.0), torch.ones(2, 2, dtype=torch.float64)]
    assert all(torch.equal(a, b) for a, b in zip(dd.reduce_mean_to_owners(ts, [0, 0]), ts))
