"""Half precision, autocast, memory layouts and random layers: the statistics stay those of the definitions.

* Half-precision models and autocast forwards (the layer inputs half or float32, the output gradients half):
  every per-example representation sums its statistics in float32 and matches the float64 curvature up to
  the rounding of the half-precision forward;
* non-contiguous inputs (channels-last tensors and models, permuted and transposed views) give the same
  statistics as contiguous ones;
* dropout active in training mode: a warning (documented), and every representation is the curvature of the
  one network sampled by its forward pass.
"""
import warnings

import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402

# preconditioners here keep the default trust region without a learning rate (warned once each)
pytestmark = pytest.mark.filterwarnings("ignore:Preconditioner. kl_clip is set but no lr:UserWarning")
from . import _dense_reference as ref  # noqa: E402
from ._dense_reference import rel  # noqa: E402

KINDS = ["kfac", "ekfac", "diag", "block"]


def cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"), torch.nn.Tanh(),
                               torch.nn.Conv2d(3, 2, 2, stride=2), torch.nn.Flatten(), torch.nn.Linear(2 * 2 * 2, 3))


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


class Mixing(torch.nn.Module):
    """A custom layer owning a parameter (per-example rows by the module's own vjp)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.eye(8) + 0.1 * torch.randn(8, 8))

    def forward(self, x):
        return x @ self.w


def custom():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), Mixing(), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def transposed():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(2, 3, 2), torch.nn.ConvTranspose2d(3, 2, 2), torch.nn.Flatten(),
                               torch.nn.Linear(2 * 4 * 4, 3))


NETS = {"mlp": mlp, "cnn": cnn, "custom": custom, "transposed": transposed}


def batch(name, n=16):
    g = torch.Generator().manual_seed(1)
    X = torch.randn((n, 2, 4, 4) if name in ("cnn", "transposed") else (n, 8), generator=g)
    return X, torch.randint(0, 3, (n,), generator=g)


# ----------------------------------------------------------------- half precision
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 3e-2), (torch.float16, 5e-3)])
@pytest.mark.parametrize("kind", KINDS)
def test_half_precision_models_sum_statistics_in_float32(kind, dtype, tol):
    """A half-precision CNN: float32 statistics within half-precision rounding of the float64 ones."""
    X, _ = batch("cnn", 6)
    exact = ig.nn.ParameterSpace(cnn().double(), "categorical", data=X.double()).curvature(kind)
    half = ig.nn.ParameterSpace(cnn().to(dtype), "categorical", data=X.to(dtype)).curvature(kind)
    stats = half.stats()
    assert {t.dtype for t in stats.values()} == {torch.float32}
    assert all(bool(torch.isfinite(t).all()) for t in stats.values())
    assert rel(half.to_dense().double(), exact.to_dense()) < tol


@pytest.mark.parametrize("name", list(NETS))
@pytest.mark.parametrize("kind", KINDS)
def test_autocast_statistics_from_the_users_backward(kind, name):
    """The plain loop under CPU autocast: half output gradients, layer inputs of either precision
    (custom layers and transposed convolutions are run again, outside autocast, for their rows)."""
    X, y = batch(name)
    model, twin = NETS[name](), NETS[name]()
    pre = ig.nn.Preconditioner(model, curvature=kind, fisher="exact")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(X), y)
    loss.backward()
    assert pre.step()
    ref_pre = ig.nn.Preconditioner(twin, curvature=kind, fisher="exact")
    torch.nn.functional.cross_entropy(twin(X), y).backward()
    assert ref_pre.step()
    got, want = pre.curvature.stats(), ref_pre.curvature.stats()
    assert {t.dtype for t in got.values()} == {torch.float32}
    for key in want:
        assert rel(got[key].double(), want[key].double()) < 3e-2, key


@pytest.mark.parametrize("kind", KINDS)
def test_curvature_built_under_autocast(kind):
    """``space.curvature`` called inside an autocast region (its own forward runs in bfloat16)."""
    X, _ = batch("cnn", 6)
    space = ig.nn.ParameterSpace(cnn(), "categorical", data=X)
    want = space.curvature(kind).to_dense()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = space.curvature(kind)
    assert {t.dtype for t in got.stats().values()} == {torch.float32}
    assert rel(got.to_dense(), want) < 3e-2


@pytest.mark.parametrize("kind", KINDS)
def test_float16_autocast_sums_of_squares_do_not_overflow(kind):
    """Inputs of size ~60 on 256 examples: the input factor's entries (~1e6) overflow float16's 65504."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    space = ig.nn.ParameterSpace(model, "categorical", data=60 * torch.randn(256, 8))
    want = space.curvature(kind).stats()
    with torch.autocast("cpu", dtype=torch.float16):
        got = space.curvature(kind).stats()
    assert all(t.dtype == torch.float32 and bool(torch.isfinite(t).all()) for t in got.values())
    assert max(rel(got[k].double(), want[k].double()) for k in want) < 0.1


# ----------------------------------------------------------------- memory layouts
def _all_kinds(space):
    # (not EKFAC-reduce: on these small batches its input factors are singular, and with weight sharing its
    # scales then depend on the eigenbasis chosen in their null space, which rounding alone changes)
    out = {k: space.curvature(k).to_dense() for k in KINDS}
    out["kfac-reduce"] = space.curvature("kfac", kfac_approx="reduce").to_dense()
    return out


LAYOUTS = {
    "channels_last_input": lambda X: (cnn(), X.contiguous(memory_format=torch.channels_last)),
    "channels_last_model": lambda X: (cnn().to(memory_format=torch.channels_last),
                                      X.contiguous(memory_format=torch.channels_last)),
    "permuted_view": lambda X: (cnn(), X.transpose(2, 3).contiguous().transpose(2, 3)),
    "broadcast_view": lambda X: (cnn(), X[..., None].expand(-1, -1, -1, -1, 2)[..., 0]),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_non_contiguous_convolution_inputs(layout):
    X, _ = batch("cnn", 5)
    X = X.double()
    want = _all_kinds(ig.nn.ParameterSpace(cnn().double(), "categorical", data=X))
    model, Xv = LAYOUTS[layout](X)
    assert not Xv.is_contiguous() or layout == "broadcast_view"
    got = _all_kinds(ig.nn.ParameterSpace(model.double(), "categorical", data=Xv))
    for k in want:
        assert rel(got[k], want[k]) < 1e-12, k


@pytest.mark.parametrize("shape", ["NC", "NTC"])
def test_transposed_linear_inputs(shape):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    raw = torch.randn(3, 6, dtype=torch.float64) if shape == "NC" else torch.randn(4, 3, 5, dtype=torch.float64)
    Xv = raw.T if shape == "NC" else raw.transpose(1, 2)     # (6, 3) or (4, 5, 3), not contiguous
    got = _all_kinds(ig.nn.ParameterSpace(model, "categorical", data=Xv))
    want = _all_kinds(ig.nn.ParameterSpace(model, "categorical", data=Xv.contiguous()))
    for k in want:
        assert rel(got[k], want[k]) < 1e-12, k


# ----------------------------------------------------------------- dropout in training mode
class RecordedDropout(torch.nn.Module):
    """Inverted dropout that records the masks it draws, or replays a fixed one."""

    def __init__(self, p=0.5):
        super().__init__()
        self.p, self.fixed, self.drawn = p, None, []

    def forward(self, h):
        mask = self.fixed
        if mask is None:
            mask = (torch.rand(h.shape, dtype=h.dtype) > self.p).to(h.dtype) / (1 - self.p)
            self.drawn.append(mask)
        return h * mask


@pytest.mark.parametrize("kind", ["dense", "implicit", "diag", "block"])
def test_a_random_forward_gives_the_curvature_of_the_sampled_network(kind):
    """Outputs and Jacobian from the same forward pass: the metric of the network with that mask."""
    torch.manual_seed(0)
    drop = RecordedDropout()
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), drop, torch.nn.Linear(6, 3)).double()
    X = torch.randn(5, 4, dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)    # its shape probe draws a mask
    drop.drawn.clear()
    C = space.curvature(kind)
    M = C.to_dense() if kind != "implicit" else C @ torch.eye(space.dim, dtype=X.dtype)
    assert len(drop.drawn) == 1
    drop.fixed = drop.drawn[0]
    G = ref.ggn(model, (X,), "categorical")
    want = {"dense": G, "implicit": G, "diag": torch.diag(torch.diagonal(G)),
            "block": ref.block_diagonal(G, model)}[kind]
    assert rel(M, want) < 1e-10


def test_active_dropout_warns_and_every_representation_builds():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.Dropout(0.3), torch.nn.Flatten(),
                                torch.nn.Linear(12, 3)).double()
    X = torch.randn(3, 2, 4, 4, dtype=torch.float64)
    with pytest.warns(UserWarning, match="Dropout.*training mode"):
        space = ig.nn.ParameterSpace(model, "categorical", data=X)
    for kind in KINDS + ["dense", "implicit"]:
        C = space.curvature(kind)
        assert bool(torch.isfinite(C @ torch.ones(space.dim, dtype=X.dtype)).all())
    for quiet in (lambda: model.eval(), lambda: setattr(model.train()[1], "p", 0.0)):
        quiet()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ig.nn.ParameterSpace(model, "categorical", data=X)


@pytest.mark.parametrize("kind", ["kfac", "diag", "dense"])
def test_the_optimizers_train_with_dropout_without_a_warning(kind):
    """Training with dropout is what users do: the statistics recorded from their forward share its masks (a
    forward of the optimizer's own samples the same random network), so the warning meant for a parameter space
    (call model.eval()) is not given by the optimizers, whose step still moves the parameters."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(8, 3)).double()
    X, y = torch.randn(16, 4, dtype=torch.float64), torch.randint(0, 3, (16,))
    before = [p.detach().clone() for p in model.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt = ig.nn.NaturalGradient(model, curvature=kind)
        for _ in range(2):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(X), y).backward()
            opt.step()
    assert all(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))
    with pytest.warns(UserWarning, match="Dropout.*training mode"):   # a space of the user's own still says so
        ig.nn.ParameterSpace(model, "categorical", data=X)


# ----------------------------------------------------------------- statistics kept in half precision
HALF_UNIT = {torch.bfloat16: 2.0 ** -8}   # unit roundoff


def _preconditioned(kind, factor_dtype, **options):
    model = mlp()
    pre = ig.nn.Preconditioner(model, curvature=kind, factor_dtype=factor_dtype, kl_clip=None, fisher="exact",
                               damping=1e-2, **options)
    X, y = batch("mlp", 64)
    torch.nn.functional.cross_entropy(model(X), y).backward()
    raw = {n: p.grad.clone() for n, p in model.named_parameters()}
    pre.step()
    return {n: p.grad for n, p in model.named_parameters()}, raw, pre


def _flat(d):
    return torch.cat([t.reshape(-1) for t in d.values()])


@pytest.mark.parametrize("dtype", [torch.bfloat16])
@pytest.mark.parametrize("kind,options", [("kfac", {}), ("kfac", {"inverse": "eigen"}), ("ekfac", {}), ("diag", {}),
                                          ("block", {}), ("dense", {})])
def test_statistics_kept_in_half_precision_are_decomposed_and_applied_in_float32(kind, options, dtype):
    """``factor_dtype=torch.bfloat16`` halves the statistics' memory: they are stored in it, and
    decomposed and solved in float32 (LAPACK has no half precision).  The direction equals the float32 solve of
    the stored (rounded) statistics, and differs from the one of unrounded statistics by a few unit roundoffs."""
    direction, raw, pre = _preconditioned(kind, dtype, **options)
    est = pre.estimate
    assert {t.dtype for t in est.curvature.stats().values()} == {dtype}
    assert all(t.dtype == torch.float32 and bool(torch.isfinite(t).all()) for t in direction.values())
    upcast = est.curvature.with_stats({k: t.float() for k, t in est.curvature.stats().items()})
    again = upcast.precompute(1e-2).solve(None, raw, 1e-2)
    torch.testing.assert_close(_flat(direction), _flat(again), rtol=1e-5, atol=1e-7)
    exact, _, _ = _preconditioned(kind, torch.float32, **options)
    err = float((_flat(direction) - _flat(exact)).norm() / _flat(exact).norm())
    assert 0 < err < 8 * HALF_UNIT[dtype], err


@pytest.mark.parametrize("kind", ["kfac", "ekfac", "shampoo", "soap"])
def test_natural_gradient_trains_with_bfloat16_statistics_as_with_float32(kind):
    """The default step rules of each kind, 30 steps: bfloat16 statistics reach the loss float32 ones reach."""
    def train(factor_dtype):
        model = mlp()
        opt = ig.nn.NaturalGradient(model, curvature=kind, factor_dtype=factor_dtype, curvature_update_period=1)
        X, y = batch("mlp", 64)
        losses = []
        for _ in range(30):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(X), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
        return losses
    half, full = train(torch.bfloat16), train(torch.float32)
    assert full[-1] < 0.8 * full[0]
    assert half[-1] < 0.8 * half[0] and abs(half[-1] - full[-1]) < 0.05 * full[-1], (half[-1], full[-1])


def test_float16_statistics_are_refused():
    with pytest.raises(ValueError, match="bfloat16"):
        ig.nn.NaturalGradient(mlp(), factor_dtype=torch.float16)
