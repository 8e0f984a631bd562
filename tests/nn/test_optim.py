"""NaturalGradient: the update it takes, the plain training loop, robustness, and training of small networks."""
import copy

import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from .conftest import TinyTransformer, categorical_Gz, mlp, reference_metric  # noqa: E402

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


def plain_step(opt, model, X, y):
    """The loop a torch user writes: no arguments to step."""
    opt.zero_grad()
    loss = F.cross_entropy(model(X), y)
    loss.backward()
    opt.step()
    return loss


def flat_params(model):
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def flat_grad(model, X, y):
    model.zero_grad()
    F.cross_entropy(model(X), y).backward()
    g = torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()])
    model.zero_grad()
    return g


@pytest.mark.parametrize("plain", [True, False])
def test_dense_exact_step_is_damped_natural_gradient(plain):
    """theta - lr (G + lambda I)^{-1} g, with G by jacrev (conftest), in the plain loop and the explicit form."""
    model = mlp()
    X, y = data(6)
    G = reference_metric(model, X, categorical_Gz)
    g = flat_grad(model, X, y)
    before = flat_params(model)
    opt = ig.nn.NaturalGradient(model, lr=0.5, curvature="dense", damping=1e-2, fisher="exact", kl_clip=None, step_rule="clip")
    if plain:
        plain_step(opt, model, X, y)
    else:
        opt.step(closure_for(opt, model, X, y), inputs=X)
    expected = before - 0.5 * torch.linalg.solve(G + 1e-2 * torch.eye(len(g), dtype=g.dtype), g)
    assert torch.allclose(flat_params(model), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("curvature", ["kfac", "ekfac", "diag", "block"])
def test_plain_loop_records_the_statistics_of_the_users_backward(curvature):
    """Statistics from hooks on the user's forward/backward equal those of the explicit form (same MC draws)."""
    kw = dict(lr=0.2, curvature=curvature, damping=1e-2, fisher="mc", samples=2, curvature_update_period=2,
              inverse_update_period=3, momentum=0.5, seed=4)
    a, b = mlp(), mlp()
    opt_a, opt_b = ig.nn.NaturalGradient(a, **kw, step_rule="clip"), ig.nn.NaturalGradient(b, **kw, step_rule="clip")
    for i in range(5):
        X, y = data(16, seed=i)
        plain_step(opt_a, a, X, y)
        opt_b.step(closure_for(opt_b, b, X, y), inputs=X)
    assert torch.equal(flat_params(a), flat_params(b))
    assert (flat_params(a) - flat_params(mlp())).abs().max() > 1e-3


def test_no_extra_forward_pass_in_the_plain_loop():
    """K-FAC statistics come from the user's own forward: the model runs once per step, refresh or not.

    (The parameter space's one output-shape probe runs on the meta device: no arithmetic, not counted.)
    """
    model = mlp()
    calls = []
    model.register_forward_hook(lambda m, args, out: None if args[0].is_meta else calls.append(1))
    opt = ig.nn.NaturalGradient(model, lr=0.1, curvature="kfac", curvature_update_period=3, step_rule="clip")
    for i in range(7):
        X, y = data(16, seed=i)
        plain_step(opt, model, X, y)
    assert len(calls) == 7
    opt.preconditioner.remove()
    assert len(model[0]._forward_hooks) == 0 and len(model._forward_hooks) == 1


def test_evaluation_forwards_are_ignored():
    """A forward under no_grad between steps (evaluation) neither records nor breaks the next refresh."""
    kw = dict(lr=0.2, curvature="kfac", damping=1e-2, curvature_update_period=2, seed=1)
    a, b = mlp(), mlp()
    opt_a, opt_b = ig.nn.NaturalGradient(a, **kw, step_rule="clip"), ig.nn.NaturalGradient(b, **kw, step_rule="clip")
    Xe, _ = data(40, seed=99)
    for i in range(4):
        X, y = data(16, seed=i)
        plain_step(opt_a, a, X, y)
        with torch.no_grad():
            a(Xe)
        plain_step(opt_b, b, X, y)
    assert torch.equal(flat_params(a), flat_params(b))


def test_first_argument_forms():
    model = mlp()
    a = ig.nn.NaturalGradient(model, step_rule="clip")
    b = ig.nn.NaturalGradient(model.parameters(), model=model, step_rule="clip")
    assert a.preconditioner.names == b.preconditioner.names
    with pytest.raises(ValueError, match="pass the model once"):
        ig.nn.NaturalGradient(model, model=mlp(), step_rule="clip")


@pytest.mark.parametrize("curvature", ["kfac", "ekfac", "diag", "block", "dense", "cg"])
def test_training_decreases_loss(curvature):
    torch.manual_seed(0)
    model = mlp(sizes=(4, 16, 3)).float()
    X, y = data(64, dtype=torch.float32)
    opt = ig.nn.NaturalGradient(model, lr=0.2, curvature=curvature, damping=1e-2, step_rule="clip")
    with torch.no_grad():
        l0 = float(F.cross_entropy(model(X), y))
    for _ in range(15):
        loss = plain_step(opt, model, X, y)
    assert loss.item() < 0.7 * l0


def test_bad_arguments():
    model = mlp()
    with pytest.raises(ValueError, match="parameter group after construction"):
        ig.nn.NaturalGradient(model, step_rule="clip").add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))]})
    with pytest.raises(ValueError, match="damping must be > 0"):
        ig.nn.NaturalGradient(model, damping=0.0, step_rule="clip")
    with pytest.raises(ValueError, match="damping must be > 0"):
        ig.nn.NaturalGradient(model, damping=-1.0, step_rule="clip")
    with pytest.raises(ValueError, match="model="):
        ig.nn.NaturalGradient(model.parameters(), step_rule="clip")
    with pytest.raises(ValueError, match="does not belong to model"):
        ig.nn.NaturalGradient(mlp().parameters(), model=model, step_rule="clip")
    with pytest.raises(ValueError, match="unknown curvature"):
        ig.nn.NaturalGradient(model, curvature="kronecker", step_rule="clip")
    with pytest.raises(ValueError, match="lr must be >= 0"):
        ig.nn.NaturalGradient(model, lr=-0.1, step_rule="clip")
    frozen = mlp()
    for p in frozen.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="requires_grad"):
        ig.nn.NaturalGradient(frozen, step_rule="clip")
    opt = ig.nn.NaturalGradient(mlp(seed=3), curvature="dense", step_rule="clip")
    with pytest.raises(ValueError, match="no batch"):
        opt.step()
    X, y = data(4)
    before = flat_params(model)
    opt = ig.nn.NaturalGradient(model, step_rule="clip")
    with pytest.raises(ValueError, match="data of shape"):
        opt.step(closure_for(opt, model, X, y), inputs=torch.randn(4, 7, dtype=torch.float64))
    assert torch.equal(flat_params(model), before)


def test_kl_clip_uses_each_groups_lr():
    r"""The clipped step's predicted KL, sum_l lr_l^2 delta_l^T g_l (dense jacrev G), equals kl_clip."""
    model = mlp()
    X, y = data(16)
    lam, lrs = 1e-3, (10.0, 3.0)
    first, second = list(model[0].parameters()), list(model[2].parameters())
    opt = ig.nn.NaturalGradient([{"params": first, "lr": lrs[0]}, {"params": second, "lr": lrs[1]}], model=model,
                                curvature="dense", damping=lam, fisher="exact", kl_clip=1e-4, step_rule="clip")
    G = reference_metric(model, X, categorical_Gz) + lam * torch.eye(flat_params(model).numel(), dtype=torch.float64)
    g = flat_grad(model, X, y)
    before = flat_params(model)
    plain_step(opt, model, X, y)
    delta = torch.linalg.solve(G, g)
    k = sum(p.numel() for p in first)
    eta = torch.cat([torch.full((k,), lrs[0]), torch.full((len(g) - k,), lrs[1])]).double()
    unclipped = eta ** 2 @ (delta * g)
    scale = (1e-4 / unclipped).sqrt()
    assert unclipped > 1e-4
    assert torch.allclose(flat_params(model) - before, -eta * scale * delta, rtol=1e-8, atol=1e-14)


def test_adaptive_damping_moves():
    model = mlp()
    X, y = data(16)
    opt = ig.nn.NaturalGradient(model, lr=1.0, curvature="dense", damping=1.0, fisher="exact",
                                adaptive_damping=True, damping_adaptation_period=1)
    for _ in range(3):
        opt.step(closure_for(opt, model, X, y), inputs=X)
    assert opt.damping != 1.0
    with pytest.raises(ValueError, match="closure"):
        opt.step(inputs=X)


@pytest.mark.parametrize("curvature", ["diag", "kfac", "ekfac", "block"])
def test_empirical_fisher_from_the_users_backward_equals_the_explicit_form(curvature):
    """Plain loop: columns N dL/dz from the user's backward; explicit form: the targets' loss gradient."""
    X, y = data(8)
    model = mlp()
    twin = copy.deepcopy(model)
    plain = ig.nn.NaturalGradient(model, curvature=curvature, fisher="empirical", lr=0.1, step_rule="clip")
    named = ig.nn.NaturalGradient(twin, curvature=curvature, fisher="empirical", lr=0.1, step_rule="clip")
    for _ in range(3):
        plain_step(plain, model, X, y)
        named.step(closure_for(named, twin, X, y), inputs=X, targets=y)
    a, b = plain.preconditioner.curvature.stats(), named.preconditioner.curvature.stats()
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=1e-10, atol=1e-14) for k in a)
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.allclose(p, q, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("curvature", ["kfac", "diag"])
def test_empirical_fisher_of_sequence_outputs_from_the_users_backward(curvature):
    """(N, T, C) outputs: one column per position, back-propagated at the output; the loss summed over
    positions and averaged over examples (the documented convention) gives the explicit form's statistics."""
    g = torch.Generator().manual_seed(3)
    X, y = torch.randn(6, 5, 4, generator=g, dtype=torch.float64), torch.randint(0, 3, (6, 5), generator=g)
    model = mlp()
    twin = copy.deepcopy(model)
    plain = ig.nn.Preconditioner(model, curvature=curvature, fisher="empirical")
    named = ig.nn.Preconditioner(twin, curvature=curvature, fisher="empirical")
    (F.cross_entropy(model(X).transpose(1, 2), y, reduction="sum") / len(X)).backward()
    plain.step()
    named.step(inputs=X, targets=y)
    a, b = plain.curvature.stats(), named.curvature.stats()
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=1e-10, atol=1e-14) for k in a)


@pytest.mark.parametrize("curvature", ["cg", "kfac"])
def test_tiny_transformer_trains(curvature):
    """Embedding + LayerNorm + attention: K-FAC mixes Kronecker and diagonal blocks; CG needs no structure."""
    torch.manual_seed(0)
    model = TinyTransformer(vocab=7, d=8, classes=2)
    X = torch.randint(0, 7, (32, 5))
    y = (X == 3).any(1).long()
    opt = ig.nn.NaturalGradient(model, lr=0.3, curvature=curvature, damping=1e-2, kl_clip=1e-2, cg_max_iter=10, step_rule="clip")
    with torch.no_grad():
        l0 = F.cross_entropy(model(X), y).item()
    for _ in range(10):
        loss = plain_step(opt, model, X, y)
    assert loss.item() < 0.6 * l0
    if curvature == "kfac":
        kinds = {b.kind for b in opt.preconditioner.curvature.blocks}
        assert kinds == {"kfac", "diag"}


#: every device test runs on the CPU too (CI has no GPU), and on CUDA when there is one
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("curvature,quadratic", [("kfac", False), ("diag", False), ("cg", False), ("kfac", True)])
def test_device(device, curvature, quadratic, tmp_path):
    torch.manual_seed(0)
    model = mlp(sizes=(4, 16, 3)).float().to(device)
    X, y = data(64, dtype=torch.float32)
    X, y = X.to(device), y.to(device)
    opt = ig.nn.NaturalGradient(model, lr=1.0 if quadratic else 0.1, curvature=curvature, damping=1e-2,
                                quadratic_model=quadratic, adaptive_damping=quadratic, damping_adaptation_period=1,
                                curvature_update_period=2)
    for _ in range(3):
        opt.step(closure_for(opt, model, X, y), inputs=X if quadratic else None)
    assert all(p.device.type == device and bool(torch.isfinite(p).all()) for p in model.parameters())
    torch.save(opt.state_dict(), tmp_path / "opt.pt")
    opt.load_state_dict(torch.load(tmp_path / "opt.pt", weights_only=True))
    opt.step(closure_for(opt, model, X, y), inputs=X if quadratic else None)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fisher", ["mc", "empirical"])
def test_autocast_cnn_with_batchnorm_keeps_float32_factors(device, fisher):
    """Under bf16 autocast: a CNN with BatchNorm in training mode trains, statistics and factorisations float32."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.Conv2d(4, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 3)).to(device)
    X, y = torch.randn(32, 1, 8, 8, device=device), torch.randint(0, 3, (32,), device=device)
    opt = ig.nn.NaturalGradient(model, lr=0.1, curvature="kfac", fisher=fisher, curvature_update_period=1, step_rule="clip")
    losses = []
    for _ in range(4):
        opt.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(X), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(t.dtype == torch.float32 for t in opt.preconditioner.curvature.stats().values())
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    assert losses[-1] < losses[0]


def test_quadratic_model_step_minimises_the_exact_model_over_the_span():
    """Diagonal curvature gives the direction; step size and momentum minimise M under the dense jacrev metric."""
    model = mlp()
    X, y = data(12)
    lam = 0.1
    opt = ig.nn.NaturalGradient(model, lr=1.0, curvature="diag", damping=lam, fisher="exact", quadratic_model=True,
                                ema_decay=0.0, curvature_update_period=1, kl_clip=None)
    prev = None
    for it in range(3):
        G = reference_metric(model, X, categorical_Gz) + lam * torch.eye(sum(p.numel() for p in model.parameters()),
                                                                         dtype=torch.float64)
        g = flat_grad(model, X, y)
        before = flat_params(model)
        opt.step(closure_for(opt, model, X, y), inputs=X)
        step = flat_params(model) - before
        Delta = -g / torch.diagonal(G)           # diag(G) + lam, since G already holds lam I
        D = torch.stack([Delta] if prev is None else [Delta, prev], dim=1)
        c = torch.linalg.solve(D.T @ G @ D, -(D.T @ g))
        expected = D @ c
        assert torch.allclose(step, expected, rtol=1e-8, atol=1e-12)
        M = lambda s: float(g @ s + 0.5 * s @ G @ s)  # noqa: E731
        assert M(step) <= M(Delta) + 1e-12
        if prev is not None:
            assert abs(float(c[1])) > 1e-6  # the momentum coefficient is used, not zero
        prev = step


def test_quadratic_model_rejects_explicit_momentum():
    model = mlp()
    with pytest.raises(ValueError, match="momentum"):
        ig.nn.NaturalGradient(model, quadratic_model=True, momentum=0.9)


def test_quadratic_model_trust_region():
    """With kl_clip the model's step is shortened until s^T (G + lambda I) s equals kl_clip (dense jacrev G)."""
    model = mlp()
    X, y = data(16)
    lam = 1e-3
    opt = ig.nn.NaturalGradient(model, lr=1.0, curvature="dense", damping=lam, fisher="exact", quadratic_model=True,
                                kl_clip=1e-4)
    G = reference_metric(model, X, categorical_Gz)
    G = G + lam * torch.eye(G.shape[0], dtype=G.dtype)
    g = flat_grad(model, X, y)
    before = flat_params(model)
    opt.step(closure_for(opt, model, X, y), inputs=X)
    s = flat_params(model) - before
    full = -torch.linalg.solve(G, g)       # the unclipped minimiser of the model (exact curvature: alpha = 1)
    assert float(full @ G @ full) > 1e-3
    assert abs(float(s @ G @ s) - 1e-4) < 1e-9
    assert torch.allclose(s / s.norm(), full / full.norm(), atol=1e-8)


def test_quadratic_model_in_the_plain_loop_advances_batchnorm_once():
    """The quadratic model evaluates the network on copies of BatchNorm's buffers: one count per step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 3)).double()
    opt = ig.nn.NaturalGradient(model, lr=1.0, curvature="cg", damping=1e-2, quadratic_model=True)
    for i in range(3):
        X, y = data(16, seed=i)
        plain_step(opt, model, X, y)
    assert int(model[1].num_batches_tracked) == 3


def test_non_finite_gradient_undoes_the_last_step_and_raises_damping():
    model = mlp()
    X, y = data(8)
    opt = ig.nn.NaturalGradient(model, lr=0.1, curvature="diag", damping=1e-2, step_rule="clip")
    start = flat_params(model)
    plain_step(opt, model, X, y)
    assert not torch.equal(flat_params(model), start)
    opt.zero_grad()
    (F.cross_entropy(model(X), y) * float("nan")).backward()
    with pytest.warns(RuntimeWarning, match="last step undone, damping raised"):
        opt.step()
    assert torch.allclose(flat_params(model), start, rtol=0, atol=1e-15)
    assert opt.damping == pytest.approx(0.1)
    for _ in range(40):   # training goes on, and the raised damping comes back down
        plain_step(opt, model, X, y)
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    assert opt.damping == pytest.approx(1e-2)


def test_a_dropped_optimizer_takes_its_hooks_with_it():
    import gc
    model = mlp()
    hooks = lambda: sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())  # noqa: E731
    opt = ig.nn.NaturalGradient(model, step_rule="clip")
    X, y = data(8)
    plain_step(opt, model, X, y)
    assert hooks() == 4     # pre and post on the model, one per layer
    del opt
    gc.collect()
    assert hooks() == 0
