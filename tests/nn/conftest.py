"""Small float64 networks and an independent dense reference for the pullback metric."""
import pytest

torch = pytest.importorskip("torch")
from torch.func import functional_call, jacrev  # noqa: E402


def params_of(model):
    return {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}


def flat(d, names):
    return torch.cat([d[n].reshape(-1) for n in names])


def jacobian(model, X):
    """J of shape (N, ..., m, P) by jacrev, parameters in named_parameters order."""
    p = params_of(model)
    J = jacrev(lambda q: functional_call(model, q, (X,)))(p)
    z = functional_call(model, p, (X,))
    return torch.cat([J[n].reshape(tuple(z.shape) + (-1,)) for n in p], dim=-1), z


def reference_metric(model, X, Gz_fn):
    """(1/N) sum_n J_n^T G_z J_n with a hand-written G_z (shape z.shape + (m,))."""
    J, z = jacobian(model, X)
    m, P = z.shape[-1], J.shape[-1]
    Gz = Gz_fn(z.detach())
    Jr, Gr = J.reshape(-1, m, P), Gz.reshape(-1, m, m)
    return torch.einsum("rmp,rmk,rkq->pq", Jr, Gr, Jr) / z.shape[0]


def categorical_Gz(z):
    p = torch.softmax(z, -1)
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


def mlp(seed=0, sizes=(4, 5, 3), act=torch.nn.Tanh):
    torch.manual_seed(seed)
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(act())
    return torch.nn.Sequential(*layers).double()


class TinyConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3, padding=1, stride=2)
        self.fc = torch.nn.Linear(3 * 3 * 3, 4)

    def forward(self, x):
        return self.fc(torch.tanh(self.conv(x)).flatten(1))


class Scale(torch.nn.Module):
    """A custom module using its parameter directly (no Linear inside)."""

    def __init__(self, d):
        super().__init__()
        self.gain = torch.nn.Parameter(torch.linspace(0.5, 1.5, d))
        self.proj = torch.nn.Parameter(torch.randn(d, d) / d ** 0.5)

    def forward(self, h):
        return torch.nn.functional.linear(h * self.gain, self.proj)


class TinyTransformer(torch.nn.Module):
    """Embedding, LayerNorm, single-head self-attention with Linear projections, mean-pooled classifier."""

    def __init__(self, vocab=7, d=4, classes=3):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.ln = torch.nn.LayerNorm(d)
        self.q = torch.nn.Linear(d, d)
        self.k = torch.nn.Linear(d, d, bias=False)
        self.v = torch.nn.Linear(d, d)
        self.mix = Scale(d)
        self.out = torch.nn.Linear(d, classes)

    def forward(self, tokens):
        h = self.ln(self.emb(tokens))
        att = torch.softmax(self.q(h) @ self.k(h).transpose(1, 2) / h.shape[-1] ** 0.5, -1)
        h = h + self.mix(att @ self.v(h))
        return self.out(h.mean(1))


@pytest.fixture
def small_mlp():
    model = mlp()
    X = torch.randn(6, 4, dtype=torch.float64)
    return model, X


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: intra-op threads only add contention on a shared 2-core machine."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
