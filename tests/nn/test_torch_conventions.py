"""``NaturalGradient`` and ``Preconditioner`` as torch users drive optimizers: schedulers that reach a learning rate
of 0, parameters without a gradient, half-precision models under Adam-type moments, parameter-group settings."""
import math
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import infogeo as ig  # noqa: E402

RULES = ["eigen-adam", "graft", "clip"]


def mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(64, 8, generator=g), torch.randint(0, 3, (64,), generator=g)


def flat(m):
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def one_step(m, opt, X, y):
    opt.zero_grad()
    F.cross_entropy(m(X), y).backward()
    opt.step()


@pytest.mark.parametrize("rule", RULES)
def test_a_scheduler_that_starts_or_ends_at_zero_drives_the_steps(rule):
    """A warm-up from 0 (LambdaLR), the optimizer's own state_dict loaded back at lr 0 (what accelerate does when
    it wraps the optimizer), no move at lr 0, moves afterwards; a cosine schedule down to 0 runs through."""
    m, (X, y) = mlp(), data()
    opt = ig.nn.NaturalGradient(m, step_rule=rule)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: e / 2)
    opt.load_state_dict(opt.state_dict())
    before = flat(m)
    one_step(m, opt, X, y)
    assert torch.equal(flat(m), before)   # lr 0: no step
    sched.step()
    one_step(m, opt, X, y)
    assert not torch.equal(flat(m), before)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3)
    for _ in range(6):
        one_step(m, opt, X, y)
        cos.step()
    assert torch.isfinite(flat(m)).all()


def test_the_preconditioner_reads_a_learning_rate_of_zero_from_its_optimizer():
    m, (X, y) = mlp(), data()
    sgd = torch.optim.SGD(m.parameters(), lr=0.1)
    pre = ig.nn.Preconditioner(m, lr=sgd)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(sgd, T_max=2)
    for _ in range(4):
        sgd.zero_grad()
        F.cross_entropy(m(X), y).backward()
        assert pre.step()
        sgd.step()
        sched.step()
    assert torch.isfinite(flat(m)).all()


@pytest.mark.parametrize("curvature,rule", [("kfac", r) for r in RULES] + [("diag", "graft"), ("diag", "clip")])
def test_a_parameter_without_a_gradient_stays_where_it_is(curvature, rule):
    """As torch's optimizers leave a parameter whose ``.grad`` is None (a layer frozen mid-run)."""
    m, (X, y) = mlp(), data()
    opt = ig.nn.NaturalGradient(m, curvature=curvature, step_rule=rule)
    for _ in range(3):
        one_step(m, opt, X, y)
    m[0].requires_grad_(False)
    frozen = [p.detach().clone() for p in m[0].parameters()]
    moving = m[2].weight.detach().clone()
    for _ in range(3):
        one_step(m, opt, X, y)
    assert all(torch.equal(a, p) for a, p in zip(frozen, m[0].parameters()))
    assert not torch.equal(moving, m[2].weight)


@pytest.mark.parametrize("build", ["module", "parameters", "parameters, graft", "preconditioner"])
def test_a_parameter_unfrozen_after_construction_is_not_left_behind_silently(build):
    """Frozen when the optimizer was built (a backbone), unfrozen later: torch's optimizers on model.parameters()
    train it, the curvature here leaves it out; its step raises, changing nothing, rather than never moving it.
    A parameter that stays frozen, or that another optimizer trains, raises nothing."""
    m, (X, y) = mlp(), data()
    m[0].requires_grad_(False)
    if build == "preconditioner":
        sgd = torch.optim.SGD(m.parameters(), lr=0.1)
        pre = ig.nn.Preconditioner(m, lr=sgd)

        def step():
            if pre.step():
                sgd.step()
        opt = sgd
    else:
        opt = ig.nn.NaturalGradient(m if build == "module" else m.parameters(), model=None if build == "module" else m,
                                    **({"step_rule": "graft"} if "graft" in build else {}))
        step = opt.step
    frozen = m[0].weight.detach().clone()
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(m(X), y).backward()
        step()
    assert torch.equal(frozen, m[0].weight)
    m[0].requires_grad_(True)
    opt.zero_grad()
    F.cross_entropy(m(X), y).backward()
    before = flat(m)
    with pytest.raises(ValueError, match="'0.weight' has a gradient, but had requires_grad=False") as info:
        step()
    assert "Build the optimizer again" in str(info.value) and torch.equal(flat(m), before)
    assert (pre if build == "preconditioner" else opt.preconditioner).steps == 2


def test_a_parameter_another_optimizer_trains_is_not_refused():
    m, (X, y) = mlp(), data()
    head = ig.nn.NaturalGradient(m[2].parameters(), model=m)
    pre = ig.nn.Preconditioner(m, lr=0.1, params=m[2].parameters())
    body = torch.optim.SGD(m[0].parameters(), lr=0.1)
    for _ in range(2):
        head.zero_grad()
        body.zero_grad()
        F.cross_entropy(m(X), y).backward()
        assert pre.step()
        head.step()
        body.step()


def test_the_preconditioner_leaves_a_missing_gradient_missing():
    m, (X, y) = mlp(), data()
    pre = ig.nn.Preconditioner(m)
    F.cross_entropy(m(X), y).backward()
    m[0].weight.grad = None
    assert pre.step()
    assert m[0].weight.grad is None and m[2].weight.grad is not None


@pytest.mark.parametrize("curvature,rule,held", [("kfac", "graft", torch.float32), ("diag", None, torch.float32),
                                                  ("kfac", "eigen-adam", torch.bfloat16),
                                                  ("kfac", {"step_rule": "eigen-adam", "state_dtype": torch.float32},
                                                   torch.float32)])
def test_a_float16_model_keeps_its_moments_in_float32s_range(curvature, rule, held):
    """Adam's eps (1e-8) and the squares of small gradients underflow in float16: the moments are float32, or
    bfloat16 (float32's range) where eigen-adam holds its state narrower (its default, ``state_dtype="auto"``)."""
    m, (X, y) = mlp(), data()
    m = m.half()
    kw = rule if isinstance(rule, dict) else {} if rule is None else {"step_rule": rule}
    opt = ig.nn.NaturalGradient(m, curvature=curvature, **kw)
    losses = []
    for _ in range(6):
        opt.zero_grad()
        loss = F.cross_entropy(m(X.half()).float(), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert torch.isfinite(flat(m)).all() and all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]
    moments = [t for st in opt.state.values() if isinstance(st, dict) for k, t in st.items()
               if k in ("exp_avg", "exp_avg_sq") and isinstance(t, torch.Tensor)]
    assert moments and all(t.dtype == held for t in moments)


@pytest.mark.parametrize("key,value", [("weight_decay", 0.5), ("eps", 1.0), ("momentum", 0.9)])
def test_a_group_setting_the_rule_would_ignore_is_refused(key, value):
    m = mlp()
    groups = [{"params": m[0].parameters(), key: value}, {"params": m[2].parameters()}]
    with pytest.raises(ValueError, match=key):
        ig.nn.NaturalGradient(groups, model=m)   # the default rule, eigen-adam, takes no momentum


@pytest.mark.parametrize("rule", RULES)
def test_a_parameter_listed_twice_is_refused(rule):
    """torch only warns (deprecated); graft's and clip's moments would be updated twice for one step taken."""
    m = mlp()
    ps = list(m.parameters())
    kw = {"step_rule": rule, **({"momentum": 0.9} if rule == "clip" else {})}
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # refused before torch's own warning
        with pytest.raises(ValueError, match="same parameter twice.*positions 0 and 4"):
            ig.nn.NaturalGradient(ps + [ps[0]], model=m, **kw)
        with pytest.raises(ValueError, match="same parameter twice"):
            ig.nn.NaturalGradient([{"params": m[0].parameters()}, {"params": iter([m[2].weight, m[2].bias,
                                                                                  m[2].weight])}], model=m, **kw)
        opt = ig.nn.NaturalGradient((p for p in ps), model=m, **kw)   # a generator, read once
    assert [p for g in opt.param_groups for p in g["params"]] == ps


@pytest.mark.parametrize("key", ["weight_decay", "maximize", "foreach", "fused", "differentiable", "capturable",
                                 "amsgrad", "betas"])
@pytest.mark.parametrize("curvature", ["kfac", "diag", "dense"])
def test_a_torch_keyword_is_told_what_to_do_instead(key, curvature):
    """As a torch keyword, the explanation a parameter group setting it gets (the same text), not "the curvature
    takes no option" (nor accepted, as the kinds that take any option did); the preconditioner refuses it before
    warning about its other settings (kl_clip without lr)."""
    m = mlp()
    value = {"weight_decay": 0.01, "betas": (0.9, 0.99)}.get(key, False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for owner, build in [("NaturalGradient", ig.nn.NaturalGradient), ("Preconditioner", ig.nn.Preconditioner)]:
            if owner == "NaturalGradient" and key == "betas":   # its own keyword
                continue
            with pytest.raises(ValueError, match=f"{owner} takes no keyword '{key}' \\(a torch.optim setting\\); "):
                build(m, curvature=curvature, **{key: value})
    with pytest.raises(ValueError) as group:
        ig.nn.NaturalGradient([{"params": m.parameters(), "weight_decay": 0.01}], model=m)
    with pytest.raises(ValueError) as keyword:
        ig.nn.NaturalGradient(m, weight_decay=0.01)
    why = str(group.value).split("betas for the others); ", 1)[1]
    assert why.startswith("weight decay: add it to the loss") and str(keyword.value).endswith("; " + why)


@pytest.mark.parametrize("rule", ["eigen-adam", "graft"])
def test_a_scheduler_that_cycles_momentum_cycles_betas_as_for_adam(rule):
    """Adam's rates are kept per parameter group, as torch's Adam keeps them: OneCycleLR (cycle_momentum=True, its
    default) cycles betas[0] exactly as it does Adam's (before, the step refused the momentum it set), and the step
    uses each group's rates (a group set to (0.5, 0.9) steps as an optimizer built with betas=(0.5, 0.9))."""
    m, (X, y) = mlp(), data()
    opt = ig.nn.NaturalGradient(m, lr=0.01, step_rule=rule)
    beta2 = opt.betas[1]
    adam = torch.optim.Adam(mlp().parameters(), lr=0.01, betas=opt.betas)
    ours, theirs = (torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.01, total_steps=10) for o in (opt, adam))
    for _ in range(6):
        one_step(m, opt, X, y)
        adam.step()
        ours.step()
        theirs.step()
        assert opt.param_groups[0]["betas"] == adam.param_groups[0]["betas"]
        assert opt.param_groups[0]["betas"][1] == beta2 and opt.param_groups[0]["momentum"] == 0.0
    assert opt.param_groups[0]["betas"][0] != 0.9
    runs = []
    for built, group in (((0.5, 0.9), None), (None, (0.5, 0.9))):
        m = mlp()
        opt = ig.nn.NaturalGradient(m, lr=0.01, step_rule=rule, **({"betas": built} if built else {}))
        if group:
            opt.param_groups[0]["betas"] = group
        for _ in range(3):
            one_step(m, opt, X, y)
        runs.append(flat(m))
    assert torch.equal(runs[0], runs[1])
    clip = ig.nn.NaturalGradient(mlp(), step_rule="clip", momentum=0.9)
    torch.optim.lr_scheduler.OneCycleLR(clip, max_lr=0.01, total_steps=10)   # momentum is clip's own
    assert "betas" not in clip.param_groups[0]


def test_a_groups_betas_are_checked_and_belong_to_the_rules_that_have_them():
    m = mlp()
    ig.nn.NaturalGradient([{"params": m[0].parameters(), "betas": (0.8, 0.99)}, {"params": m[2].parameters()}],
                          model=m)
    with pytest.raises(ValueError, match=r"a parameter group's betas\[0\]"):
        ig.nn.NaturalGradient([{"params": m.parameters(), "betas": (1.5, 0.99)}], model=m)
    with pytest.raises(ValueError, match="'betas'.*step_rule='clip'"):
        ig.nn.NaturalGradient([{"params": m.parameters(), "betas": (0.8, 0.99)}], model=m, step_rule="clip")


# ------------------------------------------------------------------ the model is a layer, or holds parameters itself
class _Scaled(torch.nn.Module):
    """Submodules and parameters of the model's own (a learned temperature and output bias, as CLIP's)."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))
        self.logit_scale = torch.nn.Parameter(torch.tensor(0.7))
        self.out_bias = torch.nn.Parameter(torch.zeros(3))

    def forward(self, x):
        return self.body(x) * self.logit_scale.exp() + self.out_bias


@pytest.mark.parametrize("make", [lambda: torch.nn.Linear(4, 3), _Scaled], ids=["nn.Linear itself", "own parameters"])
@pytest.mark.parametrize("kind", ["diag", "block", "kfac"])
def test_a_model_that_is_a_layer_or_holds_parameters_has_their_curvature(make, kind):
    """The plain loop's curvature of parameters the model itself holds equals the targets' (it was exactly zero:
    the model's own call was closed before its layer hook recorded it, and the direction was g / damping)."""
    torch.manual_seed(0)
    model = make().double()
    X = torch.randn(7, 4, dtype=torch.float64)
    y = torch.randint(0, 3, (7,), generator=torch.Generator().manual_seed(1))
    pre = ig.nn.Preconditioner(model, kind, damping=1e-2, fisher="exact", kl_clip=None, ema_decay=0.0)
    F.cross_entropy(model(X), y).backward()
    pre.precondition()
    want = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y).curvature(kind).to_dense()
    got = pre.curvature.to_dense()
    assert want.abs().max() > 0 and torch.allclose(got, want, rtol=1e-10, atol=1e-14)


class _TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh())
        self.cls, self.reg = torch.nn.Linear(8, 3), torch.nn.Linear(8, 2)

    def forward(self, x):
        h = self.body(x)
        return self.cls(h), self.reg(h)


@pytest.mark.parametrize("kind", ["diag", "kfac"])
def test_parameters_with_a_gradient_but_no_curvature_are_pointed_out(kind):
    """Two heads, a loss on both, output_fn picking one: the other head's curvature is zero and its direction the
    gradient over the damping (100x at damping 1e-2), silently before; a warning names those parameters, once."""
    import warnings
    torch.manual_seed(0)
    model = _TwoHeads().double()
    X, y, t = torch.randn(8, 4, dtype=torch.float64), torch.randint(0, 3, (8,)), torch.randn(8, 2, dtype=torch.float64)
    pre = ig.nn.Preconditioner(model, kind, damping=1e-2, kl_clip=None, output_fn=lambda o: o[0])
    said = []
    for _ in range(2):
        model.zero_grad()
        out = model(X)
        (F.cross_entropy(out[0], y) + F.mse_loss(out[1], t)).backward()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pre.precondition()
        said.append([str(w.message) for w in caught if "zero curvature" in str(w.message)])
    assert len(said[0]) == 1 and "reg.weight" in said[0][0] and said[1] == []   # once
    quiet = ig.nn.Preconditioner(model, kind, damping=1e-2, kl_clip=None, output_fn=lambda o: o[0])
    model.zero_grad()   # the loss on the picked head alone: nothing to say
    F.cross_entropy(model(X)[0], y).backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet.precondition()


class _TwoBranches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
        self.shift = torch.nn.Parameter(torch.zeros(3))   # a vector: Adam on its raw coordinates

    def forward(self, x, use_b=True):
        return self.a(x) + ((self.b(x) + self.shift) if use_b else 0)


@pytest.mark.parametrize("rule", ["eigen-adam", "graft", "clip"])
def test_a_parameter_without_a_gradient_keeps_its_value_and_its_state(rule):
    """An unused branch (``.grad`` None) is left alone, state included, as torch.optim.Adam leaves it: eigen-adam
    decayed its moments and counted the step, so the branch's first real step was 0.43x Adam's."""
    torch.manual_seed(0)
    m, X, y = _TwoBranches(), torch.randn(16, 4), torch.randint(0, 3, (16,))
    opt = ig.nn.NaturalGradient(m, step_rule=rule)
    for use_b in (True, True, False, False):
        before = {n: p.detach().clone() for n, p in m.named_parameters()}
        kept = {k: {n: v.clone() for n, v in opt.state[p].items() if isinstance(v, torch.Tensor)}
                for k, p in (("b.weight", m.b.weight), ("shift", m.shift))}
        opt.zero_grad()
        F.cross_entropy(m(X, use_b=use_b), y).backward()
        opt.step()
        if not use_b:
            for n in ("b.weight", "b.bias", "shift"):
                assert torch.equal(dict(m.named_parameters())[n], before[n])
            for k, p in (("b.weight", m.b.weight), ("shift", m.shift)):
                now = {n: v for n, v in opt.state[p].items() if isinstance(v, torch.Tensor)}
                assert now.keys() == kept[k].keys() and all(torch.equal(now[n], kept[k][n]) for n in now)


def test_a_branch_first_used_late_takes_adams_first_step():
    """A vector first used at step 10 takes Adam's first step (lr in every coordinate, bias-corrected), as
    torch.optim.Adam with the same rates does; it took 0.43x that with its moments decayed while unused."""
    torch.manual_seed(0)
    m, X, y = _TwoBranches(), torch.randn(16, 4), torch.randint(0, 3, (16,))
    opt = ig.nn.NaturalGradient(m, lr=0.01, nesterov=False, state_dtype=torch.float32)
    ref_p = torch.nn.Parameter(m.shift.detach().clone())
    ref = torch.optim.Adam([ref_p], lr=0.01, betas=opt.param_groups[0]["betas"], eps=opt.eps)
    for _ in range(10):
        opt.zero_grad()
        F.cross_entropy(m(X, use_b=False), y).backward()
        opt.step()
    opt.zero_grad()
    F.cross_entropy(m(X), y).backward()
    ref_p.grad = m.shift.grad.detach().clone()
    before = m.shift.detach().clone()
    opt.step()
    ref.step()
    torch.testing.assert_close(m.shift.detach() - before, ref_p.detach() - before, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("rule", RULES)
def test_an_empty_group_listed_first_is_taken_as_torch_takes_it(rule):
    """``[{"params": []}, {...}]`` builds (it raised an IndexError from the optimizer's own entry), trains, and resumes
    bit for bit from its state_dict."""
    m, (X, y) = mlp(), data()
    kw = {"step_rule": rule}
    opt = ig.nn.NaturalGradient([{"params": []}, {"params": list(m.parameters())}], model=m, **kw)
    for _ in range(2):
        one_step(m, opt, X, y)
    saved = opt.state_dict()
    assert "natural_gradient" in saved["state"][0]   # the first parameter's state, as ever
    m2 = mlp(1)
    m2.load_state_dict(m.state_dict())
    opt2 = ig.nn.NaturalGradient([{"params": []}, {"params": list(m2.parameters())}], model=m2, **kw)
    opt2.load_state_dict(saved)
    for _ in range(2):
        one_step(m, opt, X, y)
        one_step(m2, opt2, X, y)
    assert torch.equal(flat(m), flat(m2))


def test_an_optimizer_as_lr_that_does_not_hold_every_parameter_is_refused_at_construction():
    """``Preconditioner(model, lr=adam)`` with ``adam`` stepping only the head: a ValueError naming the parameters
    it lacks and what to pass (it was a raw KeyError at the first step, after the statistics were installed);
    ``params=`` with the head is taken and steps."""
    m, (X, y) = mlp(), data()
    adam = torch.optim.Adam(m[2].parameters(), lr=1e-2)
    with pytest.raises(ValueError, match=r"does not hold 2 of the 4 .*'0\.weight', '0\.bias'.*params="):
        ig.nn.Preconditioner(m, lr=adam)
    pre = ig.nn.Preconditioner(m, lr=adam, params=m[2].parameters())
    F.cross_entropy(m(X), y).backward()
    assert pre.step()
    adam.step()
