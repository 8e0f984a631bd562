"""NaturalGradient: the update it takes, resume, robustness, and training of small networks."""
import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from .conftest import TinyTransformer, categorical_Gz, flat, mlp, reference_metric  # noqa: E402

F = torch.nn.functional


def data(n=32, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 4, generator=g, dtype=dtype)
    y = (X[:, 0] > 0).long() + (X[:, 1] > 0).long()
    return X, y


def closure_for(opt, model, X, y):
    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(model(X), y)
        loss.backward()
        return loss
    return closure


def snapshot(model):
    return [p.detach().clone() for p in model.parameters()]


def test_dense_exact_step_is_damped_natural_gradient():
    model = mlp()
    X, y = data(6)
    G = reference_metric(model, X, categorical_Gz)
    opt = ig.nn.NaturalGradient(model.parameters(), lr=0.5, curvature="dense", damping=1e-2, model=model,
                                fisher="exact")
    names = [n for n, _ in model.named_parameters()]
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    opt.step(closure_for(opt, model, X, y), inputs=X)
    g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    expected = before - 0.5 * torch.linalg.solve(G + 1e-2 * torch.eye(len(g), dtype=g.dtype), g)
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.allclose(after, expected, rtol=1e-10, atol=1e-12)
    assert names  # parameters are addressed by name


@pytest.mark.parametrize("curvature", ["kfac", "diag", "block", "dense", "cg"])
def test_training_decreases_loss(curvature):
    torch.manual_seed(0)
    model = mlp(sizes=(4, 16, 3)).float()
    X, y = data(64, dtype=torch.float32)
    opt = ig.nn.NaturalGradient(model.parameters(), lr=0.05 if curvature == "diag" else 0.2,
                                curvature=curvature, damping=1e-2, model=model)
    with torch.no_grad():
        l0 = float(F.cross_entropy(model(X), y))
    for _ in range(15):
        loss = opt.step(closure_for(opt, model, X, y), inputs=X)
    assert loss.item() < 0.7 * l0
    assert all(not m._forward_hooks for m in model.modules())


def run(model, opt, steps, seed=1):
    for i in range(steps):
        X, y = data(16, seed=seed + i)
        opt.step(closure_for(opt, model, X, y), inputs=X)


@pytest.mark.parametrize("curvature,quadratic", [("kfac", False), ("diag", False), ("dense", False), ("kfac", True)])
def test_state_dict_exact_resume(curvature, quadratic):
    kw = dict(lr=0.1, curvature=curvature, damping=1e-2, fisher="mc", momentum=0.0 if quadratic else 0.5,
              ema_decay=0.9, curvature_update_period=2, inverse_update_period=3, kl_clip=1e-2, seed=3,
              quadratic_model=quadratic, adaptive_damping=quadratic, damping_adaptation_period=2)
    a = mlp()
    opt_a = ig.nn.NaturalGradient(a.parameters(), model=a, **kw)
    run(a, opt_a, 4)
    saved_model = copy.deepcopy(a.state_dict())
    saved_opt = copy.deepcopy(opt_a.state_dict())
    run(a, opt_a, 4, seed=10)

    b = mlp(seed=5)
    b.load_state_dict(saved_model)
    opt_b = ig.nn.NaturalGradient(b.parameters(), model=b, **dict(kw, seed=99))
    opt_b.load_state_dict(saved_opt)
    run(b, opt_b, 4, seed=10)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_nan_curvature_keeps_last_good_inverse():
    model = mlp()
    X, y = data(8)
    Xbad = X.clone()
    Xbad[0, 0] = float("nan")
    opt = ig.nn.NaturalGradient(model.parameters(), lr=0.1, curvature="kfac", damping=1e-2, model=model,
                                fisher="exact")
    # no good curvature yet: the step is skipped, parameters bit-identical
    before = snapshot(model)
    with pytest.warns(RuntimeWarning) as caught:
        opt.step(closure_for(opt, model, X, y), inputs=Xbad)
    said = " | ".join(str(w.message) for w in caught)
    assert "NaN or inf" in said and "step skipped, parameters unchanged" in said
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    opt.step(closure_for(opt, model, X, y), inputs=X)
    solver = opt.state["natural_gradient"]["solver"]
    with pytest.warns(RuntimeWarning, match="discarded"):
        opt.step(closure_for(opt, model, X, y), inputs=Xbad)
    assert opt.state["natural_gradient"]["solver"] is solver
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())


def test_nan_gradient_skips_step():
    model = mlp()
    X, y = data(8)
    opt = ig.nn.NaturalGradient(model.parameters(), lr=0.1, curvature="diag", damping=1e-2, model=model)
    opt.step(closure_for(opt, model, X, y), inputs=X)
    before = snapshot(model)

    def bad():
        opt.zero_grad()
        loss = F.cross_entropy(model(X), y) * float("nan")
        loss.backward()
        return loss

    with pytest.warns(RuntimeWarning, match="gradient contains NaN"):
        opt.step(bad, inputs=X)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))


def test_bad_arguments():
    model = mlp()
    with pytest.raises(ValueError, match="damping must be > 0"):
        ig.nn.NaturalGradient(model.parameters(), damping=0.0, model=model)
    with pytest.raises(ValueError, match="damping must be > 0"):
        ig.nn.NaturalGradient(model.parameters(), damping=-1.0, model=model)
    with pytest.raises(ValueError, match="pass model="):
        ig.nn.NaturalGradient(model.parameters())
    with pytest.raises(ValueError, match="does not belong to model"):
        ig.nn.NaturalGradient(mlp().parameters(), model=model)
    with pytest.raises(ValueError, match="unknown curvature"):
        ig.nn.NaturalGradient(model.parameters(), curvature="shampoo", model=model)
    frozen = mlp()
    for p in frozen.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="requires_grad"):
        ig.nn.NaturalGradient(frozen.parameters(), model=frozen)
    opt = ig.nn.NaturalGradient(model.parameters(), model=model)
    with pytest.raises(ValueError, match="inputs=x"):
        opt.step()
    X, y = data(4)
    before = snapshot(model)
    with pytest.raises(ValueError, match="data of shape"):
        opt.step(closure_for(opt, model, X, y), inputs=torch.randn(4, 7, dtype=torch.float64))
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))


def test_kl_clip_bounds_step():
    model = mlp()
    X, y = data(16)
    opt = ig.nn.NaturalGradient(model.parameters(), lr=10.0, curvature="dense", damping=1e-3, model=model,
                                fisher="exact", kl_clip=1e-4)
    G = reference_metric(model, X, categorical_Gz)
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    opt.step(closure_for(opt, model, X, y), inputs=X)
    g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    s = torch.cat([p.detach().reshape(-1) for p in model.parameters()]) - before
    # the step is -lr * scale * delta; the clipped KL lr^2 scale^2 delta^T g equals kl_clip
    G = G + 1e-3 * torch.eye(len(g), dtype=g.dtype)
    delta = torch.linalg.solve(G, g)
    scale = (s.norm() / (10.0 * delta.norm())).item()
    assert abs(100.0 * scale ** 2 * float(delta @ g) - 1e-4) < 1e-9
    assert scale < 1


def test_adaptive_damping_moves():
    model = mlp()
    X, y = data(16)
    opt = ig.nn.NaturalGradient(model.parameters(), lr=1.0, curvature="dense", damping=1.0, model=model,
                                fisher="exact", adaptive_damping=True, damping_adaptation_period=1)
    for _ in range(3):
        opt.step(closure_for(opt, model, X, y), inputs=X)
    assert opt.damping != 1.0
    with pytest.raises(ValueError, match="closure"):
        opt.step(inputs=X)


def test_empirical_fisher_needs_targets():
    model = mlp()
    X, y = data(8)
    opt = ig.nn.NaturalGradient(model.parameters(), curvature="diag", model=model, fisher="empirical")
    with pytest.raises(ValueError, match="targets"):
        opt.step(closure_for(opt, model, X, y), inputs=X)
    opt.step(closure_for(opt, model, X, y), inputs=X, targets=y)


@pytest.mark.parametrize("curvature", ["cg", "kfac"])
def test_tiny_transformer_trains(curvature):
    """Embedding + LayerNorm + attention: K-FAC mixes Kronecker and diagonal blocks; CG needs no structure."""
    torch.manual_seed(0)
    model = TinyTransformer(vocab=7, d=8, classes=2)
    X = torch.randint(0, 7, (32, 5))
    y = (X == 3).any(1).long()
    opt = ig.nn.NaturalGradient(model.parameters(), lr=0.3, curvature=curvature, damping=1e-2, model=model,
                                kl_clip=1e-2, cg_max_iter=10)
    l0 = F.cross_entropy(model(X), y).item()
    for _ in range(10):
        loss = opt.step(closure_for(opt, model, X, y), inputs=X)
    assert loss.item() < 0.6 * l0
    if curvature == "kfac":
        kinds = {b.kind for b in opt.state["natural_gradient"]["curvature"].blocks}
        assert kinds == {"kfac", "diag"}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("curvature,quadratic", [("kfac", False), ("diag", False), ("cg", False), ("kfac", True)])
def test_cuda(curvature, quadratic):
    torch.manual_seed(0)
    model = mlp(sizes=(4, 16, 3)).float().cuda()
    X, y = data(64, dtype=torch.float32)
    X, y = X.cuda(), y.cuda()
    opt = ig.nn.NaturalGradient(model.parameters(), lr=1.0 if quadratic else 0.1, curvature=curvature, damping=1e-2,
                                model=model, quadratic_model=quadratic, adaptive_damping=quadratic,
                                damping_adaptation_period=1)
    for _ in range(3):
        opt.step(closure_for(opt, model, X, y), inputs=X)
    assert all(p.is_cuda and bool(torch.isfinite(p).all()) for p in model.parameters())
    sd = opt.state_dict()
    opt.load_state_dict(sd)


def test_quadratic_model_step_minimises_the_exact_model_over_the_span():
    """Diagonal curvature gives the direction; step size and momentum minimise M under the dense jacrev metric."""
    model = mlp()
    X, y = data(12)
    lam = 0.1
    opt = ig.nn.NaturalGradient(model.parameters(), lr=1.0, curvature="diag", damping=lam, model=model,
                                fisher="exact", quadratic_model=True, ema_decay=0.0)
    prev = None
    for it in range(3):
        G = reference_metric(model, X, categorical_Gz) + lam * torch.eye(sum(p.numel() for p in model.parameters()),
                                                                         dtype=torch.float64)
        before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
        opt.step(closure_for(opt, model, X, y), inputs=X)
        g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        step = torch.cat([p.detach().reshape(-1) for p in model.parameters()]) - before
        Delta = -g / torch.diagonal(G)           # diag(G) + lam, since G already holds lam I
        D = torch.stack([Delta] if prev is None else [Delta, prev], dim=1)
        c = torch.linalg.solve(D.T @ G @ D, -(D.T @ g))
        expected = D @ c
        assert torch.allclose(step, expected, rtol=1e-8, atol=1e-12)
        # the model value at the step is below the plain natural-gradient step's
        M = lambda s: float(g @ s + 0.5 * s @ G @ s)  # noqa: E731
        assert M(step) <= M(Delta) + 1e-12
        if prev is not None:
            assert abs(float(c[1])) > 1e-6  # the momentum coefficient is used, not zero
        prev = step


def test_quadratic_model_rejects_explicit_momentum():
    model = mlp()
    with pytest.raises(ValueError, match="momentum"):
        ig.nn.NaturalGradient(model.parameters(), model=model, quadratic_model=True, momentum=0.9)


def test_quadratic_model_trust_region():
    """With kl_clip the model's step is shortened until s^T (G + lambda I) s equals kl_clip (dense jacrev G)."""
    model = mlp()
    X, y = data(16)
    lam = 1e-3
    opt = ig.nn.NaturalGradient(model.parameters(), lr=1.0, curvature="dense", damping=lam, model=model,
                                fisher="exact", quadratic_model=True, kl_clip=1e-4)
    G = reference_metric(model, X, categorical_Gz)
    G = G + lam * torch.eye(G.shape[0], dtype=G.dtype)
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    opt.step(closure_for(opt, model, X, y), inputs=X)
    g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    s = torch.cat([p.detach().reshape(-1) for p in model.parameters()]) - before
    full = -torch.linalg.solve(G, g)       # the unclipped minimiser of the model (exact curvature: alpha = 1)
    assert float(full @ G @ full) > 1e-3
    assert abs(float(s @ G @ s) - 1e-4) < 1e-9
    assert torch.allclose(s / s.norm(), full / full.norm(), atol=1e-8)
