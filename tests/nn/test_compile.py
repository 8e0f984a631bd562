"""A model compiled with torch.compile trains under the natural gradient: one graph, no break, between refreshes.

The graphs are compiled by a counting backend (each graph runs as traced, no code generation, so no C
compiler is needed): TorchDynamo's own graph-break counter says whether a step broke a graph, and the
backend counts the compiled graphs a step ran.  The same model without the optimizer's hooks (SGD)
is the reference: one graph per step, no break.
"""
import pytest

torch = pytest.importorskip("torch")
dynamo = pytest.importorskip("torch._dynamo")
if not hasattr(getattr(torch, "compiler", None), "set_stance"):
    pytest.skip("torch.compile stances need torch >= 2.6", allow_module_level=True)

from torch._dynamo.utils import counters  # noqa: E402

from infogeo.nn.optim import NaturalGradient, Preconditioner  # noqa: E402

F = torch.nn.functional
PERIOD = 3


class Block(torch.nn.Module):
    """A pre-norm transformer block with a per-token classifier: (N, T, D) -> (N, T, C)."""

    def __init__(self, d=8, heads=2, classes=3):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj, self.fc, self.head = (torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d),
                                                   torch.nn.Linear(d, d), torch.nn.Linear(d, classes))

    def forward(self, x):
        N, T, D = x.shape
        q, k, v = self.qkv(F.layer_norm(x, (D,))).reshape(N, T, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / (D // self.heads) ** 0.5, -1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(N, T, D))
        x = x + self.fc(torch.tanh(x))
        return self.head(x)


@pytest.fixture(autouse=True)
def _no_optimizer_left_armed():
    """Optimizers of earlier tests in this process hold the eager stance while armed, until they are collected
    (they sit in reference cycles with their hooks): collect them first, so the reference runs compiled."""
    import gc
    gc.collect()
    yield


def workload(which):
    torch.manual_seed(0)
    if which == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.Tanh(), torch.nn.Linear(10, 10), torch.nn.Tanh(),
                                    torch.nn.Linear(10, 3)).double()
        x, y = torch.randn(12, 6, dtype=torch.float64), torch.randint(0, 3, (12,))
        return model, x, lambda out: F.cross_entropy(out, y)
    model = Block().double()
    x, y = torch.randn(3, 4, 8, dtype=torch.float64), torch.randint(0, 3, (3, 4))
    return model, x, lambda out: F.cross_entropy(out.transpose(1, 2), y)


def train(which, make_opt, compiled, steps=2 * PERIOD + 1):
    """Losses, and per step: (graph breaks, compiled graphs run)."""
    dynamo.reset()
    counters.clear()
    ran = [0]

    def backend(gm, example_inputs):
        def run(*args):
            ran[0] += 1
            return gm.forward(*args)
        return run

    model, x, loss_fn = workload(which)
    forward = torch.compile(model, backend=backend) if compiled else model
    opt, pre = make_opt(model)
    losses, per_step = [], []
    for _ in range(steps):
        breaks, graphs = sum(counters["graph_break"].values()), ran[0]
        opt.zero_grad()
        loss = loss_fn(forward(x))
        loss.backward()
        if pre is None or pre.step():
            opt.step()
        losses.append(loss.item())
        per_step.append((sum(counters["graph_break"].values()) - breaks, ran[0] - graphs))
    if pre is not None:
        pre.remove()
    return losses, per_step


def natural_gradient(model):
    return NaturalGradient(model, lr=0.05, curvature="kfac", curvature_update_period=PERIOD), None


def preconditioner(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    return opt, Preconditioner(model, "diag", fisher="empirical", lr=opt, curvature_update_period=PERIOD)


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.05), None


@pytest.mark.parametrize("which,make_opt", [("mlp", natural_gradient), ("block", natural_gradient),
                                            ("mlp", preconditioner)])
def test_compiled_steps_between_refreshes_run_one_graph(which, make_opt):
    _, reference = train(which, sgd, compiled=True)
    assert all(s == (0, 1) for s in reference), reference   # the model alone: one graph a step, no break
    eager, _ = train(which, make_opt, compiled=False)
    losses, per_step = train(which, make_opt, compiled=True)
    refresh = [i for i in range(len(per_step)) if i % PERIOD == 0]
    for i, (breaks, graphs) in enumerate(per_step):
        assert breaks == 0, (i, per_step)
        # a refresh runs eagerly (its recording cannot be traced); every other step runs the one compiled graph
        assert graphs == (0 if i in refresh else 1), (i, per_step)
    # float64: the compiled graph computes what eager does up to rounding (the solve reads .grad where eager
    # may take the batch's rows, a different order of the same sums), ~1e-16 relative per step
    assert losses == pytest.approx(eager, rel=1e-10, abs=0)
    assert losses[-1] < losses[0]


def test_the_compiler_stance_comes_back_after_the_optimizer_goes():
    calls = [0]

    def backend(gm, example_inputs):
        calls[0] += 1
        return gm.forward

    dynamo.reset()
    f = torch.compile(lambda t: t.sin() + 1, backend=backend)
    model, _, _ = workload("mlp")
    first = NaturalGradient(model, lr=0.1)
    second = Preconditioner(model, "diag", lr=0.1)
    assert first.preconditioner.recorder.armed and second.recorder.armed
    f(torch.ones(2))
    assert calls[0] == 0   # armed: a refresh is due, so compiled code runs eagerly
    first.preconditioner.remove()
    f(torch.ones(2))
    assert calls[0] == 0   # the second optimizer is still armed
    second.remove()
    f(torch.ones(2))
    assert calls[0] == 1


def test_an_output_kept_after_the_optimizer_goes_does_not_hold_it_or_the_stance():
    """A forward recorded for a refresh leaves a hook on the output; an output the caller keeps (a log, an
    exception's traceback) must not keep a dropped optimizer alive, nor the compiler in its eager stance."""
    import gc
    import weakref

    from infogeo.nn.optim.compiled import EagerWhileArmed

    dynamo.reset()
    torch.compile(lambda t: t + 1, backend="eager")(torch.ones(1))   # TorchDynamo loaded: the stance is taken
    model, x, _ = workload("mlp")
    before = EagerWhileArmed._holders
    opt = NaturalGradient(model, lr=0.1)
    assert EagerWhileArmed._holders == before + 1   # armed for the first refresh
    kept = model(x)   # recorded, its hook registered, never back-propagated
    gone = weakref.ref(opt.preconditioner.estimate.recorder)
    del opt
    gc.collect()
    assert gone() is None and EagerWhileArmed._holders == before
    assert kept.requires_grad
