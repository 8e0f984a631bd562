"""The same training on CUDA and on the CPU: every captured curvature kind and step rule, in float64.

With the deterministic Fisher (``"exact"``) and the loss-gradient one (``"empirical"``) nothing is sampled,
so a CUDA run must equal the CPU run up to the rounding of its other summation order.  Skipped without a
CUDA device (CI has none); run where one is lent.
"""
import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from infogeo.nn.curvature.kinds import KINDS  # noqa: E402
from infogeo.nn.optim.step import STEP_RULES  # noqa: E402

F = torch.nn.functional
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

#: the kinds the optimizers record from the user's own forward and backward (the table's flag)
CAPTURED = [k for k, row in KINDS.items() if row.captured]


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(1, 3, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(3, 4, 3, stride=2), torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 3, 3))


class _SequenceModel(torch.nn.Module):
    """Embedding, one pre-norm encoder layer (attention, MLP), a vocabulary head: logits for every position."""

    def __init__(self, vocab=11, d=8):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.block = torch.nn.TransformerEncoderLayer(d, 2, 16, dropout=0.0, batch_first=True, norm_first=True)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.block(self.emb(tokens)))


def _batch(name, g):
    if name == "mlp":
        X = torch.randn(24, 6, generator=g, dtype=torch.float64)
        return X, torch.randint(0, 4, (24,), generator=g)
    if name == "cnn":
        # 48 examples: the last layer's 37 inputs span a full-rank factor.  (Adam in an eigenbasis is not
        # invariant to the basis chosen inside a rank-deficient factor's null space; factor_eigh gives that
        # space a basis of its own, whatever the eigensolver chose, which the transformer's statistics need.)
        X = torch.randn(48, 1, 7, 7, generator=g, dtype=torch.float64)
        return X, torch.randint(0, 3, (48,), generator=g)
    X = torch.randint(0, 11, (4, 6), generator=g)
    y = torch.randint(0, 11, (4, 6), generator=g)
    return X, y.masked_fill(torch.rand(4, 6, generator=g) < 0.3, -100)   # masked positions: ignore_index


def _model(name):
    torch.manual_seed(0)
    if name == "transformer":
        return _SequenceModel().double()
    return (_mlp() if name == "mlp" else _cnn()).double()


def _train(name, device, steps=4, **options):
    model = _model(name).to(device)
    opt = ig.nn.NaturalGradient(model, curvature_update_period=2, **options)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        X, y = (t.to(device) for t in _batch(name, g))
        opt.zero_grad()
        out = model(X)
        F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])


@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer"])
@pytest.mark.parametrize("kind", CAPTURED)
@pytest.mark.parametrize("rule", STEP_RULES)
@pytest.mark.parametrize("fisher", ["exact", "empirical"])
def test_cuda_equals_cpu(model, kind, rule, fisher):
    options = dict(curvature=kind, step_rule=rule, fisher=fisher, lr=0.05 if rule == "clip" else 3e-3)
    try:
        cpu = _train(model, "cpu", **options)
    except ValueError as e:   # a combination the optimizer refuses on the CPU is refused alike on CUDA
        with pytest.raises(ValueError, match=str(e)[:40].replace("(", r"\(").replace(")", r"\)")):
            _train(model, "cuda", **options)
        return
    cuda = _train(model, "cuda", **options)
    before = torch.cat([p.detach().reshape(-1) for p in _model(model).parameters()])
    assert bool(torch.isfinite(cuda).all())
    assert (cpu - before).abs().max() > 1e-6                          # the run moved the parameters
    assert torch.allclose(cuda, cpu, rtol=1e-7, atol=1e-9), float((cuda - cpu).abs().max())


@pytest.mark.parametrize("kind", CAPTURED)
def test_cuda_bf16_autocast_keeps_float32_statistics(kind):
    torch.manual_seed(0)
    model = _cnn().cuda()
    opt = ig.nn.NaturalGradient(model, curvature=kind, curvature_update_period=1)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(6):
        X, y = (t.cuda() for t in _batch("cnn", g))
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(X.float()), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(t.dtype == torch.float32 for t in opt.preconditioner.curvature.stats().values())
    assert all(p.dtype == torch.float32 and bool(torch.isfinite(p).all()) for p in model.parameters())
