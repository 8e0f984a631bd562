"""Fuzz the optimizer with hypothesis: every setting with invalid values, every curvature kind with bad batches and
gradients, checkpoints with every kind of damage.  Each case ends in a clear ValueError/TypeError naming what is
wrong, a skipped step that moved nothing, or a finite step; never a raw torch/Python error, a NaN parameter, or
a changed checkpoint.

Outcomes are counted in ``OUTCOMES`` and printed at the end of the module (``pytest -s``).
"""
import collections
import copy
import math
import warnings

import pytest

torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import infogeo as ig  # noqa: E402
from .conftest import mlp  # noqa: E402

F = torch.nn.functional
OUTCOMES = collections.Counter()
FAST = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
KINDS = ["kfac", "ekfac", "diag", "block", "dense", "cg"]
FISHERS = ["mc", "exact", "empirical"]


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print("\noptimizer fuzz outcomes:", dict(sorted(OUTCOMES.items())))


def batch(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 4, generator=g, dtype=torch.float64)
    return X, (X[:, 0] > 0).long() + (X[:, 1] > 0).long()


def flat(model):
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def clear(exc: BaseException, *names: str) -> bool:
    """A clear refusal: a ValueError/TypeError whose message names one of ``names``."""
    return isinstance(exc, (ValueError, TypeError)) and any(n.lower() in str(exc).lower() for n in names)


# ------------------------------------------------------------------ settings x invalid values
BAD = [float("inf"), -float("inf"), float("nan"), 0, -1, -1e-300, 1e309, "0.1", None, True, [1.0], object(),
       torch.tensor([1.0, 2.0]), 1.5, 2 ** 70, 1.0, 0.5]
# setting -> whether a value is valid


def REAL_POS(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def NONNEG(v):
    return REAL_POS(v) or isinstance(v, int) and not isinstance(v, bool) and v == 0


VALID = {
    "lr": lambda v: REAL_POS(v) or (isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0),
    "damping": lambda v: REAL_POS(v) and 1e-4 <= v <= 1e8,     # between the default min and max damping
    "kl_clip": lambda v: v is None or REAL_POS(v),
    "ema_decay": lambda v: NONNEG(v) and v < 1,
    "curvature_update_period": lambda v: REAL_POS(v) and v == int(v) and v <= 2 ** 62,
    "inverse_update_period": lambda v: REAL_POS(v) and v == int(v) and v <= 2 ** 62,
    "samples": lambda v: REAL_POS(v) and v == int(v) and v <= 2 ** 62,
    "max_retries": lambda v: NONNEG(v) and v == int(v) and v <= 2 ** 62,
    "damping_increase": lambda v: REAL_POS(v) and v > 1,
    "damping_recovery": lambda v: REAL_POS(v) and v <= 1,
    "momentum": lambda v: NONNEG(v) and v < 1,
    "damping_factor": lambda v: REAL_POS(v) and v < 1,
    "damping_adaptation_period": lambda v: REAL_POS(v) and v == int(v) and v <= 2 ** 62,
    "seed": lambda v: NONNEG(v) and v == int(v) and v <= 2 ** 62,
    "cg_max_iter": lambda v: REAL_POS(v) and v == int(v) and v <= 2 ** 62,
    "max_damping": lambda v: REAL_POS(v) and v >= 1e-3,
}


@FAST
@given(name=st.sampled_from(sorted(VALID)), value=st.sampled_from(BAD), kind=st.sampled_from(KINDS))
def test_every_setting_refuses_invalid_values_by_name(name, value, kind):
    model = mlp()
    kw = {"curvature": kind, name: value}
    if name == "momentum" and kind == "cg":
        kw["quadratic_model"] = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt = ig.nn.NaturalGradient(model, **kw, step_rule="clip")
    except Exception as exc:
        assert not VALID[name](value), (name, value, exc)
        assert clear(exc, name.split("_")[0]), (name, value, type(exc).__name__, exc)
        OUTCOMES["setting refused"] += 1
        return
    assert VALID[name](value), (name, value, "accepted")
    X, y = batch()
    F.cross_entropy(model(X), y).backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt.step(inputs=X if kind in ("dense", "cg") else None)
    assert bool(torch.isfinite(flat(model)).all())
    OUTCOMES["setting accepted, finite step"] += 1


# ------------------------------------------------------------------ kinds x bad batches and gradients
def _nan_grad(model, X, y):
    next(model.parameters()).grad[0, 0] = float("nan")


def _inf_grad(model, X, y):
    list(model.parameters())[-1].grad[0] = float("inf")


def _zero_grad(model, X, y):
    for p in model.parameters():
        p.grad.zero_()


def _huge_grad(model, X, y):
    for p in model.parameters():
        p.grad.mul_(1e150)


BAD_GRADS = {"nan gradient": _nan_grad, "inf gradient": _inf_grad, "zero gradient": _zero_grad,
             "huge gradient": _huge_grad, "none": lambda *a: None}
BAD_BATCHES = {"nan inputs": lambda X, y: (X.clone().fill_(float("nan")), y), "empty": lambda X, y: (X[:0], y[:0]),
               "one example": lambda X, y: (X[:1], y[:1]), "huge inputs": lambda X, y: (X * 1e200, y),
               "plain": lambda X, y: (X, y)}
BAD_NAMED = {"wrong width": lambda X: torch.randn(X.shape[0], 7, dtype=X.dtype), "none": lambda X: X,
             "float32": lambda X: X.float(), "a list": lambda X: [X, X]}


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(KINDS), fisher=st.sampled_from(FISHERS), grad=st.sampled_from(sorted(BAD_GRADS)),
       data=st.sampled_from(sorted(BAD_BATCHES)), named=st.sampled_from(sorted(BAD_NAMED)),
       which=st.sampled_from(["natural_gradient", "preconditioner"]))
def test_every_kind_survives_bad_batches_and_gradients(kind, fisher, grad, data, named, which):
    model = mlp()
    X0, y0 = batch()
    X, y = BAD_BATCHES[data](X0, y0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if which == "natural_gradient":
            opt = ig.nn.NaturalGradient(model, lr=0.1, curvature=kind, fisher=fisher, curvature_update_period=1, step_rule="clip")
        else:
            sgd = torch.optim.SGD(model.parameters(), lr=0.1)
            opt = ig.nn.Preconditioner(model, lr=sgd, curvature=kind, fisher=fisher, curvature_update_period=1)
        explicit = kind in ("dense", "cg") or named != "none"
        kw = {}
        if explicit:
            kw["inputs"] = BAD_NAMED[named](X)
            if fisher == "empirical":
                kw["targets"] = y
        before = flat(model)
        try:
            F.cross_entropy(model(X), y).backward()
            BAD_GRADS[grad](model, X, y)
            result = opt.step(**kw)
            if which == "preconditioner" and result:
                sgd.step()
        except Exception as exc:
            assert clear(exc, "empty", "data of shape", "nan", "inf", "batch", "dtype", "input", "target",
                         "model(", "shape", "solve"), (type(exc).__name__, exc)
            assert torch.equal(flat(model), before)
            OUTCOMES["bad batch refused"] += 1
            return
    after = flat(model)
    assert bool(torch.isfinite(after).all()), (kind, fisher, grad, data, named)
    skipped = opt.preconditioner.skip_reason if which == "natural_gradient" else opt.skip_reason
    if skipped is not None:
        assert torch.equal(after, before)
        OUTCOMES["bad batch skipped, nothing moved"] += 1
    else:
        OUTCOMES["bad batch stepped, finite"] += 1


# ------------------------------------------------------------------ checkpoints x damage
def _trained(kind="kfac", width=5, fisher="mc"):
    model = mlp(sizes=(4, width, 3))
    opt = ig.nn.NaturalGradient(model, lr=0.1, curvature=kind, fisher=fisher, curvature_update_period=1, step_rule="clip")
    X, y = batch()
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(model(X), y).backward()
        opt.step(inputs=X if kind in ("dense", "cg") else None)
    return model, opt


SAVED = {}


def saved(kind, width=5, fisher="mc"):
    key = (kind, width, fisher)
    if key not in SAVED:
        SAVED[key] = _trained(kind, width, fisher)[1].state_dict()
    return SAVED[key]


def _pre(sd):
    return sd["state"][0]["natural_gradient"]["preconditioner"]


def _first_stat(sd):
    stats = _pre(sd).get("curvature") or {"x": torch.zeros(1)}
    return stats, next(iter(stats))


DAMAGE = {
    "none": lambda sd: None,
    "drop state": lambda sd: sd.pop("state"),
    "drop groups": lambda sd: sd.pop("param_groups"),
    "drop ours": lambda sd: sd["state"][0].pop("natural_gradient"),
    "drop preconditioner": lambda sd: sd["state"][0]["natural_gradient"].pop("preconditioner"),
    "preconditioner not a dict": lambda sd: sd["state"][0]["natural_gradient"].update(preconditioner=3),
    "drop step": lambda sd: _pre(sd).pop("step"),
    "step a string": lambda sd: _pre(sd).update(step="3"),
    "negative step": lambda sd: _pre(sd).update(step=-2),
    "nan damping": lambda sd: _pre(sd).update(damping=float("nan")),
    "zero damping": lambda sd: _pre(sd).update(damping=0.0),
    "rng truncated": lambda sd: _pre(sd).update(rng=_pre(sd)["rng"][:10]),
    "rng float": lambda sd: _pre(sd).update(rng=torch.zeros(5056)),
    "kind renamed": lambda sd: _pre(sd).update(kind=torch.tensor(list(b"block"), dtype=torch.uint8)),
    "fisher renamed": lambda sd: _pre(sd).update(fisher=torch.tensor(list(b"exact"), dtype=torch.uint8)),
    "shape changed": lambda sd: _pre(sd)["shapes"].update({"0.weight": torch.tensor([9, 4])}),
    "parameter renamed": lambda sd: _pre(sd)["shapes"].update({"x": _pre(sd)["shapes"].pop("0.weight")}),
    "stat nan": lambda sd: (lambda s, k: s.update({k: s[k] * float("nan")}))(*_first_stat(sd)),
    "stat reshaped": lambda sd: (lambda s, k: s.update({k: torch.zeros(2, 2, dtype=s[k].dtype)}))(*_first_stat(sd)),
    "stat dropped": lambda sd: (lambda s, k: s.pop(k))(*_first_stat(sd)),
    "stat float32": lambda sd: (lambda s, k: s.update({k: s[k].float()}))(*_first_stat(sd)),
    "stat int": lambda sd: (lambda s, k: s.update({k: s[k].long()}))(*_first_stat(sd)),
    "stats not a dict": lambda sd: _pre(sd).update(curvature=[1, 2]),
    "previous step reshaped": lambda sd: sd["state"][0]["natural_gradient"].update(previous_step={"0.weight": torch.zeros(1)}),
    "extra group": lambda sd: sd["param_groups"].append(copy.deepcopy(sd["param_groups"][0])),
    "lr string": lambda sd: sd["param_groups"][0].update(lr="fast"),
}
# damage that a loader may accept: a harmless change (converted, or the earlier versions' layout)
ACCEPTABLE = {"none", "stat float32"}


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(damage=st.sampled_from(sorted(DAMAGE)), kind=st.sampled_from(["kfac", "diag", "ekfac", "dense"]),
       target=st.sampled_from(["same", "wider", "other kind", "other fisher"]))
@example(damage="none", kind="kfac", target="same")
@example(damage="stat float32", kind="ekfac", target="same")
@example(damage="none", kind="dense", target="wider")
def test_checkpoints_load_strictly_and_never_change(damage, kind, target):
    sd = copy.deepcopy(saved(kind))
    try:
        DAMAGE[damage](sd)
    except (KeyError, StopIteration, TypeError):
        pass   # this damage does not apply to this kind's checkpoint
    reference = copy.deepcopy(sd)
    other = {"same": dict(kind=kind), "wider": dict(kind=kind, width=7), "fisher": None,
             "other kind": dict(kind="diag" if kind != "diag" else "kfac"),
             "other fisher": dict(kind=kind, fisher="exact")}[target]
    model, opt = _trained(**other)
    before = flat(model)
    try:
        opt.load_state_dict(sd)
    except Exception as exc:
        assert clear(exc, "checkpoint", "parameter"), (damage, target, type(exc).__name__, exc)
        assert torch.equal(flat(model), before)
        OUTCOMES["checkpoint refused"] += 1
    else:
        assert damage in ACCEPTABLE and target == "same", (damage, target, "loaded")
        X, y = batch(seed=1)
        opt.zero_grad()
        F.cross_entropy(model(X), y).backward()
        opt.step(inputs=X if kind == "dense" else None)
        assert bool(torch.isfinite(flat(model)).all())
        OUTCOMES["checkpoint loaded, finite step"] += 1
    _same(sd, reference)


def _same(a, b):
    if isinstance(a, dict):
        assert set(a) == set(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b) or (a.isnan() & b.isnan()).all()
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a is b or a == b
