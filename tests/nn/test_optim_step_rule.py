"""NaturalGradient's step rules: the grafted default (Adam's length, the natural-gradient direction) against an
independent reference, the learning rate's effect at every value a user would try, and the options' checks."""
import copy
import itertools

import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from infogeo.nn.optim.step_settings import INPUT_LR_SCALE, OUTPUT_LR_SCALE  # noqa: E402
from .conftest import categorical_Gz, mlp, reference_metric  # noqa: E402
from .test_distributed import Shared  # noqa: E402
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


@pytest.mark.parametrize("curvature, rule", [("kfac", None), ("ekfac", None), ("kfac", "graft"), ("diag", None)])
def test_lr_changes_the_trajectory_at_every_value_a_user_would_try(curvature, rule):
    """The first step's length is proportional to lr (nothing overrides it), and after three steps every pair
    of rates is at a different point (under the former default, a KL trust region set the length instead)."""
    first, final = {}, {}
    for lr in LRS:
        model = mlp()
        start = flat_params(model)
        opt = ig.nn.NaturalGradient(model, lr=lr, curvature=curvature, step_rule=rule)
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
    assert ig.nn.NaturalGradient(model).preconditioner.kl_clip is None
    clip = ig.nn.NaturalGradient(model, step_rule="clip")
    assert clip.param_groups[0]["lr"] == 0.1 and clip.preconditioner.kl_clip == 1e-3
    assert ig.nn.NaturalGradient(model, quadratic_model=True).step_rule == "clip"


@pytest.mark.parametrize("curvature, rule", [("kfac", "eigen-adam"), ("ekfac", "graft"), ("soap", "eigen-adam"),
                                             ("diag", "graft"), ("block", "graft"), ("dense", "graft"),
                                             ("shampoo", "graft")])
def test_the_default_step_rule_and_betas_follow_the_kind(curvature, rule):
    opt = ig.nn.NaturalGradient(mlp(), curvature=curvature)
    assert opt.step_rule == rule
    assert opt.betas == ((0.9, 0.95) if rule == "eigen-adam" else (0.9, 0.999))
    assert opt.param_groups[0]["lr"] == 1e-2
    if curvature == "kfac":   # its eigenbasis: the factors' eigendecompositions
        assert opt.preconditioner.estimate.options["inverse"] == "eigen"


def test_explicit_arguments_win_over_the_defaults():
    model = mlp()
    opt = ig.nn.NaturalGradient(model, step_rule="graft")
    assert opt.step_rule == "graft" and opt.betas == (0.9, 0.999)
    assert opt.preconditioner.estimate.options["inverse"] == "tikhonov"   # K-FAC's own default, not eigen-adam's
    opt = ig.nn.NaturalGradient(model, step_rule="eigen-adam", betas=(0.8, 0.99), lr=3e-3,
                                curvature_update_period=3, inverse_update_period=7)
    assert opt.betas == (0.8, 0.99) and opt.param_groups[0]["lr"] == 3e-3
    assert (opt.preconditioner.estimate.curvature_update_period, opt.preconditioner.estimate.inverse_update_period) \
        == (3, 7)
    assert ig.nn.NaturalGradient(model, step_rule="graft", betas=(0.9, 0.95)).betas == (0.9, 0.95)
    assert ig.nn.NaturalGradient(model, step_rule="clip").step_rule == "clip"
    assert ig.nn.NaturalGradient(model, quadratic_model=True).step_rule == "clip"
    assert ig.nn.NaturalGradient(model, adaptive_damping=True).step_rule == "clip"
    # an inverse without an eigenbasis: the default is the solving rule, an explicit eigen-adam is refused
    assert ig.nn.NaturalGradient(model, inverse="tikhonov").step_rule == "graft"
    assert ig.nn.NaturalGradient(model, inverse="Eigen").step_rule == "eigen-adam"
    with pytest.raises(ValueError, match="inverse='eigen'"):
        ig.nn.NaturalGradient(model, step_rule="eigen-adam", inverse="tikhonov")


def test_a_sharded_model_defaults_to_graft():
    """fully_shard's DTensor parameters refuse eigen-adam: the default falls back to graft (the real FSDP2 runs
    are in test_fsdp); settings.step_defaults is what the optimizer asks."""
    from infogeo.nn.optim.settings import step_defaults
    assert step_defaults("kfac", None, None, {}, classic=False, sharded=True) == ("graft", (0.9, 0.999))
    assert step_defaults("ekfac", None, None, {}, classic=False, sharded=False) == ("graft", (0.9, 0.999))
    # an explicit eigen-adam is kept (and refused by the optimizer under FSDP2, test_fsdp)
    assert step_defaults("kfac", "eigen-adam", None, {}, classic=False, sharded=True)[0] == "eigen-adam"


@pytest.mark.parametrize("options, expected, statistics", [
    # the default periods 10, 100: eigen-adam uses the factorisations alone, so statistics only where one is made
    ({}, [0, 1, 2, 4, 8, 16, 32, 64, 100, 200], [0, 1, 2, 4, 8, 16, 32, 64, 100, 200]),
    ({"step_rule": "graft"}, [0, 1, 2, 4, 8, 16, 32, 64, 100, 200],
     sorted(set(range(0, 201, 10)) | {1, 2, 4, 8, 16, 32, 64})),
    ({"curvature_update_period": 10, "inverse_update_period": 40}, [0, 10, 20, 30, 40, 80, 120, 160, 200],
     list(range(0, 201, 10))),
    ({"inverse_update_period": 40}, [0, 40, 80, 120, 160, 200], [0, 40, 80, 120, 160, 200])])
def test_the_early_refreshes(options, expected, statistics):
    """With the default periods, statistics and factorisations at steps 0, 1, 2, 4, 8, ... before the first inverse
    period, then on the period; periods of the user's own are kept exactly (factorisations at every statistics
    refresh before the first inverse period).  Under eigen-adam (the default rule), which uses only the
    factorisation, the statistics period defaults to the factorisation period.  Counted by wrapping the estimate's
    factorisation and statistics."""
    model = mlp()
    opt = ig.nn.NaturalGradient(model, **options)
    est, seen, stats = opt.preconditioner.estimate, [], []
    factorise, statistics_of = est.factorise, est.statistics
    est.factorise = lambda *a, **k: (seen.append(opt.preconditioner.steps), factorise(*a, **k))[1]
    est.statistics = lambda *a, **k: (stats.append(opt.preconditioner.steps), statistics_of(*a, **k))[1]
    for k in range(201):
        plain_step(opt, model, *data(16, seed=k))
    assert seen == expected
    assert stats == statistics


def test_the_average_forgets_per_step_not_per_refresh():
    """ema_decay beta is the weight the statistics' average keeps per refresh, and per 10 steps where refreshes
    lie further apart: statistics recorded every 100 steps (eigen-adam's default) are forgotten at the pace of the
    default period.  Checked on a Kronecker input factor: with the model frozen (lr 1e-30) and batch 1 at step 0,
    batch 2 after, the factor at step 100 is W A_1 + (1 - W) A_2, where A_1 holds the weight (1 - β) P of an
    average started from zero, with P the product of the weights kept at the refreshes 1, 2, 4, ..., 64, 100,
    over the weight the average has gathered, 1 - βP (its bias correction); A_1 and A_2 from optimizers that
    saw one batch each."""
    (x1, y1), (x2, y2) = data(16, seed=1), data(16, seed=2)

    def factor(batches):
        torch.manual_seed(0)
        model = mlp()
        opt = ig.nn.NaturalGradient(model, lr=1e-30, ema_decay=0.9)
        for x, y in batches:
            plain_step(opt, model, x, y)
        return opt.preconditioner.estimate.curvature.blocks[0].A.double(), opt.preconditioner.estimate
    A1, est = factor([(x1, y1)])
    A2, _ = factor([(x2, y2)])
    A, long = factor([(x1, y1)] + [(x2, y2)] * 100)
    kept = [est.decay(k) for k in (1, 2, 4, 8, 16, 32, 64, 100)]
    # Delta = 1, 1, 2, 4, 8 steps keep beta each; 16, 32, 36 steps keep beta^(Delta/10)
    assert kept == pytest.approx([0.9] * 5 + [0.9 ** 1.6, 0.9 ** 3.2, 0.9 ** 3.6], rel=1e-12)
    P = 0.9 ** 13.4
    W = 0.1 * P / (1 - 0.9 * P)
    torch.testing.assert_close(A, W * A1 + (1 - W) * A2, rtol=1e-5, atol=1e-6 * float(A2.abs().max()))
    assert long.unfilled == pytest.approx(0.9 * P, rel=1e-12)
    for other in (P, 0.1 * 0.9 ** 8 / (1 - 0.9 ** 9)):   # uncorrected; corrected per refresh instead of per step
        assert float((A - (other * A1 + (1 - other) * A2)).abs().max()) > 1e-3 * float(A2.abs().max())
    graft = ig.nn.NaturalGradient(mlp(), step_rule="graft", ema_decay=0.9).preconditioner.estimate
    assert [graft.decay(k) for k in (8, 10, 16, 20, 100, 110)] == pytest.approx([0.9] * 6, rel=1e-12)


def test_grafted_state_survives_a_checkpoint():
    """state_dict / load_state_dict carry Adam's moments and the direction average: identical continuation."""
    a = mlp()
    opt_a = ig.nn.NaturalGradient(a, curvature="kfac", step_rule="graft", curvature_update_period=1)
    for k in range(2):
        plain_step(opt_a, a, *data(16, seed=k))
    b = mlp()   # (a deep copy of a would carry opt_a's hooks)
    b.load_state_dict(a.state_dict())
    opt_b = ig.nn.NaturalGradient(b, curvature="kfac", step_rule="graft", curvature_update_period=1)
    opt_b.load_state_dict(opt_a.state_dict())
    for k in range(2, 4):
        plain_step(opt_a, a, *data(16, seed=k))
        plain_step(opt_b, b, *data(16, seed=k))
    assert torch.equal(flat_params(a), flat_params(b))


# ------------------------------------------------------------------ "eigen-adam"
def _kron_factors(model, X):
    r"""By hand, for Linear(4, 3) as the last layer: :math:`A = \frac1N\sum\bar a\bar a^T` of its inputs and
    :math:`G = \frac1N\sum_n(\operatorname{diag}p_n - p_np_n^T)`, the exact categorical Fisher at its outputs."""
    a = model[0](X)
    abar = torch.cat([a, torch.ones(len(a), 1, dtype=a.dtype)], dim=1)
    p = torch.softmax(model(X), -1).detach()
    return (abar.T @ abar / len(X)).detach(), (torch.diag_embed(p) - p[:, :, None] * p[:, None, :]).mean(0)


def _adam_in_basis(m, v, Q, Qn, g, k, betas, eps, nesterov):
    """Step k of Adam (NAdam's moment with ``nesterov``) by hand in the dense basis ``Qn`` of a flattened block
    gradient ``g``, the moments ``m, v`` kept in the previous basis ``Q`` carried over first (m' = R m,
    v' = diag(R diag(v) R^T), R = Qn^T Q): ``(m, v, u = m^/(sqrt(v^) + eps), g~ = Qn^T g)``."""
    b1, b2 = betas
    if Q is not None:
        R = Qn.T @ Q
        m, v = R @ m, torch.diagonal(R @ torch.diag(v) @ R.T)
    gt = Qn.T @ g
    m = (1 - b1) * gt if m is None else b1 * m + (1 - b1) * gt
    v = (1 - b2) * gt ** 2 if v is None else b2 * v + (1 - b2) * gt ** 2
    m_hat = b1 * m / (1 - b1 ** (k + 1)) + (1 - b1) * gt / (1 - b1 ** k) if nesterov else m / (1 - b1 ** k)
    return m, v, m_hat / ((v / (1 - b2 ** k)).sqrt() + eps), gt


@pytest.mark.parametrize("nesterov", [False, True])
def test_eigen_adam_matches_rotate_adam_rotate_back_by_hand(nesterov):
    """LayerNorm(4) -> Linear(4, 3), without the cautious mask: the Linear layer's step is
    U_G [m^/(sqrt(v^) + eps)] U_A^T (at output_lr_scale times the rate: the layer writes the output) with m, v the
    Adam moments of U_G^T [W b] U_A, its basis that of factors built
    here by hand (refreshed every step, so the moments are carried between bases: m' = Q'^T Q m,
    v' = diag(Q'^T Q diag(v) Q^T Q') with dense Kronecker products Q);
    the LayerNorm (no Kronecker factors) takes torch.optim.Adam's step (NAdam's with nesterov=True:
    m^ = b1 m / (1 - b1^(t+1)) + (1 - b1) g / (1 - b1^t), torch.optim.NAdam with a constant b1)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(4), torch.nn.Linear(4, 3)).double()
    with torch.no_grad():   # a LayerNorm whose parameters matter
        model[0].weight.uniform_(0.5, 1.5)
        model[0].bias.uniform_(-0.5, 0.5)
    norm = copy.deepcopy(model[0])
    # a huge momentum_decay makes NAdam's momentum schedule the constant b1 (its running product in float64)
    adam = (_ConstantNAdam(norm.parameters(), lr=1.0, betas=(0.9, 0.99), eps=1e-8) if nesterov else
            torch.optim.Adam(norm.parameters(), lr=1.0, betas=(0.9, 0.99), eps=1e-8))
    lr, (b1, b2), eps = 3e-2, (0.9, 0.99), 1e-8
    opt = ig.nn.NaturalGradient(model, lr=lr, curvature="kfac", fisher="exact", step_rule="eigen-adam",
                                betas=(b1, b2), curvature_update_period=1, inverse_update_period=1, ema_decay=0.0,
                                nesterov=nesterov, cautious=False)
    m = v = Q = None
    for k in range(1, 4):
        X, y = data(12, seed=k)
        A, G = _kron_factors(model, X)
        Qn = torch.kron(torch.linalg.eigh(G)[1], torch.linalg.eigh(A)[1])
        model.zero_grad()
        F.cross_entropy(model(X), y).backward()
        lin = model[1]
        g = torch.cat([lin.weight.grad, lin.bias.grad[:, None]], dim=1).reshape(-1)
        m, v, u, _ = _adam_in_basis(m, v, Q, Qn, g, k, (b1, b2), eps, nesterov)
        expected = -lr * OUTPUT_LR_SCALE * (Qn @ u).reshape(3, 5)
        Q = Qn
        for pa, p in zip(norm.parameters(), model[0].parameters()):
            pa.grad = p.grad.clone()
        before_norm = flat_params(norm)
        adam.step()
        before = [p.detach().clone() for p in model.parameters()]
        opt.step()
        after = [p.detach() for p in model.parameters()]
        # LayerNorm's outputs leave A a null direction: there the rotated gradient is rounding noise (~1e-16 |g|),
        # which Adam divides by eps = 1e-8, so a step entry may carry lr * 1e-8-sized noise in either computation
        torch.testing.assert_close(after[2] - before[2], expected[:, :4], rtol=1e-7, atol=lr * 1e-6)
        torch.testing.assert_close(after[3] - before[3], expected[:, 4], rtol=1e-7, atol=lr * 1e-6)
        norm_step = torch.cat([(a - b).reshape(-1) for a, b in zip(after[:2], before[:2])])
        torch.testing.assert_close(norm_step, lr * (flat_params(norm) - before_norm), rtol=1e-9, atol=1e-15)


def _masked(u, g):
    """The cautious mask by hand: u where u g > 0, else 0, divided by the share kept (at least 1e-3)."""
    keep = (u * g > 0).to(u.dtype)
    return u * keep / max(float(keep.mean()), 1e-3)


@pytest.mark.parametrize("nesterov", [False, True])
def test_cautious_eigen_adam_matches_by_hand(nesterov):
    """Linear(4, 4) (frozen) -> Tanh -> Linear(4, 3) with three Bernoulli outputs, the default cautious mask: the last
    layer's step is U_G masked(u, g~) U_A^T for u = m^/(sqrt(v^) + eps) and g~ = U_G^T [W b] U_A (at input_lr_scale
    times the rate: the layer reads the frozen part's output, a leaf of the autograd graph), with factors
    built here by hand (A of the inputs, G = mean of diag(p (1 - p)), the exact Bernoulli Fisher at the outputs)
    and refreshed every step, the moments carried between bases as in the test above.  (Bernoulli outputs: the
    softmax's G has the all-ones null direction, where g~ is rounding noise of either sign, and a mask decided by
    noise would change the share kept.)  The mask is not a no-op: coordinates are dropped, and the plain rule's
    steps differ."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)).double()
    model[0].requires_grad_(False)
    lr, (b1, b2), eps = 3e-2, (0.9, 0.99), 1e-8
    kw = dict(lr=lr, curvature="kfac", fisher="exact", output_metric="bernoulli", step_rule="eigen-adam",
              betas=(b1, b2), curvature_update_period=1, inverse_update_period=1, ema_decay=0.0, nesterov=nesterov)
    opt = ig.nn.NaturalGradient(model, **kw)
    assert opt.cautious is True
    plain = copy.deepcopy(model)
    opt_plain = ig.nn.NaturalGradient(plain, cautious=False, **kw)
    gen = torch.Generator().manual_seed(2)
    m = v = Q = None
    dropped = []
    for k in range(1, 6):
        X = torch.randn(12, 4, generator=gen, dtype=torch.float64)
        Y = (torch.rand(12, 3, generator=gen) < 0.5).double()
        a = model[1](model[0](X))
        abar = torch.cat([a, torch.ones(len(a), 1, dtype=a.dtype)], dim=1)
        p = torch.sigmoid(model(X)).detach()
        A, G = (abar.T @ abar / len(X)).detach(), torch.diag((p * (1 - p)).mean(0))
        Qn = torch.kron(torch.linalg.eigh(G)[1], torch.linalg.eigh(A)[1])
        for net, o in ((model, opt), (plain, opt_plain)):
            o.zero_grad()
            F.binary_cross_entropy_with_logits(net(X), Y).backward()
        lin = model[2]
        g = torch.cat([lin.weight.grad, lin.bias.grad[:, None]], dim=1).reshape(-1)
        m, v, u, gt = _adam_in_basis(m, v, Q, Qn, g, k, (b1, b2), eps, nesterov)
        dropped.append(int((u * gt <= 0).sum()))
        expected = -lr * INPUT_LR_SCALE * (Qn @ _masked(u, gt)).reshape(3, 5)
        Q = Qn
        before = [t.detach().clone() for t in (lin.weight, lin.bias)]
        opt.step()
        opt_plain.step()
        torch.testing.assert_close(lin.weight.detach() - before[0], expected[:, :4], rtol=1e-7, atol=1e-12)
        torch.testing.assert_close(lin.bias.detach() - before[1], expected[:, 4], rtol=1e-7, atol=1e-12)
    assert sum(dropped) > 0
    assert float((flat_params(model) - flat_params(plain)).abs().max()) > 1e-4


class _ConstantNAdam(torch.optim.NAdam):
    """torch.optim.NAdam with the constant momentum b1 (Dozat 2016's NAdam): momentum_decay so large that its
    schedule b1 (1 - 0.96^(t psi) / 2) is b1, its running product of the b1s kept in float64 (created at the first
    step in the default dtype)."""

    def __init__(self, params, **kw):
        super().__init__(params, momentum_decay=1e6, **kw)

    def step(self, closure=None):
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            return super().step(closure)
        finally:
            torch.set_default_dtype(old)


def test_cautious_is_eigen_adams_default_and_checked():
    """cautious defaults to True under eigen-adam with the model's Fisher (False with other rules, and for SOAP's
    gradient statistics, as published); a non-bool, or True with another rule, is refused by name; the ranks
    agree on it (it is among the settings they compare)."""
    model = mlp()
    assert ig.nn.NaturalGradient(model).cautious is True
    assert ig.nn.NaturalGradient(model, curvature="ekfac", step_rule="eigen-adam").cautious is True
    assert ig.nn.NaturalGradient(model, cautious=False).cautious is False
    assert ig.nn.NaturalGradient(model, step_rule="graft").cautious is False
    assert ig.nn.NaturalGradient(model, curvature="soap").cautious is False
    assert ig.nn.NaturalGradient(model, curvature="soap", cautious=True).cautious is True
    with pytest.raises(TypeError, match="cautious"):
        ig.nn.NaturalGradient(model, cautious=1)
    for rule in ("graft", "clip"):
        with pytest.raises(ValueError, match="cautious=True"):
            ig.nn.NaturalGradient(model, step_rule=rule, cautious=True)
    a, b = ig.nn.NaturalGradient(model), ig.nn.NaturalGradient(model, cautious=False)
    assert a._settings() != b._settings()


def test_nesterov_is_eigen_adams_default_and_checked():
    """nesterov defaults to True under eigen-adam with the model's Fisher (False elsewhere, and for SOAP's gradient
    statistics); a non-bool, or True with another rule, is refused by name."""
    model = mlp()
    assert ig.nn.NaturalGradient(model).nesterov is True
    assert ig.nn.NaturalGradient(model, nesterov=False).nesterov is False
    assert ig.nn.NaturalGradient(model, step_rule="graft").nesterov is False
    assert ig.nn.NaturalGradient(model, curvature="soap").nesterov is False     # SOAP as published
    assert ig.nn.NaturalGradient(model, curvature="soap", nesterov=True).nesterov is True
    with pytest.raises(TypeError, match="nesterov"):
        ig.nn.NaturalGradient(model, nesterov="yes")
    for rule in ("graft", "clip"):
        with pytest.raises(ValueError, match="nesterov=True"):
            ig.nn.NaturalGradient(model, step_rule=rule, nesterov=True)


@pytest.mark.parametrize("nesterov", [False, True])
def test_eigen_adam_in_the_identity_basis_is_adam(nesterov):
    """The rule with U_A, U_G = I (and without a basis) takes torch.optim.Adam's steps over five gradients, or with
    nesterov=True torch.optim.NAdam's with a constant b1, which differ from Adam's (the test can fail)."""
    from infogeo.nn.optim.eigen_adam import eigen_adam
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(3, 5, generator=g, dtype=torch.float64) for _ in range(5)]
    w = torch.zeros(3, 5, dtype=torch.float64, requires_grad=True)
    kw = dict(lr=1.0, betas=(0.8, 0.95), eps=1e-6)
    reference = _ConstantNAdam([w], **kw) if nesterov else torch.optim.Adam([w], **kw)
    identity, raw, other = {}, {}, {}
    basis = (torch.eye(5, dtype=torch.float64), torch.eye(3, dtype=torch.float64))
    for gk in grads:
        before = w.detach().clone()
        w.grad = gk.clone()
        reference.step()
        step = w.detach() - before
        for state, b in ((identity, basis), (raw, None)):
            torch.testing.assert_close(-eigen_adam(state, gk, b, (0.8, 0.95), 1e-6, nesterov=nesterov), step,
                                       rtol=1e-12, atol=0)
        assert float((eigen_adam(other, gk, None, (0.8, 0.95), 1e-6, nesterov=not nesterov) + step).abs().max()) > 1e-3


@pytest.mark.parametrize("nesterov", [False, True])
def test_cautious_eigen_adam_in_the_identity_basis_is_cautious_adam(nesterov):
    """With U_A, U_G = I (and without a basis) and cautious=True, the rule's step is torch.optim.Adam's (NAdam's)
    direction u masked by hand: kept where u g > 0, divided by the share kept; coordinates are dropped (the
    gradients are drawn so that some disagree with the momentum)."""
    from infogeo.nn.optim.eigen_adam import eigen_adam
    g = torch.Generator().manual_seed(3)
    grads = [torch.randn(3, 5, generator=g, dtype=torch.float64) for _ in range(6)]
    w = torch.zeros(3, 5, dtype=torch.float64, requires_grad=True)
    kw = dict(lr=1.0, betas=(0.8, 0.95), eps=1e-6)
    reference = _ConstantNAdam([w], **kw) if nesterov else torch.optim.Adam([w], **kw)
    identity, raw = {}, {}
    basis = (torch.eye(5, dtype=torch.float64), torch.eye(3, dtype=torch.float64))
    dropped = 0
    for gk in grads:
        before = w.detach().clone()
        w.grad = gk.clone()
        reference.step()
        u = before - w.detach()   # lr = 1: Adam's direction
        dropped += int((u * gk <= 0).sum())
        for state, b in ((identity, basis), (raw, None)):
            got = eigen_adam(state, gk, b, (0.8, 0.95), 1e-6, nesterov=nesterov, cautious=True)
            torch.testing.assert_close(got, _masked(u, gk), rtol=1e-12, atol=0)
    assert dropped > 0


def test_cautious_mask_keeps_the_mean_and_bounds_the_scale():
    """cautious_mask by hand: zero where u g < 0, the rest divided by the share kept, at most 1000x (the floor of the
    share); coordinates where g is rounding (|g| <= n eps max|g|, here an exact 0 and a 1e-20) or in a block's
    factor null space are left as they are and not counted (all of a zero gradient's); an empty tensor is
    unchanged."""
    from infogeo.nn.optim.step import CAUTIOUS_FLOOR, cautious_mask
    u = torch.tensor([1.0, -2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
    g = torch.tensor([1.0, 1.0, 0.0, 2.0, -1e-20], dtype=torch.float64)
    (out,) = cautious_mask([u], [g])   # decided: 1, -2, 4 (2 of 3 kept: scale 1.5); 3 and 5 as they are
    torch.testing.assert_close(out, torch.tensor([1.5, 0.0, 3.0, 6.0, 5.0], dtype=torch.float64))
    big = torch.ones(5000)
    sign = -torch.ones(5000)
    sign[0] = 1.0
    (one,) = cautious_mask([big], [sign])   # 1 of 5000 kept: share 2e-4, floored at 1e-3
    assert float(one[0]) == pytest.approx(1 / CAUTIOUS_FLOOR) and float(one[1:].abs().max()) == 0.0
    U = torch.tensor([[1.0, 2.0, -3.0], [4.0, -5.0, 6.0]])
    Gr = torch.tensor([[-1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    # k_A = 1: the first column is the null space (as is, not counted); of the other four, 2 agree: scale 2
    (nulled, plain) = cautious_mask([U, U], [Gr, Gr], {0: (1, 0)})
    torch.testing.assert_close(nulled, torch.tensor([[1.0, 4.0, 0.0], [4.0, 0.0, 12.0]]))
    keepers = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]])   # u g > 0 at (0, 1), (1, 0), (1, 2): 3 of 6
    torch.testing.assert_close(plain, U * keepers * 2.0)
    (empty,) = cautious_mask([torch.zeros(0, 3)], [torch.zeros(0, 3)])
    assert empty.shape == (0, 3)
    (unseen, seen) = cautious_mask([U, U], [torch.zeros(2, 3), Gr])   # a zero gradient decides nothing
    assert torch.equal(unseen, U) and torch.equal(seen, plain)


def _null_rotated(U, k, g):
    """``U`` with its first ``k`` columns (a null space) turned by a random rotation within their span."""
    R, _ = torch.linalg.qr(torch.randn(k, k, generator=g, dtype=U.dtype))
    out = U.clone()
    out[:, :k] = U[:, :k] @ R
    return out


def test_eigen_adam_does_not_depend_on_the_basis_an_eigensolver_picks_in_a_null_space():
    """Factors of rank 3 of 6 and 2 of 5: two eigenbases that differ only within the null spaces give the same
    steps, step after step, because the second moment is pooled there; with a second moment per direction they
    do not (the test can fail)."""
    from infogeo.nn.curvature.factor_eigh import null_dim
    from infogeo.nn.optim.eigen_adam import eigen_adam
    g = torch.Generator().manual_seed(0)
    XA, XG = (torch.randn(r, n, generator=g, dtype=torch.float64) for r, n in ((3, 6), (2, 5)))
    (la, Ua), (lg, Ug) = torch.linalg.eigh(XA.T @ XA), torch.linalg.eigh(XG.T @ XG)
    null = (null_dim(la), null_dim(lg))
    assert null == (3, 3)
    turned = (_null_rotated(Ua, 3, g), _null_rotated(Ug, 3, g))
    grads = [torch.randn(5, 6, generator=g, dtype=torch.float64) for _ in range(5)]
    for pooled in (True, False):
        s1, s2 = {}, {}
        gap = 0.0
        for gk in grads:
            d1 = eigen_adam(s1, gk, (Ua, Ug), (0.9, 0.95), 1e-8, null=null if pooled else (0, 0))
            d2 = eigen_adam(s2, gk, turned, (0.9, 0.95), 1e-8, null=null if pooled else (0, 0))
            gap = max(gap, float((d1 - d2).abs().max() / d1.abs().max()))
        assert gap < 1e-12 if pooled else gap > 1e-3, (pooled, gap)


def test_kfac_exact_inverse_is_the_same_in_any_basis_of_the_null_spaces():
    """K-FAC's exact damped inverse, its factorisation taking whatever null-space basis the solver returns,
    equals the one in the canonical basis (the damping is the scale of every null direction); a batch of 3
    examples gives factors of rank 3 (inputs 6 + bias) and at most 3 (outputs 8)."""
    from infogeo.nn.curvature.eigenbasis import ExactKronBlock
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4)).double()
    X, y = torch.randn(3, 6, dtype=torch.float64), torch.randint(0, 4, (3,))
    C = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y).curvature("kfac", inverse="eigen")
    v = {n: torch.randn_like(p) for n, p in model.named_parameters()}
    fast = C.solve(None, v, damping=1e-3)
    assert all(b.null_dims()[0] >= 4 for b in C.blocks if isinstance(b, ExactKronBlock))
    for b in C.blocks:
        b._eig, b.canonical_null = None, True   # the canonical null basis, factorised anew
    slow = C.solve(None, v, damping=1e-3)
    for n in v:
        torch.testing.assert_close(fast[n], slow[n], rtol=1e-9, atol=1e-12)


def test_eigen_adam_state_survives_a_checkpoint_bit_exactly():
    """Moments and bases through state_dict / load_state_dict (and torch.save with weights_only): the same
    parameters, bit for bit, with basis refreshes before and after the checkpoint."""
    import io
    kw = dict(curvature="kfac", step_rule="eigen-adam", curvature_update_period=2, inverse_update_period=2)
    a = mlp()
    opt_a = ig.nn.NaturalGradient(a, **kw)
    for k in range(3):
        plain_step(opt_a, a, *data(16, seed=k))
    b = mlp()
    b.load_state_dict(a.state_dict())
    buf = io.BytesIO()
    torch.save(opt_a.state_dict(), buf)
    buf.seek(0)
    opt_b = ig.nn.NaturalGradient(b, **kw)
    opt_b.load_state_dict(torch.load(buf, weights_only=True))
    for k in range(3, 7):
        plain_step(opt_a, a, *data(16, seed=k))
        plain_step(opt_b, b, *data(16, seed=k))
    assert torch.equal(flat_params(a), flat_params(b))


def test_eigen_adam_options_are_checked():
    model = mlp()
    with pytest.raises(ValueError, match=r"curvature= one of \['kfac', 'ekfac', 'shampoo', 'soap'\]"):
        ig.nn.NaturalGradient(model, step_rule="eigen-adam", curvature="diag")
    with pytest.raises(ValueError, match="momentum"):
        ig.nn.NaturalGradient(model, step_rule="eigen-adam", momentum=0.9)
    with pytest.raises(ValueError, match="kl_clip"):
        ig.nn.NaturalGradient(model, step_rule="eigen-adam", kl_clip=1e-3)
    with pytest.raises(ValueError, match="step_rule='clip'"):
        ig.nn.NaturalGradient(model, step_rule="eigen-adam", quadratic_model=True)
    opt = ig.nn.NaturalGradient(model, step_rule="eigen-adam", curvature="ekfac")
    assert opt.param_groups[0]["lr"] == 1e-2 and opt.preconditioner.kl_clip is None


def test_eigen_adam_with_a_diagonal_factor_is_adam_in_the_other_factors_basis():
    """An Embedding's K-FAC block has a diagonal input factor (token counts): its eigenbasis is the identity on
    that side, so eigen-adam's step on the embedding is Adam on U_Gᵀ W (per token row), rotated back by U_G, at
    input_lr_scale times the rate (the embedding reads the tokens)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(7, 4), torch.nn.Tanh(), torch.nn.Flatten(),
                                torch.nn.Linear(12, 3)).double()
    x, y = torch.randint(0, 7, (16, 3)), torch.randint(0, 3, (16,))
    opt = ig.nn.NaturalGradient(model, curvature="kfac", step_rule="eigen-adam", lr=1e-2, fisher="empirical",
                                curvature_update_period=1, inverse_update_period=1, nesterov=False)
    before = model[0].weight.detach().clone()
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    g = model[0].weight.grad.detach().clone()
    opt.step()
    blocks = [b for b in opt.preconditioner.solver.blocks if "0.weight" in b.names]
    assert len(blocks) == 1 and blocks[0].A.dim() == 1          # the diagonal input factor
    Ua, Ug = blocks[0].basis()
    assert Ua is None and Ug is not None
    # first Adam step in the rotated coordinates: m̂/(√v̂+ε) = r/(|r|+ε), r = U_Gᵀ Wᵀ (W stored (V, d))
    r = Ug.T @ g.T
    want = before - 1e-2 * INPUT_LR_SCALE * (Ug @ (r / (r.abs() + 1e-8))).T
    assert torch.allclose(model[0].weight.detach(), want, rtol=1e-10, atol=1e-12)
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())


def test_graft_without_a_direction_takes_adams_own_step():
    """A zero (or not finite) averaged direction has no length to graft onto: the step is Adam's, by hand."""
    from infogeo.nn.optim.step import graft
    torch.manual_seed(0)
    g = torch.randn(4, 3, dtype=torch.float64)
    lr, (b1, b2), eps = 0.1, (0.9, 0.999), 1e-8
    adam = (1 - b1) * g / (1 - b1) / (((1 - b2) * g * g / (1 - b2)).sqrt() + eps)
    for d in (torch.zeros_like(g), torch.full_like(g, float("nan"))):
        step = graft({}, g, d, lr, (b1, b2), eps)
        assert torch.allclose(step, -lr * adam, rtol=1e-12, atol=0)
    d = torch.randn(4, 3, dtype=torch.float64)
    step = graft({}, g, d, lr, (b1, b2), eps)
    u = (1 - b1) * d
    assert torch.allclose(step, -lr * torch.linalg.vector_norm(adam) * u / torch.linalg.vector_norm(u), rtol=1e-12)


def test_eigen_adams_kfac_gathers_the_kronecker_factors_only():
    """``factors_only`` (set by eigen-adam, whose other parameters take Adam's step): the Kronecker blocks equal
    the full build's, the rest is a zero diagonal nothing was computed for (a LayerNorm, a positional
    parameter used outside any layer)."""
    from infogeo.nn.curvature.kron import KronBlock

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin, self.norm, self.out = torch.nn.Linear(4, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3)
            self.shift = torch.nn.Parameter(0.1 * torch.randn(5))

        def forward(self, x):
            return self.out(torch.tanh(self.norm(self.lin(x)) + self.shift))

    model = Net().double()
    X = torch.randn(7, 4, dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    full, lean = (space.curvature("kfac", "exact", inverse="eigen", factors_only=f) for f in (False, True))
    kron = lambda C: {tuple(b.names): b for b in C.blocks if isinstance(b, KronBlock)}  # noqa: E731
    assert kron(full).keys() == kron(lean).keys() and len(kron(lean)) == 2
    for key, b in kron(lean).items():
        for name, t in b.stats().items():
            assert torch.equal(t, kron(full)[key].stats()[name]), (key, name)
    rest = [b for b in lean.blocks if not isinstance(b, KronBlock)]
    assert sorted(n for b in rest for n in b.names) == ["norm.bias", "norm.weight", "shift"]
    assert all(not t.any() for b in rest for t in b.stats().values())
    assert any(t.any() for b in full.blocks if not isinstance(b, KronBlock) for t in b.stats().values())
    opt = ig.nn.NaturalGradient(model)
    assert opt.preconditioner.estimate.options["factors_only"] is True
    assert ig.nn.NaturalGradient(model, step_rule="graft").preconditioner.estimate.options.get("factors_only") is None


F32 = {"state_dtype": torch.float32}


@pytest.mark.parametrize("dtype,options,held", [(torch.float16, F32, torch.float32),
                                                (torch.bfloat16, F32, torch.float32),
                                                (torch.bfloat16, {"curvature": "soap", **F32}, torch.float32),
                                                (torch.float64, {"factor_dtype": torch.bfloat16, **F32}, torch.float32),
                                                (torch.float32, {}, torch.bfloat16),
                                                (torch.float16, {}, torch.bfloat16)])
def test_resume_is_bit_identical_where_the_moments_are_kept_in_another_dtype_than_the_parameters(dtype, options,
                                                                                                   held):
    """The moments of half-precision parameters are computed in float32, and so are those in a basis of bfloat16
    statistics for float64 parameters; by default (``state_dtype="auto"``) those computed in float32 are held in
    bfloat16: torch's ``load_state_dict`` casts them to the parameter's dtype (the run then differed from the one
    that went on, and the float64 one raised a dtype mismatch at its first step)."""
    def make():
        torch.manual_seed(0)
        model = Shared().to(dtype)   # Kronecker blocks and a Linear applied twice (in its gradient's basis)
        return model, ig.nn.NaturalGradient(model, **options)
    X = torch.randn(16, 4).to(dtype)
    y = torch.randint(0, 3, (16,), generator=torch.Generator().manual_seed(1))

    def steps(model, opt, n):
        for _ in range(n):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(X).float(), y).backward()
            opt.step()
    a, opt_a = make()
    steps(a, opt_a, 5)
    saved = copy.deepcopy(opt_a.state_dict())
    kept = {v.dtype for s in saved["state"].values() if isinstance(s, dict) for k, v in s.items()
            if isinstance(v, torch.Tensor) and k == "exp_avg"}
    assert kept == {held} and dtype != held   # moments in another dtype than the parameters
    b, opt_b = make()
    b.load_state_dict(a.state_dict())
    opt_b.load_state_dict(saved)
    steps(a, opt_a, 4)
    steps(b, opt_b, 4)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


class _Reads(torch.nn.Module):
    """A first Linear on the data, a hidden one called twice (on the hidden state and on the data), an embedding,
    a GRU on a sequence of the data (recurrent: not a reading layer), and a head."""

    def __init__(self):
        super().__init__()
        self.first, self.twice = torch.nn.Linear(4, 6), torch.nn.Linear(4, 4)
        self.emb, self.rnn, self.head = torch.nn.Embedding(5, 6), torch.nn.GRU(4, 6, batch_first=True), \
            torch.nn.Linear(6, 3)

    def forward(self, x, tokens, seq):
        h = torch.tanh(self.first(x)) + self.emb(tokens)
        r = self.rnn(seq)[0][:, -1]
        return self.head(h + r + torch.cat([self.twice(x) + self.twice(h[:, :4]), h[:, 4:]], dim=1))


def test_the_layers_that_read_the_data_step_at_input_lr_scale_times_the_rate():
    """Under eigen-adam the default input_lr_scale (3) applies to the Linear, convolution and embedding layers
    whose every call took leaves of the autograd graph (the data, also with requires_grad set; token indices):
    the first Linear and the embedding, not the head, not a layer called on the data and on a hidden state, not
    the recurrent layer.  Their first step is 3 times that of a run with input_lr_scale=1 (Adam's first step does
    not depend on the rate otherwise), the other parameters' steps are the same."""
    torch.manual_seed(0)
    x = torch.randn(16, 4, dtype=torch.float64).requires_grad_()
    tokens, y = torch.randint(0, 5, (16,)), torch.randint(0, 3, (16,))
    seq = torch.randn(16, 2, 4, dtype=torch.float64)
    runs = []
    for scale in (None, 1.0):
        torch.manual_seed(0)
        model = _Reads().double()
        opt = ig.nn.NaturalGradient(model, input_lr_scale=scale)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        opt.zero_grad()
        F.cross_entropy(model(x, tokens, seq), y).backward()
        opt.step()
        runs.append({n: p.detach() - before[n] for n, p in model.named_parameters()})
        if scale is None:
            assert opt.input_lr_scale == 3.0
            assert sorted(opt.preconditioner.recorder.input_params()) == ["emb.weight", "first.bias", "first.weight"]
    boosted, plain = runs
    for n in plain:
        factor = 3.0 if n.startswith(("first.", "emb.")) else 1.0
        # (a step is read back as new minus old parameters: rounded to the parameters' ulps, about 1e-16 here)
        torch.testing.assert_close(boosted[n], factor * plain[n], rtol=1e-12, atol=1e-14)
        assert float(plain[n].abs().max()) > 0


class _Writes(torch.nn.Module):
    """A hidden Linear, a head whose output the model returns seen through ``how`` (a rearrangement or not), and a
    Linear called twice."""

    def __init__(self, how):
        super().__init__()
        self.hidden, self.head, self.twice = torch.nn.Linear(4, 6), torch.nn.Linear(6, 6), torch.nn.Linear(6, 6)
        self.how = how

    def forward(self, x):
        h = self.twice(self.twice(torch.tanh(self.hidden(x))))
        return self.how(self.head(torch.tanh(h)))


@pytest.mark.parametrize("how,writes", [
    (lambda z: z, True), (lambda z: z.reshape(-1, 3, 2).transpose(1, 2).reshape(-1, 6), True),
    (lambda z: z[:, :].clone(), True), (lambda z: z * 2.0, False), (lambda z: z + 0.0, False)])
def test_the_layer_that_writes_the_output_steps_at_output_lr_scale_times_the_rate(how, writes):
    """Under eigen-adam the default output_lr_scale (2) applies to the layer whose one call's output is the model's
    output, also through a reshape, a transpose, a slice or a copy, and to no layer where the output is computed
    from it (a product, a sum); not to a hidden layer, nor to one called twice.  Its first step is twice that of
    a run with output_lr_scale=1, the others the same; the layer that reads the data keeps input_lr_scale."""
    x = torch.randn(16, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 6, (16,), generator=torch.Generator().manual_seed(1))
    runs = []
    for scale in (None, 1.0):
        torch.manual_seed(0)
        model = _Writes(how).double()
        opt = ig.nn.NaturalGradient(model, output_lr_scale=scale)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        runs.append({n: p.detach() - before[n] for n, p in model.named_parameters()})
        recorder = opt.preconditioner.recorder
        assert sorted(recorder.output_params()) == (["head.bias", "head.weight"] if writes else [])
        assert sorted(recorder.input_params()) == ["hidden.bias", "hidden.weight"]
    assert opt.output_lr_scale == 1.0
    boosted, plain = runs
    for n in plain:
        factor = OUTPUT_LR_SCALE if writes and n.startswith("head.") else 1.0
        torch.testing.assert_close(boosted[n], factor * plain[n], rtol=1e-12, atol=1e-14)
        assert float(plain[n].abs().max()) > 0


def test_the_output_layer_of_a_model_with_output_fn_and_of_several_forwards():
    """With ``output_fn`` (the logits of what the model returns) the head still writes the output; a refresh of two
    forwards (two micro-batches) keeps the role where every forward gave it."""
    class Returns(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.head = torch.nn.Linear(4, 5), torch.nn.Linear(5, 3)

        def forward(self, x):
            return {"logits": self.head(torch.tanh(self.body(x))), "aux": x.sum()}

    model = Returns().double()
    opt = ig.nn.NaturalGradient(model, output_fn=lambda out: out["logits"])
    X = torch.randn(8, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = torch.arange(8) % 3
    opt.zero_grad()
    for part in (slice(0, 4), slice(4, 8)):
        (F.cross_entropy(model(X[part])["logits"], y[part]) / 2).backward()
    opt.step()
    assert sorted(opt.preconditioner.recorder.output_params()) == ["head.bias", "head.weight"]
    assert opt.output_lr_scale == OUTPUT_LR_SCALE


@pytest.mark.parametrize("name", ["input_lr_scale", "output_lr_scale"])
def test_the_lr_scales_are_eigen_adams_and_positive(name):
    model = mlp()
    assert getattr(ig.nn.NaturalGradient(model, curvature="soap"), name) == 1.0   # SOAP as published
    assert getattr(ig.nn.NaturalGradient(model, step_rule="clip"), name) == 1.0
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=name):
            ig.nn.NaturalGradient(model, **{name: bad})
    with pytest.raises(ValueError, match=name):
        ig.nn.NaturalGradient(model, step_rule="clip", **{name: 2.0})
