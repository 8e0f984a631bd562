"""Faults under torch.distributed (2 gloo ranks): the ranks agree on every decision, never hang, never diverge.

Every scenario runs in the pair of spawned processes of :mod:`.test_distributed` (after its exactness
cases), with a process-group timeout of a few seconds, and the tests wait a bounded time for them: a
deadlock fails fast instead of waiting for torch's default 30-minute timeout.  Also: the clear refusals of
sharded models other than FSDP2's (FSDP1, DTensor / tensor parallel; FSDP2 itself: :mod:`.test_fsdp`).
"""
import warnings

import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from infogeo.nn import distributed as dd  # noqa: E402

from .test_distributed import problem  # noqa: E402

F = torch.nn.functional
KW = dict(lr=0.3, curvature="kfac", damping=1e-2, fisher="exact", curvature_update_period=2,
          inverse_update_period=3, momentum=0.5)


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def outcome(fn):
    """What ``fn()`` did: ``("ok", value)`` or ``(exception type name, message)``."""
    try:
        return ("ok", fn())
    except Exception as exc:   # reported to the parent test, which checks the type and message
        return (type(exc).__name__, str(exc))


def nan_on_one_rank(rank, placement):
    """Rank 1 alone sees a NaN gradient at step 2 (after DDP's all-reduce): both skip it and undo step 1."""
    model, X, y = problem()
    net = torch.nn.parallel.DistributedDataParallel(model)
    opt = ig.nn.NaturalGradient(net, placement=placement, **KW, step_rule="clip")
    half = slice(rank * 8, rank * 8 + 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k, (xb, yb) in enumerate(zip(X[:, half], y[:, half])):
            opt.zero_grad()
            F.cross_entropy(net(xb), yb).backward()
            if k == 2 and rank == 1:
                model[0].weight.grad[0, 0] = float("nan")
            opt.step()
    undone = sum("last step undone" in str(w.message) for w in caught)
    return flat(model), opt.damping, opt.preconditioner.steps, undone


def adam_nan_on_one_rank(rank):
    """Preconditioner + Adam: the skip is agreed, .grad is None on both ranks and Adam moves nothing."""
    model, X, y = problem()
    net = torch.nn.parallel.DistributedDataParallel(model)
    adam = torch.optim.Adam(model.parameters(), lr=1e-2)
    pre = ig.nn.Preconditioner(net, lr=adam, curvature="kfac", damping=1e-2, fisher="exact",
                               curvature_update_period=1)
    taken = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, (xb, yb) in enumerate(zip(X[:, rank * 8:rank * 8 + 8], y[:, rank * 8:rank * 8 + 8])):
            adam.zero_grad()
            F.cross_entropy(net(xb), yb).backward()
            if k == 1 and rank == 0:
                model[2].bias.grad[0] = float("inf")
            before = flat(model)
            ok = pre.step()
            adam.step()
            taken.append((ok, all(p.grad is None for p in model.parameters()), before == flat(model)))
    return flat(model), taken


def error_on_one_rank(rank):
    """Rank 1 names a batch of the wrong shape: it raises its error, rank 0 a PeerFailure; both go on after."""
    model, X, y = problem()
    net = torch.nn.parallel.DistributedDataParallel(model)
    opt = ig.nn.NaturalGradient(net, **KW, step_rule="clip")
    xb, yb = X[0, rank * 8:rank * 8 + 8], y[0, rank * 8:rank * 8 + 8]
    opt.zero_grad()
    F.cross_entropy(net(xb), yb).backward()
    bad = torch.randn(8, 7, dtype=torch.float64) if rank == 1 else xb
    first = outcome(lambda: opt.step(inputs=bad))
    opt.zero_grad()

    def closure():   # (it fails after its backward: DDP's own all-reduce inside the backward needs both ranks)
        loss = F.cross_entropy(net(xb), yb)
        loss.backward()
        if rank == 0:
            raise RuntimeError("the closure failed on rank 0")
        return loss
    second = outcome(lambda: opt.step(closure))
    opt.zero_grad()
    F.cross_entropy(net(xb), yb).backward()
    lr = opt.param_groups[0]["lr"]
    if rank == 1:
        opt.param_groups[0]["lr"] = -1.0   # a scheduler's setting refused on one rank: it deadlocked DDP
    lr_error = outcome(lambda: opt.step())
    opt.param_groups[0]["lr"] = lr
    opt.zero_grad()
    F.cross_entropy(net(xb), yb).backward()
    third = outcome(lambda: opt.step() or "stepped")   # the group is intact: the next step runs on both
    return first, second, third, flat(model), lr_error


def unequal_batches(rank):
    """Rank 0 holds 6 examples, rank 1 holds 2: the statistics are those of the union batch of 8."""
    model, X, y = problem()
    net = torch.nn.parallel.DistributedDataParallel(model)
    opt = ig.nn.NaturalGradient(net, **KW, step_rule="clip")
    part = slice(0, 6) if rank == 0 else slice(6, 8)
    opt.zero_grad()
    F.cross_entropy(net(X[0, part]), y[0, part]).backward()
    opt.step()
    stats = {k: t.tolist() for k, t in opt.preconditioner.curvature.stats().items()}
    return stats, flat(model)


def adaptive_quadratic(rank):
    """The classic recipe with per-rank closures: the quadratic model's metric and the losses compared are the
    ranks' means, so retries and damping changes agree and the parameters stay identical."""
    model, X, y = problem()
    net = torch.nn.parallel.DistributedDataParallel(model)
    opt = ig.nn.NaturalGradient(net, lr=1.0, curvature="kfac", damping=1e-2, fisher="exact", quadratic_model=True,
                                adaptive_damping=True, damping_adaptation_period=1)
    half = slice(rank * 8, rank * 8 + 8)
    dampings = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for xb, yb in zip(X[:, half], y[:, half]):
            def closure():
                opt.zero_grad()
                loss = F.cross_entropy(net(xb), yb)
                loss.backward()
                return loss
            opt.step(closure, inputs=xb)
            dampings.append(opt.damping)
    return flat(model), dampings


def refusals(rank):
    """Sharded models other than FSDP2's are refused at construction, naming what to use instead."""
    def mk():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))
    out = {}
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        for key, kw in (("fsdp1", {}), ("fsdp1_orig", {"use_orig_params": True})):
            out[key] = outcome(lambda: ig.nn.NaturalGradient(FSDP(mk(), device_id=torch.device("cpu"), **kw), step_rule="clip"))
    except ImportError:
        pass
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import distribute_module
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        mesh = init_device_mesh("cpu", (2,))
        tp = parallelize_module(mk(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        out["tensor_parallel"] = outcome(lambda: ig.nn.NaturalGradient(tp, step_rule="clip"))
        out["replicated"] = outcome(lambda: ig.nn.NaturalGradient(distribute_module(mk(), mesh), step_rule="clip"))
    except ImportError:
        pass
    return out


class _Branches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(5, 3).double(), torch.nn.Linear(5, 3).double()

    def forward(self, x, use_b):
        return self.b(x) if use_b else self.a(x)


def _branch_input(rank):
    return torch.randn(4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(10 + rank))


def branches_on_one_rank(rank):
    """At step 1 rank 1's batch reaches layer ``b`` and rank 0's does not: rank 0 adopts ``b``'s Kronecker block
    with zero statistics, and the statistics of the union batch are averaged as usual; both ranks train on alike."""
    model = _Branches()
    net = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    opt = ig.nn.NaturalGradient(net, curvature="kfac", curvature_update_period=1, ema_decay=0.9, fisher="exact")
    x, y = _branch_input(rank), torch.randint(0, 3, (4,), generator=torch.Generator().manual_seed(rank))
    steps = []
    for use_b in (False, rank == 1, False):
        opt.zero_grad()
        F.cross_entropy(net(x, use_b), y).backward()
        steps.append(outcome(lambda: opt.step() or "stepped"))
        if len(steps) == 2:
            blocks = {b.names[0]: b for b in opt.preconditioner.curvature.blocks}
            after = {n: (blocks[n].kind, blocks[n].A.tolist()) for n in ("a.weight", "b.weight")}
            recorder = opt.preconditioner.recorder
            reads = [sorted(recorder.input_params()), sorted(recorder.output_params())]
    return steps, after, flat(model), reads


def empty_on_one_rank(rank):
    """Rank 1's batch is empty: it says that every rank needs examples (skipping its forward would leave DDP's
    all-reduce waiting), rank 0 a PeerFailure; nothing hangs."""
    model, X, y = problem()
    net = torch.nn.parallel.DistributedDataParallel(model)
    opt = ig.nn.NaturalGradient(net, **KW, step_rule="clip")
    part = slice(0, 8) if rank == 0 else slice(0, 0)
    opt.zero_grad()
    F.cross_entropy(net(X[0, part]), y[0, part], reduction="sum").backward()
    return outcome(lambda: opt.step() or "stepped")


def scaled_on_one_rank(rank):
    """Rank 1 alone forgets scaler.unscale_(opt) with grad_scaler given: it raises, rank 0 a PeerFailure (the same
    agreement as a parameter unfrozen on one rank); the next step, unscaled on both, goes ahead on both."""
    model, X, y = problem()
    net = torch.nn.parallel.DistributedDataParallel(model)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    pre = ig.nn.Preconditioner(net, lr=sgd, curvature="kfac", damping=1e-2, fisher="exact", grad_scaler=scaler)
    got = []
    for k in range(2):
        sgd.zero_grad()
        scaler.scale(F.cross_entropy(net(X[k, rank * 8:rank * 8 + 8]), y[k, rank * 8:rank * 8 + 8])).backward()
        if k == 1 or rank == 0:
            scaler.unscale_(sgd)
        got.append(outcome(pre.step))
        if tuple(got[-1]) == ("ok", True):
            scaler.step(sgd)
        elif rank == 1:
            scaler.unscale_(sgd)   # the forgotten call, for update()
        scaler.update()
    return got, flat(model), pre.steps


def empty_under_fsdp2_on_one_rank(rank):
    """The same under FSDP2, for the exact Fisher (columns back-propagated inside the user's backward, which runs
    FSDP2's all-gathers) and the empirical one: the ranks agree before that pass, so rank 0 does not run it alone
    (before, it waited in the user's backward until the process-group timeout); the step after trains again.
    ``None`` where torch has no ``fully_shard``."""
    try:
        from .test_fsdp import shard
    except Exception:   # noqa: BLE001 - this torch has no FSDP2
        return None
    out = {}
    for fisher in ("exact", "empirical"):
        model, X, y = problem((10, 10))   # layers of other sizes: collectives out of step do not pass unnoticed
        net = shard(model)
        opt = ig.nn.NaturalGradient(net, **{**KW, "fisher": fisher, "curvature_update_period": 1}, step_rule="clip")
        got = []
        for t, part in enumerate((slice(0, 8), slice(0, 8) if rank == 0 else slice(0, 0), slice(0, 8))):
            def one():
                opt.zero_grad()
                F.cross_entropy(net(X[t, part]), y[t, part], reduction="sum").backward()
                return opt.step() or "stepped"
            got.append(outcome(one))
        out[fisher] = got
    return out


def plain_model(rank):
    """A model neither in DDP nor sharded: with its gradients left as they are, the first step raises the same
    error on both ranks (before, each stepped its own model and the ranks drifted apart); with the gradients
    all-reduced by hand it trains, the same on both ranks."""
    out = {}
    for by_hand in (False, True):
        model, X, y = problem()
        opt = ig.nn.NaturalGradient(model, **KW, step_rule="clip")
        part = slice(rank * 8, rank * 8 + 8)

        def steps():
            for t in range(3):
                opt.zero_grad()
                F.cross_entropy(model(X[t, part]), y[t, part]).backward()
                if by_hand:
                    for p in model.parameters():
                        torch.distributed.all_reduce(p.grad)
                        p.grad /= 2
                opt.step()
            return flat(model)
        out[by_hand] = outcome(steps)
    return out


class _DeepBranch(torch.nn.Module):
    """A trunk, and a branch of two Linear layers (an expert) that only some batches take."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.trunk = torch.nn.Linear(5, 3).double()
        self.branch = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)).double()

    def forward(self, x, use_branch):
        return self.trunk(x) + (self.branch(x) if use_branch else 0)


def deep_branch_on_one_rank(rank):
    """A branch of two layers reached by rank 1's batch only: rank 0's one zero block for all four of its
    parameters takes the branch's two Kronecker blocks (it raised 'other structures'); both ranks step alike."""
    model = _DeepBranch()
    net = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    opt = ig.nn.NaturalGradient(net, curvature="kfac", curvature_update_period=1, fisher="exact")
    x, y = _branch_input(rank), torch.randint(0, 3, (4,), generator=torch.Generator().manual_seed(rank))
    steps = []
    for use in (True, rank == 1, rank == 1):
        opt.zero_grad()
        F.cross_entropy(net(x, use), y).backward()
        steps.append(outcome(lambda: opt.step() or "stepped"))
    kinds = sorted((b.kind, tuple(b.names)) for b in opt.preconditioner.curvature.blocks)
    return steps, kinds, flat(model)


def _disagreeing(rank, what):
    """Rank 1 differs in ``what`` (a setting, its lr, or a parameter without a gradient): both ranks raise the same
    ValueError at the first step (another step rule hung in a collective only one rank entered, another lr or a
    .grad set to None on one rank drifted the ranks apart), and neither moved."""
    model, X, y = problem()
    net = torch.nn.parallel.DistributedDataParallel(model)
    kw = dict(curvature="kfac", damping=1e-2, fisher="exact", curvature_update_period=1)
    if what == "rule":
        kw["step_rule"] = "graft" if rank == 1 else "eigen-adam"
    elif what == "curvature":
        kw["curvature"] = "ekfac" if rank == 1 else "kfac"
    elif what == "lr":
        kw["lr"] = 0.02 if rank == 1 else 0.01
    opt = ig.nn.NaturalGradient(net, **kw)
    before = flat(model)
    opt.zero_grad()
    F.cross_entropy(net(X[0, rank * 8:rank * 8 + 8]), y[0, rank * 8:rank * 8 + 8]).backward()
    if what == "idle" and rank == 1:
        model[0].bias.grad = None
    got = outcome(lambda: opt.step() or "stepped")
    return got, flat(model) == before


SCENARIOS = {"deep_branch": deep_branch_on_one_rank, "disagree_rule": lambda r: _disagreeing(r, "rule"),
             "disagree_curvature": lambda r: _disagreeing(r, "curvature"), "disagree_lr": lambda r: _disagreeing(r, "lr"),
             "disagree_idle": lambda r: _disagreeing(r, "idle"),
             "branches": branches_on_one_rank, "empty": empty_on_one_rank, "nan_memory": lambda r: nan_on_one_rank(r, "memory"), "nan_comm": lambda r: nan_on_one_rank(r, "comm"),
             "adam_nan": adam_nan_on_one_rank, "error": error_on_one_rank, "unequal": unequal_batches,
             "adaptive": adaptive_quadratic,
             "refusals": refusals, "scaled": scaled_on_one_rank, "empty_fsdp2": empty_under_fsdp2_on_one_rank,
             "plain": plain_model}


def run_scenarios(rank):
    """Every scenario on this rank (called by the two spawned ranks of :mod:`.test_distributed`)."""
    return {name: outcome(lambda: run(rank)) for name, run in SCENARIOS.items()}


@pytest.fixture(scope="module")
def results(two_ranks):
    return {r: two_ranks[r]["faults"] for r in range(2)}


def ok(results, name):
    got = [results[r][name] for r in range(2)]
    assert all(g[0] == "ok" for g in got), got
    return [g[1] for g in got]


@pytest.mark.parametrize("placement", ["memory", "comm"])
def test_nan_gradient_on_one_rank_is_skipped_on_both(results, placement):
    (p0, lam0, n0, undone0), (p1, lam1, n1, undone1) = ok(results, f"nan_{placement}")
    assert p0 == p1 and lam0 == lam1 and n0 == n1 == 4   # identical parameters after the recovery
    assert undone0 == undone1 == 1
    assert all(torch.isfinite(torch.tensor(p0)))


def test_skipped_step_moves_nothing_under_adam_on_both_ranks(results):
    (p0, t0), (p1, t1) = ok(results, "adam_nan")
    assert p0 == p1 and t0 == t1
    assert t0[1] == (False, True, True)                   # skipped, .grad None, Adam moved nothing
    assert all(step[0] and not step[2] for k, step in enumerate(t0) if k != 1)


def test_an_error_on_one_rank_ends_both_with_a_clear_error(results):
    (a0, b0, c0, p0, lr0), (a1, b1, c1, p1, lr1) = ok(results, "error")
    assert lr1[0] == "ValueError" and "lr" in lr1[1] and lr0[0] == "PeerFailure" and "[1]" in lr0[1]
    assert a1[0] == "ValueError" and "data of shape" in a1[1]
    assert a0[0] == "PeerFailure" and "[1]" in a0[1]
    assert tuple(b0) == ("RuntimeError", "the closure failed on rank 0")
    assert b1[0] == "PeerFailure" and "[0]" in b1[1]
    assert c0[0] == c1[0] == "ok" and p0 == p1


def test_scaled_gradients_on_one_rank_end_both_with_a_clear_error(results):
    (g0, p0, n0), (g1, p1, n1) = ok(results, "scaled")
    assert g1[0][0] == "ValueError" and "scaler.unscale_" in g1[0][1]
    assert g0[0][0] == "PeerFailure" and "[1]" in g0[0][1]
    assert tuple(g0[1]) == tuple(g1[1]) == ("ok", True) and p0 == p1 and n0 == n1 == 1


def test_unequal_batches_give_the_statistics_of_the_union(results):
    (s0, p0), (s1, p1) = ok(results, "unequal")
    assert p0 == p1 and s0 == s1
    model, X, y = problem()
    opt = ig.nn.NaturalGradient(model, **KW, step_rule="clip")
    opt.zero_grad()
    F.cross_entropy(model(X[0, :8]), y[0, :8]).backward()
    opt.step()
    for k, t in opt.preconditioner.curvature.stats().items():
        assert torch.allclose(torch.tensor(s0[k], dtype=t.dtype), t, rtol=0, atol=1e-12), k


def test_adaptive_damping_and_the_quadratic_model_agree_over_the_ranks(results):
    (p0, d0), (p1, d1) = ok(results, "adaptive")
    assert p0 == p1 and d0 == d1
    assert len(set(d0)) > 1   # the damping did adapt


@pytest.mark.parametrize("kind", ["fsdp1", "fsdp1_orig", "tensor_parallel", "replicated"])
def test_sharded_models_are_refused_at_construction(results, kind):
    got = ok(results, "refusals")
    if kind not in got[0]:
        pytest.skip(f"this torch cannot build {kind} on CPU")
    for r in range(2):
        name, message = got[r][kind]
        assert name == "ValueError", (kind, name, message)
        assert "DistributedDataParallel" in message and "fully_shard (FSDP2" in message   # what to use instead
        assert {"fsdp1": "FSDP1", "fsdp1_orig": "FSDP1", "tensor_parallel": "DTensor",
                "replicated": "DTensor"}[kind] in message


def test_agree_without_a_process_group():
    assert dd.agree(None, [True, False], [3.0]) == ([True, False], torch.tensor([[3.0]], dtype=torch.float64))
    with pytest.raises(KeyError):
        dd.agree(KeyError("raised where it happened"))


def test_a_layer_reached_on_some_ranks_only_is_averaged_as_the_union_batch(results):
    """Step 0: both ranks reach ``a``; step 1: rank 0 reaches ``a``, rank 1 ``b``.  An input factor is the mean
    over the rows that reach its layer, as in one process whose examples take either branch: ``b``'s is then
    (1 - w) times rank 1's (its gradient factor holds rank 1's four examples of eight); ``a``'s is w times step 0's
    mean plus (1 - w) times rank 0's, for the weight w = β/(1 + β) that the bias-corrected average keeps at its
    second refresh (β = 0.9)."""
    (s0, after0, p0, r0), (s1, after1, p1, r1) = ok(results, "branches")
    assert [tuple(s) for s in s0] == [tuple(s) for s in s1] == [("ok", "stepped")] * 3
    assert p0 == p1 and after0 == after1
    # both layers read the data and write the output: rank 0, whose batch did not reach b, learnt it from rank 1 at
    # the refresh (and stepped b at the same rate: the parameters are equal)
    assert r0 == r1 == [["a.bias", "a.weight", "b.bias", "b.weight"]] * 2

    def A(x):
        xb = torch.cat([x, torch.ones(len(x), 1, dtype=torch.float64)], 1)
        return xb.T @ xb / len(x)
    A0, A1 = A(_branch_input(0)), A(_branch_input(1))
    kind_a, Aa = after0["a.weight"]
    kind_b, Ab = after0["b.weight"]
    assert kind_a == kind_b == "kfac"
    w = 0.9 / 1.9
    assert torch.allclose(torch.tensor(Ab, dtype=torch.float64), (1 - w) * A1, rtol=1e-12, atol=0)
    assert torch.allclose(torch.tensor(Aa, dtype=torch.float64), w * (A0 + A1) / 2 + (1 - w) * A0,
                          rtol=1e-12, atol=0)


def test_an_empty_batch_on_one_rank_ends_both_with_advice_that_does_not_deadlock(results):
    r0, r1 = ok(results, "empty")
    assert r1[0] == "ValueError" and "every rank" in r1[1] and "DistributedSampler" in r1[1]
    assert r0[0] == "PeerFailure"


def test_an_empty_batch_on_one_rank_under_fsdp2_ends_both_with_the_errors_of_ddp_and_no_hang(results):
    got = ok(results, "empty_fsdp2")
    if got[0] is None:
        pytest.skip("this torch has no fully_shard (FSDP2)")
    for fisher in ("exact", "empirical"):
        (a0, b0, c0), (a1, b1, c1) = got[0][fisher], got[1][fisher]
        assert b0[0] == "PeerFailure", (fisher, b0)   # not the process group's timeout in the backward
        assert a0 == a1 == c0 == c1 == ("ok", "stepped"), (fisher, got)
        assert b1[0] == "ValueError" and "every rank" in b1[1] and "FSDP2" in b1[1], (fisher, b1)


def test_a_model_neither_in_ddp_nor_sharded_is_refused_unless_its_ranks_hold_the_same_gradients(results):
    got = ok(results, "plain")
    errors = [g[False] for g in got]
    assert errors[0] == errors[1] and errors[0][0] == "ValueError", errors   # the same error on both ranks
    assert "DistributedDataParallel" in errors[0][1] and "drift apart" in errors[0][1]
    trained = [g[True] for g in got]
    assert trained[0][0] == "ok" and trained[0] == trained[1], trained   # by hand: allowed, one model


def test_a_branch_of_several_layers_reached_on_one_rank_is_adopted(results):
    (s0, k0, p0), (s1, k1, p1) = ok(results, "deep_branch")
    assert [tuple(s) for s in s0] == [tuple(s) for s in s1] == [("ok", "stepped")] * 3
    assert p0 == p1 and k0 == k1
    assert ("kfac", ("branch.0.weight", "branch.0.bias")) in k0 and ("kfac", ("branch.2.weight", "branch.2.bias")) in k0


@pytest.mark.parametrize("what,match", [("rule", "other settings"), ("curvature", "other settings"),
                                        ("lr", "other settings"), ("idle", "without a gradient")])
def test_ranks_that_would_take_other_steps_raise_the_same_error_and_move_nothing(results, what, match):
    (got0, same0), (got1, same1) = ok(results, f"disagree_{what}")
    assert got0[0] == got1[0] == "ValueError" and match in got0[1] and got0[1] == got1[1]
    assert same0 and same1
