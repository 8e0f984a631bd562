"""Copies of a model with an optimizer attached (a teacher, a saved model) and copies of the optimizer itself."""
import copy
import io
import pickle

import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from .conftest import mlp  # noqa: E402

F = torch.nn.functional


def batch(seed, n=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=g, dtype=torch.float64), torch.randint(0, 3, (n,), generator=g)


def train(model, opt, steps, start=0, teacher=None):
    """Plain steps on batches ``start, start+1, ...``; a ``teacher``'s forward and backward on another batch run
    between the model's forward and its backward (a distillation or EMA loop)."""
    for i in range(start, start + steps):
        X, y = batch(i)
        opt.zero_grad()
        loss = F.cross_entropy(model(X), y)
        if teacher is not None:
            T, t = batch(100 + i, n=13)
            F.cross_entropy(teacher(T * 10), t).backward()
        loss.backward()
        opt.step()


def params(model):
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("curvature", ["kfac", "diag"])   # eigen-adam and graft, the Monte Carlo Fisher
def test_a_deepcopy_of_the_model_leaves_the_optimizer_alone(curvature):
    """The copy's forward and backward (a teacher copied at construction, another after a step) change neither
    the statistics nor the steps: bit-identical to the run without a copy."""
    alone = mlp()
    opt_alone = ig.nn.NaturalGradient(alone, curvature=curvature)
    train(alone, opt_alone, 4)

    model = mlp()
    opt = ig.nn.NaturalGradient(model, curvature=curvature)
    train(model, opt, 1, teacher=copy.deepcopy(model))
    train(model, opt, 3, start=1, teacher=copy.deepcopy(model))

    assert all(torch.equal(p, q) for p, q in zip(params(model), params(alone)))
    a, b = opt.preconditioner.curvature.stats(), opt_alone.preconditioner.curvature.stats()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_forward_of_another_module_sharing_the_hooks_is_not_recorded():
    """A shallow copy shares the model's hook dicts: its forward is not the model's and is not recorded."""
    model = mlp()
    pre = ig.nn.Preconditioner(model, kl_clip=None)
    (X, _), (M, _) = batch(0), batch(1)
    model(X)
    copy.copy(model)(M)
    assert pre.recorder.inputs.args[0] is X


def test_a_saved_model_loads_with_inert_hooks_and_trains_with_a_fresh_optimizer():
    """torch.save of a model with an optimizer attached (armed for a refresh); the loaded model computes what
    the model does and trains as the same weights loaded into a model that never had an optimizer."""
    model = mlp()
    opt = ig.nn.NaturalGradient(model)
    train(model, opt, 1)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    loaded = pickle.loads(pickle.dumps(loaded))   # its own stale hooks pickle too
    X, _ = batch(7)
    assert torch.equal(loaded(X), model(X))

    plain = mlp(seed=1)
    plain.load_state_dict(model.state_dict())
    train(loaded, ig.nn.NaturalGradient(loaded), 3, start=1)
    train(plain, ig.nn.NaturalGradient(plain), 3, start=1)
    assert all(torch.equal(p, q) for p, q in zip(params(loaded), params(plain)))


def test_a_copied_model_with_the_checkpoint_loaded_continues_as_the_original():
    """The documented copy of (model, optimizer): deepcopy the model, build a new optimizer on it, load the
    state_dict; both then train in lockstep, bit-identically."""
    model = mlp()
    opt = ig.nn.NaturalGradient(model)
    train(model, opt, 2)
    twin = copy.deepcopy(model)
    opt_twin = ig.nn.NaturalGradient(twin)
    opt_twin.load_state_dict(opt.state_dict())
    for i in range(2, 6):
        train(model, opt, 1, start=i)
        train(twin, opt_twin, 1, start=i)
    assert all(torch.equal(p, q) for p, q in zip(params(model), params(twin)))


def _save(obj):
    torch.save(obj, io.BytesIO())


@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy, pickle.dumps, _save])
@pytest.mark.parametrize("which", ["NaturalGradient", "Preconditioner"])
def test_copying_or_pickling_an_optimizer_is_refused_with_what_to_do(how, which):
    model = mlp()
    opt = ig.nn.NaturalGradient(model)
    train(model, opt, 1)
    obj = opt if which == "NaturalGradient" else opt.preconditioner
    with pytest.raises(TypeError, match=rf"{which} cannot be copied or pickled.*state_dict\(\).*load_state_dict"):
        how(obj)
    train(model, opt, 1, start=1)   # the optimizer itself is untouched
    assert opt.preconditioner.steps == 2
