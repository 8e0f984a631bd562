"""NaturalGradient's step rules: the grafted default (Adam's length, the natural-gradient direction) against an
independent reference, the learning rate's effect at every value a user would try, and the options' checks."""
import copy
import itertools

import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from .conftest import categorical_Gz, mlp, reference_metric  # noqa: E402
from .test_optim import data, flat_params, plain_step  # noqa: E402

F = torch.nn.functional


def test_grafted_steps_match_adam_length_and_dense_natural_gradient_direction():
    """Per parameter tensor: the step is lr * |Adam's step| * u/|u|, u the running mean of (G + lambda I)^{-1} g;
    Adam's step from torch.optim.Adam, G by jacrev (conftest), over two steps on two batches."""
    model = mlp()
    adam_model = copy.deepcopy(model)
    adam = torch.optim.Adam(adam_model.parameters(), lr=1.0, betas=(0.9, 0.999), eps=1e-8)
    lr, lam, b1 = 3e-3, 1e-2, 0.9
    opt = ig.nn.NaturalGradient(model, lr=lr, curvature="dense", damping=lam, fisher="exact",
                                curvature_update_period=1, inverse_update_period=1, ema_decay=0.0)
    names = [n for n, _ in model.named_parameters()]
    u = None
    for k in range(2):
        X, y = data(6, seed=k)
        G = reference_metric(model, X, categorical_Gz)
        model.zero_grad()
        F.cross_entropy(model(X), y).backward()
        g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        delta = torch.linalg.solve(G + lam * torch.eye(len(g), dtype=g.dtype), g)
        u = (1 - b1) * delta if u is None else b1 * u + (1 - b1) * delta
        # Adam at the same point with the same gradient: its step, per tensor
        with torch.no_grad():
            for pa, p in zip(adam_model.parameters(), model.parameters()):
                pa.copy_(p)
                pa.grad = p.grad.clone()
        before_adam = flat_params(adam_model)
        adam.step()
        adam_step = flat_params(adam_model) - before_adam
        before = flat_params(model)
        opt.step()
        step = flat_params(model) - before
        i = 0
        for n, p in zip(names, model.parameters()):
            sl = slice(i, i + p.numel())
            i += p.numel()
            expected = -lr * adam_step[sl].norm() * u[sl] / u[sl].norm()
            assert torch.allclose(step[sl], expected, rtol=1e-8, atol=1e-14), n


LRS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)


@pytest.mark.parametrize("curvature", ["kfac", "diag"])
def test_lr_changes_the_trajectory_at_every_value_a_user_would_try(curvature):
    """The first step's length is proportional to lr (nothing overrides it), and after three steps every pair
    of rates is at a different point (under the former default, a KL trust region set the length instead)."""
    first, final = {}, {}
    for lr in LRS:
        model = mlp()
        start = flat_params(model)
        opt = ig.nn.NaturalGradient(model, lr=lr, curvature=curvature)
        for k in range(3):
            plain_step(opt, model, *data(16, seed=k))
            if k == 0:
                first[lr] = (flat_params(model) - start).norm().item()
        final[lr] = flat_params(model)
    for lr in LRS:
        assert first[lr] / first[LRS[0]] == pytest.approx(lr / LRS[0], rel=1e-6)
    for a, b in itertools.combinations(LRS, 2):
        assert not torch.allclose(final[a], final[b], rtol=1e-4, atol=0), (a, b)


def test_step_rule_options_are_checked():
    model = mlp()
    with pytest.raises(ValueError, match="step_rule"):
        ig.nn.NaturalGradient(model, step_rule="adam")
    with pytest.raises(ValueError, match="kl_clip"):
        ig.nn.NaturalGradient(model, step_rule="graft", kl_clip=1e-3)
    with pytest.raises(ValueError, match="kl_clip"):
        ig.nn.NaturalGradient(model, kl_clip="big")
    with pytest.raises(ValueError, match="momentum"):
        ig.nn.NaturalGradient(model, momentum=0.9)
    with pytest.raises(ValueError, match="step_rule='clip'"):
        ig.nn.NaturalGradient(model, step_rule="graft", quadratic_model=True)
    with pytest.raises(ValueError, match="betas"):
        ig.nn.NaturalGradient(model, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="betas"):
        ig.nn.NaturalGradient(model, betas=0.9)
    with pytest.raises(ValueError, match="eps"):
        ig.nn.NaturalGradient(model, eps=0.0)
    # the defaults of each rule
    assert ig.nn.NaturalGradient(model).step_rule == "graft"
    assert ig.nn.NaturalGradient(model).preconditioner.kl_clip is None
    clip = ig.nn.NaturalGradient(model, step_rule="clip")
    assert clip.param_groups[0]["lr"] == 0.1 and clip.preconditioner.kl_clip == 1e-3
    assert ig.nn.NaturalGradient(model, quadratic_model=True).step_rule == "clip"


def test_grafted_state_survives_a_checkpoint():
    """state_dict / load_state_dict carry Adam's moments and the direction average: identical continuation."""
    a = mlp()
    opt_a = ig.nn.NaturalGradient(a, curvature="kfac", curvature_update_period=1)
    for k in range(2):
        plain_step(opt_a, a, *data(16, seed=k))
    b = mlp()   # (a deep copy of a would carry opt_a's hooks)
    b.load_state_dict(a.state_dict())
    opt_b = ig.nn.NaturalGradient(b, curvature="kfac", curvature_update_period=1)
    opt_b.load_state_dict(opt_a.state_dict())
    for k in range(2, 4):
        plain_step(opt_a, a, *data(16, seed=k))
        plain_step(opt_b, b, *data(16, seed=k))
    assert torch.equal(flat_params(a), flat_params(b))
