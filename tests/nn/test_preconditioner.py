"""Preconditioner: natural-gradient directions in .grad for any torch optimizer; exact resume from weights-only files."""
import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from .conftest import categorical_Gz, mlp, reference_metric  # noqa: E402

F = torch.nn.functional
# most preconditioners here keep the default trust region without a learning rate (warned once each)
pytestmark = pytest.mark.filterwarnings("ignore:Preconditioner. kl_clip is set but no lr:UserWarning")


def batch(i, n=16):
    g = torch.Generator().manual_seed(100 + i)
    X = torch.randn(n, 4, generator=g, dtype=torch.float64)
    return X, (X[:, 0] > 0).long() + (X[:, 1] > 0).long()


def flat(model):
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def groups(model, lrs=(0.3, 0.1)):
    return [{"params": list(model[0].parameters()), "lr": lrs[0]}, {"params": list(model[2].parameters()), "lr": lrs[1]}]


def preconditioned_step(model, pre, opt, X, y):
    """The loop of a torch user with a preconditioner: zero, backward, precondition, step."""
    opt.zero_grad()
    F.cross_entropy(model(X), y).backward()
    pre.step()
    opt.step()


OPTIONS = dict(curvature="kfac", damping=1e-2, fisher="mc", samples=2, curvature_update_period=2,
               inverse_update_period=3, kl_clip=1e-3, seed=7)


def test_preconditioner_then_sgd_is_natural_gradient():
    """Same hooks, same draws, same clipping (each group's lr), then torch's SGD with momentum."""
    a, b = mlp(), mlp()
    sgd = torch.optim.SGD(groups(a), lr=0.3, momentum=0.9)
    pre = ig.nn.Preconditioner(a, lr=sgd, **OPTIONS)
    ng = ig.nn.NaturalGradient(groups(b), model=b, lr=0.3, momentum=0.9, **OPTIONS, step_rule="clip")
    for i in range(7):
        X, y = batch(i)
        preconditioned_step(a, pre, sgd, X, y)
        ng.zero_grad()
        F.cross_entropy(b(X), y).backward()
        ng.step()
        assert torch.allclose(flat(a), flat(b), rtol=0, atol=1e-9)
    assert (flat(a) - flat(mlp())).abs().max() > 1e-2


def test_direction_is_the_damped_sharp_of_the_gradient():
    """.grad becomes (G + lambda I)^{-1} g (dense exact curvature, no clipping; G by jacrev)."""
    model = mlp()
    X, y = batch(0)
    pre = ig.nn.Preconditioner(model, curvature="dense", damping=1e-2, fisher="exact", kl_clip=None)
    F.cross_entropy(model(X), y).backward()
    g = torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()])
    assert pre.step()
    G = reference_metric(model, X, categorical_Gz) + 1e-2 * torch.eye(len(g), dtype=g.dtype)
    d = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert torch.allclose(d, torch.linalg.solve(G, g), rtol=1e-10, atol=1e-13)


def test_composes_with_adam_clipping_and_a_scheduler():
    torch.manual_seed(0)
    model = mlp(sizes=(4, 16, 3))
    adam = torch.optim.Adam(model.parameters(), lr=5e-2)
    sched = torch.optim.lr_scheduler.StepLR(adam, step_size=5, gamma=0.5)
    pre = ig.nn.Preconditioner(model, lr=adam, curvature="kfac", damping=1e-2)
    X, y = batch(0, 64)
    with torch.no_grad():
        l0 = float(F.cross_entropy(model(X), y))
    for _ in range(20):
        adam.zero_grad()
        F.cross_entropy(model(X), y).backward()
        pre.step()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        adam.step()
        sched.step()
    assert pre.learning_rates()[id(model[0].weight)] == pytest.approx(5e-2 * 0.5 ** 4)
    with torch.no_grad():
        assert float(F.cross_entropy(model(X), y)) < 0.7 * l0


def test_grad_scaler_sees_the_preconditioned_gradient():
    """AMP loss scaling: unscale, precondition, then the scaler's step (the statistics do not see the scale)."""
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    a, b = mlp(), mlp()
    sgd_a, sgd_b = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    pre_a = ig.nn.Preconditioner(a, lr=sgd_a, **OPTIONS)
    pre_b = ig.nn.Preconditioner(b, lr=sgd_b, **OPTIONS)
    for i in range(4):
        X, y = batch(i)
        sgd_a.zero_grad()
        scaler.scale(F.cross_entropy(a(X), y)).backward()
        scaler.unscale_(sgd_a)
        pre_a.step()
        scaler.step(sgd_a)
        scaler.update()
        preconditioned_step(b, pre_b, sgd_b, X, y)
    assert torch.allclose(flat(a), flat(b), rtol=0, atol=1e-12)


def _train(model, opt, steps, start, explicit=False):
    for i in range(start, start + steps):
        X, y = batch(i)

        def closure():
            opt.zero_grad()
            loss = F.cross_entropy(model(X), y)
            loss.backward()
            return loss
        if explicit:
            opt.step(closure, inputs=X)
        else:
            closure()
            opt.step()


@pytest.mark.parametrize("curvature,quadratic,steps", [("kfac", False, 4), ("kfac", False, 5), ("ekfac", False, 5), ("diag", False, 3),
                                                        ("dense", False, 4), ("kfac", True, 4)])
def test_weights_only_resume_is_bit_identical(tmp_path, curvature, quadratic, steps):
    """torch.save -> torch.load(weights_only=True) -> load_state_dict -> continue == uninterrupted (MC Fisher)."""
    kw = dict(lr=1.0 if quadratic else 0.1, curvature=curvature, damping=1e-2, fisher="mc",
              momentum=0.0 if quadratic else 0.5, ema_decay=0.9, curvature_update_period=2, inverse_update_period=3,
              kl_clip=1e-2, seed=3, quadratic_model=quadratic, adaptive_damping=quadratic,
              damping_adaptation_period=2)
    a = mlp()
    opt_a = ig.nn.NaturalGradient(a, **kw, step_rule="clip")
    _train(a, opt_a, steps, 0, explicit=quadratic)
    torch.save({"model": a.state_dict(), "opt": opt_a.state_dict()}, tmp_path / "ckpt.pt")
    _train(a, opt_a, 5, 10, explicit=quadratic)

    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    b = mlp(seed=5)
    b.load_state_dict(ckpt["model"])
    opt_b = ig.nn.NaturalGradient(b, **dict(kw, seed=99), step_rule="clip")
    opt_b.load_state_dict(ckpt["opt"])
    _train(b, opt_b, 5, 10, explicit=quadratic)
    assert torch.equal(flat(a), flat(b))


def test_preconditioner_state_dict_holds_tensors_and_numbers_only(tmp_path):
    model = mlp()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    pre = ig.nn.Preconditioner(model, lr=sgd, **OPTIONS)
    for i in range(3):
        X, y = batch(i)
        preconditioned_step(model, pre, sgd, X, y)

    def leaves(x):
        if isinstance(x, dict):
            assert all(isinstance(k, str) for k in x)
            return [v for val in x.values() for v in leaves(val)]
        return [x]
    assert all(isinstance(v, (torch.Tensor, int, float)) for v in leaves(pre.state_dict()))
    torch.save(pre.state_dict(), tmp_path / "pre.pt")
    fresh = ig.nn.Preconditioner(mlp(), **OPTIONS)
    fresh.load_state_dict(torch.load(tmp_path / "pre.pt", weights_only=True))
    assert fresh.state["step"] == 3


def test_bad_arguments():
    model = mlp()
    with pytest.raises(TypeError, match="torch.nn.Module"):
        ig.nn.Preconditioner(model.parameters())
    with pytest.raises(ValueError, match="placement"):
        ig.nn.Preconditioner(model, placement="everywhere")
    with pytest.raises(ValueError, match="curvature_update_period"):
        ig.nn.Preconditioner(model, curvature_update_period=0)
    with pytest.raises(ValueError, match="does not belong"):
        ig.nn.Preconditioner(model, params=mlp().parameters())
    pre = ig.nn.Preconditioner(model, fisher="empirical", curvature="dense")
    X, y = batch(0)
    F.cross_entropy(model(X), y).backward()
    with pytest.raises(ValueError, match="targets"):
        pre.step()   # dense is not recorded by hooks: the explicit form names the targets


@pytest.mark.parametrize("curvature, options, match", [
    ("kfac", {"foo": 1}, "takes no option 'foo'"),
    ("kfac", {"max_factor_bytes": 0}, "max_factor_bytes must be a positive whole number"),
    ("kfac", {"max_factor_dim": 2.5}, "max_factor_dim must be a positive whole number"),
    ("kfac", {"inverse": "cholesky"}, "unknown K-FAC inverse 'cholesky'"),
    ("ekfac", {"inverse": "eigen"}, "takes no option 'inverse'"),
    ("diag", {"max_factor_dim": 3}, "takes no option 'max_factor_dim'"),
    ("soap", {"chunk_elements": 10}, "takes no option 'chunk_elements'"),
])
def test_options_a_kind_cannot_use_are_refused_at_construction(curvature, options, match):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    before = [p.detach().clone() for p in model.parameters()]
    for make in (lambda: ig.nn.Preconditioner(model, curvature, lr=0.1, **options),
                 lambda: ig.nn.NaturalGradient(model, curvature=curvature, **options)):
        with pytest.raises(ValueError, match=match):
            make()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())   # no hooks left behind
