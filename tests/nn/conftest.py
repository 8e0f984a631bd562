"""Small float64 networks and an independent dense reference for the pullback metric."""
import importlib.util
from pathlib import Path

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


def _load_example(name):
    path = Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# one definition of the tiny transformer (Embedding, LayerNorm, attention, a custom module): the example's
_transformer_example = _load_example("nn_transformer")
Scale, TinyTransformer = _transformer_example.Scale, _transformer_example.TinyTransformer


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


# the spawned gloo ranks of test_distributed, shared by its tests, the fault scenarios and the FSDP2 runs: defined
# here once (a fixture imported into several test modules would spawn its processes once per module)
@pytest.fixture(scope="session")
def two_ranks():
    from .test_distributed import spawn_ranks
    return spawn_ranks(2)


@pytest.fixture(scope="session")
def four_ranks():
    from .test_distributed import spawn_ranks
    return spawn_ranks(4)
