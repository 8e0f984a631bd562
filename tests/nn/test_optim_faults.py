"""The optimizer under misuse: strict checkpoints that never alias, skipped steps that move nothing, clear refusals."""
import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from .conftest import mlp  # noqa: E402

F = torch.nn.functional
KW = dict(lr=0.1, damping=1e-2, fisher="mc", momentum=0.5, curvature_update_period=2, inverse_update_period=3,
          kl_clip=1e-2, seed=3)


def batch(i, n=16, dtype=torch.float64):
    g = torch.Generator().manual_seed(100 + i)
    X = torch.randn(n, 4, generator=g, dtype=torch.float64).to(dtype)
    return X, (X[:, 0] > 0).long() + (X[:, 1] > 0).long()


def train(model, opt, steps, start=0):
    for i in range(start, start + steps):
        X, y = batch(i, dtype=next(model.parameters()).dtype)
        opt.zero_grad()
        F.cross_entropy(model(X), y).backward()
        opt.step()


def flat(model):
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def snapshot(tree):
    """A deep copy to compare a checkpoint with after it was used."""
    return copy.deepcopy(tree)


def same(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and set(a) == set(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


# ------------------------------------------------------------------ checkpoints
@pytest.mark.parametrize("curvature", ["kfac", "diag"])
def test_load_neither_mutates_nor_aliases_its_argument_and_loads_twice(curvature):
    a = mlp()
    opt = ig.nn.NaturalGradient(a, curvature=curvature, **KW, step_rule="clip")
    train(a, opt, 3)
    saved = opt.state_dict()
    before = snapshot(saved)
    b = mlp()
    b.load_state_dict(a.state_dict())
    opt_b = ig.nn.NaturalGradient(b, curvature=curvature, **KW, step_rule="clip")
    opt_b.load_state_dict(saved)
    opt_b.load_state_dict(saved)            # twice: the first load took nothing out of it
    assert same(saved, before)
    train(b, opt_b, 4, 10)                  # later steps write into the optimizer, not into the checkpoint
    assert same(saved, before)
    train(a, opt, 4, 10)
    assert torch.equal(flat(a), flat(b))    # and the resume is exact


def test_a_resaved_checkpoint_keeps_the_curvature():
    a = mlp()
    opt = ig.nn.NaturalGradient(a, **KW, step_rule="clip")
    train(a, opt, 3)
    saved = opt.state_dict()
    opt2 = ig.nn.NaturalGradient(mlp(), **KW, step_rule="clip")
    opt2.load_state_dict(saved)
    again = opt2.state_dict()
    assert same(again["state"][0]["natural_gradient"]["preconditioner"]["curvature"],
                saved["state"][0]["natural_gradient"]["preconditioner"]["curvature"])


def _saved(**kw):
    a = mlp()
    opt = ig.nn.NaturalGradient(a, **dict(KW, **kw), step_rule="clip")
    train(a, opt, 3)
    return opt.state_dict()


@pytest.mark.parametrize("other,match", [
    (dict(curvature="diag"), "kind='kfac'"),
    (dict(fisher="exact"), "fisher='mc'"),
])
def test_a_checkpoint_of_another_kind_is_refused_by_name(other, match):
    saved = _saved()
    opt = ig.nn.NaturalGradient(mlp(), **dict(KW, **other), step_rule="clip")
    with pytest.raises(ValueError, match=match):
        opt.load_state_dict(saved)
    assert opt.preconditioner.steps == 0


@pytest.mark.parametrize("old", [False, True], ids=["named", "earlier-layout"])
@pytest.mark.parametrize("saved_rule,rule", [("eigen-adam", "graft"), ("graft", "eigen-adam"), ("clip", "graft"),
                                             ("graft", "clip"), ("eigen-adam", "clip"), ("clip", "eigen-adam")])
def test_a_checkpoint_of_another_step_rule_is_refused_by_name(saved_rule, rule, old):
    """Another rule's moments were read as this rule's: a raw KeyError at the next step (graft <-> eigen-adam), or
    silently ignored (clip).  Refused before anything changes; a checkpoint of earlier versions, which did not
    name its rule, is told by its parameters' state."""
    def kw(r):   # momentum and kl_clip are clip's settings
        return {k: v for k, v in KW.items() if k not in ("momentum", "kl_clip") or r == "clip"}
    a = mlp()
    opt = ig.nn.NaturalGradient(a, **kw(saved_rule), step_rule=saved_rule)
    train(a, opt, 3)
    saved = opt.state_dict()
    if old:
        del saved["state"][0]["natural_gradient"]["step_rule"]
    model = mlp()
    other = ig.nn.NaturalGradient(model, **kw(rule), step_rule=rule)
    train(model, other, 1)
    before = {p: {k: v.clone() for k, v in st.items() if isinstance(v, torch.Tensor)} for p, st in other.state.items()}
    with pytest.raises(ValueError, match=f"saved with step_rule='{saved_rule}', this optimizer uses '{rule}'"):
        other.load_state_dict(saved)
    assert other.preconditioner.steps == 1
    assert all(torch.equal(other.state[p][k], v) for p, st in before.items() for k, v in st.items())
    same_rule = ig.nn.NaturalGradient(mlp(), **kw(saved_rule), step_rule=saved_rule)
    same_rule.load_state_dict(saved)   # its own rule takes it
    assert same_rule.preconditioner.steps == 3


def test_a_checkpoint_of_another_width_is_refused_before_anything_changes():
    saved = _saved()
    model = mlp(sizes=(4, 7, 3))
    opt = ig.nn.NaturalGradient(model, **KW, step_rule="clip")
    train(model, opt, 1)
    with pytest.raises(ValueError, match=r"shapes differ.*0.weight: \(5, 4\) saved, \(7, 4\) here"):
        opt.load_state_dict(saved)
    assert opt.preconditioner.steps == 1 and opt.state[model[0].weight]["momentum_buffer"].shape == (7, 4)


@pytest.mark.parametrize("bad,match", [
    ({}, "not an optimizer checkpoint"),
    ([], "not an optimizer checkpoint"),
    ("state", "not an optimizer checkpoint"),
    ({"state": {}, "param_groups": []}, "not a NaturalGradient checkpoint"),
])
def test_empty_and_foreign_dicts_are_refused(bad, match):
    opt = ig.nn.NaturalGradient(mlp(), **KW, step_rule="clip")
    with pytest.raises(ValueError, match=match):
        opt.load_state_dict(bad)


def test_an_adam_checkpoint_is_refused():
    model = mlp()
    adam = torch.optim.Adam(model.parameters())
    F.cross_entropy(model(batch(0)[0]), batch(0)[1]).backward()
    adam.step()
    with pytest.raises(ValueError, match="not a NaturalGradient checkpoint"):
        ig.nn.NaturalGradient(model, **KW, step_rule="clip").load_state_dict(adam.state_dict())


def preconditioned_sgd(steps):
    """A K-FAC preconditioner (statistics every step) after ``steps`` steps of SGD that it preconditions."""
    model = mlp()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    pre = ig.nn.Preconditioner(model, lr=sgd, curvature="kfac", curvature_update_period=1)
    for i in range(steps):
        X, y = batch(i)
        sgd.zero_grad()
        F.cross_entropy(model(X), y).backward()
        if pre.step():
            sgd.step()
    return pre


@pytest.mark.parametrize("edit,match", [
    (lambda s: s.pop("rng"), "keys \\['rng'\\] are missing"),
    (lambda s: s.update(rng=torch.zeros(3, dtype=torch.uint8)), "not a random generator state"),
    (lambda s: s.update(step=-1), "step must be"),
    (lambda s: s.update(damping=float("inf")), "damping must be"),
    (lambda s: s["curvature"].update({k: v * float("nan") for k, v in s["curvature"].items()}), "not finite"),
    (lambda s: s.update(unfilled=1.5), "'unfilled' must be"),
    (lambda s: s.update(unfilled=float("nan")), "'unfilled' must be"),
])
def test_a_damaged_preconditioner_checkpoint_is_refused(edit, match):
    saved = preconditioned_sgd(2).state_dict()
    edit(saved)
    fresh = ig.nn.Preconditioner(mlp(), lr=0.1)
    with pytest.raises((ValueError, TypeError), match=match):
        fresh.load_state_dict(saved)
    assert fresh.steps == 0


def test_a_float32_checkpoint_loads_into_a_float64_model():
    """The statistics are converted: the float64 continuation tracks the float32 one to float32 accuracy."""
    a = mlp().float()
    opt = ig.nn.NaturalGradient(a, **dict(KW, fisher="exact"), step_rule="clip")
    train(a, opt, 3)
    saved = opt.state_dict()
    b = mlp().float()
    b.load_state_dict(a.state_dict())
    b.double()
    opt_b = ig.nn.NaturalGradient(b, **dict(KW, fisher="exact"), step_rule="clip")
    opt_b.load_state_dict(saved)
    train(b, opt_b, 3, 10)
    train(a, opt, 3, 10)
    assert all(t.dtype == torch.float64 for t in opt_b.preconditioner.curvature.stats().values())
    assert all(v.dtype == torch.float64 for s in opt_b.state.values() if isinstance(s, dict)
               for v in s.values() if isinstance(v, torch.Tensor) and v.is_floating_point())
    assert torch.allclose(flat(b), flat(a).double(), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ skipped steps
def test_a_skipped_step_moves_nothing_under_adam():
    model = mlp()
    adam = torch.optim.Adam(model.parameters(), lr=1e-2)
    pre = ig.nn.Preconditioner(model, lr=adam, curvature="kfac", damping=1e-2)
    for i in range(2):
        adam.zero_grad()
        F.cross_entropy(model(batch(i)[0]), batch(i)[1]).backward()
        assert pre.step()
        adam.step()
    moments = snapshot(adam.state_dict())
    before = flat(model)
    adam.zero_grad()
    X, y = batch(5)
    F.cross_entropy(model(X), y).backward()
    model[0].weight.grad[0, 0] = float("nan")
    with pytest.warns(RuntimeWarning, match="step skipped"):
        assert pre.step() is False
    assert pre.skip_reason == "gradient" and all(p.grad is None for p in model.parameters())
    adam.step()                                     # the user's loop without `if pre.step()`: still nothing moves
    assert torch.equal(flat(model), before) and same(adam.state_dict(), moments)


def test_precondition_returns_the_direction_and_leaves_grad_alone():
    model = mlp()
    pre = ig.nn.Preconditioner(model, lr=0.1, curvature="dense", fisher="exact", kl_clip=None)
    X, y = batch(0)
    F.cross_entropy(model(X), y).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    delta = pre.precondition(inputs=X)
    assert all(torch.equal(p.grad, grads[n]) for n, p in model.named_parameters())
    G = pre.curvature.to_dense()
    g = torch.cat([grads[n].reshape(-1) for n in grads])
    d = torch.cat([delta[n].reshape(-1) for n in grads])
    assert torch.allclose((G + 1e-3 * torch.eye(len(g), dtype=g.dtype)) @ d, g, rtol=1e-9, atol=1e-12)


def test_a_trust_region_without_lr_warns_once():
    with pytest.warns(UserWarning, match="no lr was given"):
        ig.nn.Preconditioner(mlp())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ig.nn.Preconditioner(mlp(), lr=0.1)
        ig.nn.Preconditioner(mlp(), kl_clip=None)


@pytest.mark.parametrize("lr", [lambda: float("inf"), lambda: -0.1])
def test_a_learning_rate_function_is_checked_every_step(lr):
    model = mlp()
    pre = ig.nn.Preconditioner(model, lr=lr, curvature="diag")
    F.cross_entropy(model(batch(0)[0]), batch(0)[1]).backward()
    with pytest.raises(ValueError, match="lr must be >= 0 and finite"):
        pre.step()


def test_a_nan_right_hand_side_is_refused():
    model = mlp()
    pre = ig.nn.Preconditioner(model, lr=0.1, curvature="kfac")
    F.cross_entropy(model(batch(0)[0]), batch(0)[1]).backward()
    pre.step()
    with pytest.raises(ValueError, match="NaN or inf"):
        pre.direction({n: torch.full_like(p, float("nan")) for n, p in model.named_parameters()})


# ------------------------------------------------------------------ ordinary models
class Bag(torch.nn.Module):
    def __init__(self, sparse):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(10, 4, sparse=sparse)
        self.out = torch.nn.Linear(4, 3)

    def forward(self, i):
        return self.out(self.emb(i).mean(1))


@pytest.mark.parametrize("make", [lambda m: ig.nn.NaturalGradient(m, step_rule="clip"), lambda m: ig.nn.Preconditioner(m, lr=0.1)])
def test_sparse_embeddings_are_refused_by_name(make):
    with pytest.raises(ValueError, match="Embedding 'emb' has sparse=True"):
        make(Bag(sparse=True).double())
    model = Bag(sparse=True).double()
    make_params = [model.out.weight, model.out.bias]   # leaving it out works
    opt = ig.nn.NaturalGradient(make_params, model=model, lr=0.1, curvature="kfac", step_rule="clip")
    i = torch.randint(0, 10, (8, 3))
    F.cross_entropy(model(i), torch.randint(0, 3, (8,))).backward()
    opt.step()


def test_a_sparse_gradient_met_at_a_step_is_refused_by_name():
    class Functional(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(torch.randn(10, 3, dtype=torch.float64))

        def forward(self, i):
            return F.embedding(i, self.table, sparse=True).mean(1)
    model = Functional()
    opt = ig.nn.NaturalGradient(model, lr=0.1, curvature="diag", step_rule="clip")
    F.cross_entropy(model(torch.randint(0, 10, (8, 3))), torch.randint(0, 3, (8,))).backward()
    with pytest.raises(ValueError, match="'table' is a sparse tensor"):
        opt.step()


@pytest.mark.parametrize("make", [lambda m: ig.nn.NaturalGradient(m).preconditioner,
                                  lambda m: ig.nn.Preconditioner(m, lr=0.1)])
def test_a_model_on_the_meta_device_is_refused_until_materialised(make):
    with torch.device("meta"):
        model = mlp()
    with pytest.raises(ValueError, match=r"'0.weight' is on the meta device.*to_empty"):
        make(model)
    model.to_empty(device="cpu")
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.reset_parameters()
    make(model).remove()
    opt = ig.nn.NaturalGradient(model)
    train(model, opt, 2)
    assert opt.preconditioner.steps == 2 and torch.isfinite(flat(model)).all()


@pytest.mark.parametrize("curvature", ["kfac", "diag", "dense"])
def test_an_empty_batch_is_refused_and_the_next_step_works(curvature):
    model = mlp()
    opt = ig.nn.NaturalGradient(model, lr=0.1, curvature=curvature, step_rule="clip")
    X, y = batch(0)
    opt.zero_grad()
    F.cross_entropy(model(X[:0]), y[:0]).backward()
    before = flat(model)
    with pytest.raises(ValueError, match="empty"):
        opt.step(inputs=X[:0]) if curvature == "dense" else opt.step()
    assert torch.equal(flat(model), before) and opt.preconditioner.steps == 0
    opt.zero_grad()
    F.cross_entropy(model(X), y).backward()
    opt.step(inputs=X) if curvature == "dense" else opt.step()
    assert not torch.equal(flat(model), before)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("curvature", ["kfac", "ekfac", "diag", "block", "dense", "cg"])
def test_half_precision_models_train_with_every_representation(dtype, curvature):
    torch.manual_seed(0)
    model = mlp().to(dtype)
    opt = ig.nn.NaturalGradient(model, lr=0.1, curvature=curvature, curvature_update_period=1, step_rule="clip")
    X, y = batch(0, dtype=dtype)
    before = flat(model)
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(model(X).float(), y).backward()
        opt.step(inputs=X) if curvature in ("dense", "cg") else opt.step()
    after = flat(model)
    assert after.dtype == dtype and bool(torch.isfinite(after).all()) and not torch.equal(after, before)
    assert opt.preconditioner.skip_reason is None


# ------------------------------------------------------------------ settings at the edge of their types (fault battery)
def test_a_learning_rate_past_the_parameters_dtype_is_refused():
    """lr = 1e300 on float32 parameters made every step inf and its undoing NaN, silently."""
    model = mlp().float()
    with pytest.raises(ValueError, match="beyond the largest number"):
        ig.nn.NaturalGradient(model, lr=1e300)
    opt = ig.nn.NaturalGradient(model, lr=0.1)
    opt.param_groups[0]["lr"] = 1e300   # a scheduler's doing: checked at the step
    F.cross_entropy(model(batch(0, dtype=torch.float32)[0]), batch(0)[1]).backward()
    with pytest.raises(ValueError, match="beyond the largest number"):
        opt.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("lr,match", [(1e300, "beyond the largest number"), (10 ** 39, "beyond the largest number"),
                                      (10 ** 400, "must be finite, got an integer of 401 digits"),
                                      (float("inf"), "must be >= 0 and finite")],
                         ids=["1e300", "10**39", "10**400", "inf"])
def test_a_checkpoint_with_a_learning_rate_past_the_parameters_dtype_is_refused_and_changes_nothing(lr, match):
    """Construction refuses lr past float32's largest number, a checkpoint carried it in (the next step refused it);
    10**400 raised float()'s OverflowError."""
    model = mlp().float()
    opt = ig.nn.NaturalGradient(model, lr=0.1)
    train(model, opt, 2)
    saved = copy.deepcopy(opt.state_dict())
    saved["param_groups"][0]["lr"] = lr
    before, mine = snapshot(saved), snapshot(opt.state_dict())
    with pytest.raises(ValueError, match=match):
        ig.nn.NaturalGradient(mlp().float(), lr=lr)
    with pytest.raises(ValueError, match=f"checkpoint: its parameter groups do not fit.*{match}"):
        opt.load_state_dict(saved)
    assert same(saved, before) and same(opt.state_dict(), mine)


def test_a_checkpoint_learning_rate_is_loaded_as_construction_stores_it():
    """An integer lr of 10**30 (within float32) stayed an int and the step's arithmetic raised OverflowError."""
    model = mlp().float()
    opt = ig.nn.NaturalGradient(model, lr=0.1, momentum=0.0, kl_clip=None)
    train(model, opt, 2)
    saved = copy.deepcopy(opt.state_dict())
    saved["param_groups"][0]["lr"] = 10 ** 30
    opt.load_state_dict(saved)
    assert saved["param_groups"][0]["lr"] == 10 ** 30   # the caller's dict as it was
    lr = opt.param_groups[0]["lr"]
    assert type(lr) is float and lr == 1e30 == ig.nn.NaturalGradient(mlp(), lr=10 ** 30).param_groups[0]["lr"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train(model, opt, 1, 5)


def test_the_trust_region_of_a_huge_learning_rate_does_not_overflow():
    """The KL of lr = 1e300 times a direction overflows a float (lr^2); the clip factor is formed relative to lr,
    so the clipped step lr * direction is finite and the same as with any other clipped lr (here 1e3)."""
    steps = []
    for lr in (1e300, 1e3):
        model = mlp()
        pre = ig.nn.Preconditioner(model, curvature="diag", fisher="exact", lr=lr, kl_clip=1e-3)
        X, y = batch(0)
        F.cross_entropy(model(X), y).backward()
        assert pre.step()
        steps.append(torch.cat([p.grad.reshape(-1) * lr for p in model.parameters()]))
    assert torch.isfinite(steps[0]).all() and steps[0].abs().max() > 0
    assert torch.allclose(steps[0], steps[1], rtol=1e-12, atol=0)


@pytest.mark.parametrize("kw, error", [(dict(quadratic_model="abc"), TypeError), (dict(adaptive_damping=float("nan")),
                                                                                  TypeError),
                                       (dict(step_rule=["clip"]), TypeError)])
def test_flags_and_words_of_the_wrong_type_are_refused(kw, error):
    with pytest.raises(error, match=next(iter(kw))):
        ig.nn.NaturalGradient(mlp(), **kw)


@pytest.mark.parametrize("damping, error", [(float("inf"), ValueError), (float("nan"), ValueError), ("a", TypeError),
                                            (-1.0, ValueError)])
def test_a_curvature_refuses_a_damping_that_is_not_a_finite_number(damping, error):
    model = mlp()
    X, y = batch(0)
    C = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y).curvature("kfac")
    with pytest.raises(error, match="damping"):
        C.inverse(damping)


def _nan(t):
    return t * float("nan")


def _no_nan(tree):
    """``tree`` with its NaNs replaced (compared by :func:`same`)."""
    if isinstance(tree, dict):
        return {k: _no_nan(v) for k, v in tree.items()}
    return torch.nan_to_num(tree, nan=7.0) if isinstance(tree, torch.Tensor) else tree


@pytest.mark.parametrize("rule", ["graft", "eigen-adam"])
@pytest.mark.parametrize("edit,match", [
    (lambda s: s["state"][0].update(exp_avg=_nan(s["state"][0]["exp_avg"])), "not finite"),
    (lambda s: s["state"][0].update(exp_avg_sq=-1 - s["state"][0]["exp_avg_sq"]), "negative"),
    (lambda s: s["state"][2].update(exp_avg_sq=float("inf") + s["state"][2]["exp_avg_sq"]), "not finite"),
    (lambda s: s["state"][0].update(exp_avg=None), "not finite floating tensors.*NoneType"),
    (lambda s: s["state"][2].update(exp_avg_sq="abc"), "not finite floating tensors.*str"),
    (lambda s: s["state"][0].pop("exp_avg_sq"), "lacks \\['exp_avg_sq'\\]"),
    (lambda s: [s["state"][2].pop(k) for k in ("graft_step", "step") if k in s["state"][2]], "lacks"),
    (lambda s: s["state"][2].update({k: -1 - v for k, v in s["state"][2].items() if k in ("step", "graft_step")}),
     "count"),
    (lambda s: s["state"][0]["natural_gradient"].update(previous_step={k: None for k in ("0.weight", "0.bias")}),
     "previous step"),
    (lambda s: s["param_groups"][0]["params"].__setitem__(1, 0), "distinct indices or names"),
])
def test_a_damaged_step_rule_state_is_refused_at_load_and_changes_nothing(rule, edit, match):
    """The per-parameter state of the step rule (Adam's moments, counts, basis) is checked when loaded, not met as
    NaN weights or an AttributeError at the next step; the optimizer is left as it was."""
    a = mlp()
    opt = ig.nn.NaturalGradient(a, **dict(KW, kl_clip=None, momentum=0.0), step_rule=rule)
    train(a, opt, 3)
    saved = copy.deepcopy(opt.state_dict())
    saved["state"][0]["natural_gradient"]["previous_step"] = {n: torch.zeros_like(p) for n, p in a.named_parameters()}
    edit(saved)
    before = snapshot(saved)
    b = mlp()
    opt_b = ig.nn.NaturalGradient(b, **dict(KW, kl_clip=None, momentum=0.0), step_rule=rule)
    train(b, opt_b, 1)
    mine = snapshot(opt_b.state_dict())
    with pytest.raises(ValueError, match=match):
        opt_b.load_state_dict(saved)
    assert same(_no_nan(saved), _no_nan(before)) and same(opt_b.state_dict(), mine)
    train(b, opt_b, 1, 5)
    assert all(bool(torch.isfinite(p).all()) for p in b.parameters())


def test_a_damaged_factorisation_in_a_checkpoint_is_refused():
    a = mlp()
    opt = ig.nn.NaturalGradient(a, **dict(KW, curvature="ekfac", momentum=0.0, kl_clip="auto"))
    train(a, opt, 3)
    saved = opt.state_dict()
    basis = saved["state"][0]["natural_gradient"]["preconditioner"]["basis"]
    basis[next(iter(basis))] = "abc"
    with pytest.raises(ValueError, match="'basis'.*str"):
        ig.nn.NaturalGradient(mlp(), **dict(KW, curvature="ekfac", momentum=0.0, kl_clip="auto")).load_state_dict(saved)


@pytest.mark.parametrize("curvature", ["kfac", "diag"])
@pytest.mark.parametrize("edit,error,match", [
    (lambda g: {n: t.reshape(-1) for n, t in g.items()}, ValueError, r"grads\['0.weight'\] has shape \(20,\)"),
    (lambda g: {n: (100 * t).long() for n, t in g.items()}, TypeError, "real floating tensor, got torch.int64"),
    (lambda g: {n: t.to(torch.complex128) for n, t in g.items()}, TypeError, "real floating tensor"),
    (lambda g: {n: None for n in g}, TypeError, "real floating tensor, got NoneType"),
    (lambda g: list(g.values()), TypeError, "grads must be a dict"),
    (lambda g: dict(list(g.items())[1:]), ValueError, r"missing \['0.weight'\]"),
    (lambda g: {**g, "extra": torch.zeros(2)}, ValueError, r"extra \['extra'\]"),
])
def test_precondition_checks_given_gradients_against_the_parameters(curvature, edit, error, match):
    model = mlp()
    pre = ig.nn.Preconditioner(model, lr=0.1, curvature=curvature, fisher="exact", kl_clip=None)
    X, y = batch(0)
    F.cross_entropy(model(X), y).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    with pytest.raises(error, match=match):
        pre.precondition(edit(grads), inputs=X)
    assert pre.steps == 0
    delta = pre.precondition(grads, inputs=X)
    assert pre.steps == 1 and all(delta[n].shape == g.shape for n, g in grads.items())


def test_counts_are_checked_by_one_rule_in_every_layer():
    """settings.positive_int(name, value) and geometry.points.positive_int(value, what) checked one thing with
    opposite argument orders and different reach; the geometry's is now the one rule."""
    import numpy as np
    from infogeo.geometry.points import positive_int
    from infogeo.nn.optim import settings
    assert getattr(settings, "positive_int", positive_int) is positive_int   # no second implementation
    # the optimizer's counts keep their range and their words
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 4611686018427387904\], got 2.5"):
        ig.nn.NaturalGradient(mlp(), seed=2.5)
    with pytest.raises(TypeError, match="curvature_update_period must be an integer, got str"):
        ig.nn.NaturalGradient(mlp(), curvature_update_period="3")
    assert ig.nn.NaturalGradient(mlp(), curvature_update_period=torch.tensor(3)).preconditioner is not None
    # the geometry's counts take a one-element tensor as the settings did, and refuse a complex number (cast to its
    # real part with a ComplexWarning before)
    assert ig.Categorical(torch.tensor(3)).k == 3
    with pytest.raises(TypeError, match=r"k \(the number of classes.*must be an integer, got complex128"):
        ig.Categorical(np.complex128(3))


def test_a_checkpoint_without_the_averages_weight_loads_as_a_full_average():
    """A checkpoint of a version before the bias-corrected average (no 'unfilled' entry) continues with its
    average taken as full (its next refreshes weigh as they did in that version); before any statistics, empty."""
    fresh_state = preconditioned_sgd(0).state_dict()
    saved = preconditioned_sgd(2).state_dict()
    assert 0.0 < saved["unfilled"] < 1.0 and fresh_state["unfilled"] == 1.0
    for state, want in ((saved, 0.0), (fresh_state, 1.0)):
        state.pop("unfilled")
        other = ig.nn.Preconditioner(mlp(), lr=0.1, curvature="kfac", curvature_update_period=1)
        other.load_state_dict(state)
        assert other.estimate.unfilled == want
