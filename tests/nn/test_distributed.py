"""Data-parallel natural gradient over torch.distributed (gloo, two CPU processes)."""
import datetime
import queue as queue_module
import signal
import socket
import time

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo.nn import distributed as dd  # noqa: E402

F = torch.nn.functional
STEPS, N = 4, 16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Shared(torch.nn.Module):
    """A hidden Linear layer applied twice: no Kronecker factors, so eigen-adam steps in its gradient's basis."""

    def __init__(self):
        super().__init__()
        self.inp, self.mid, self.out = torch.nn.Linear(4, 6), torch.nn.Linear(6, 6), torch.nn.Linear(6, 3)

    def forward(self, x):
        return self.out(torch.tanh(self.mid(torch.tanh(self.mid(torch.tanh(self.inp(x)))))))


def problem(hidden=(6,)):
    torch.manual_seed(0)
    if hidden == "shared":
        model = Shared().double()
    else:
        sizes, layers = (4,) + tuple(hidden) + (3,), []
        for i in range(len(sizes) - 1):
            layers += [torch.nn.Linear(sizes[i], sizes[i + 1]), torch.nn.Tanh()]
        model = torch.nn.Sequential(*layers[:-1]).double()
    g = torch.Generator().manual_seed(1)
    X = torch.randn(STEPS, N, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (STEPS, N), generator=g)
    return model, X, y


def train(model, X, y, curvature, placement, fisher="exact", hidden=(6,), ddp=False):
    """Parameters after the steps, and the layers whose last solve came from the batch's rows."""
    net = torch.nn.parallel.DistributedDataParallel(model) if ddp else model
    curvature, _, rule = curvature.partition("+")      # "kfac+eigen-adam": that step rule (default "clip")
    curvature, _, inverse = curvature.partition(":")   # "kfac:eigen": K-FAC with the exact eigenvalue damping
    rule = rule or "clip"
    # gradient statistics every step, as their kinds take them: the next gradient then lies in their factors'
    # range, not partly in a null space whose eigenvectors (and Adam's steps along them) follow rounding
    period = 1 if ig.nn.curvature.kinds.kind(curvature).statistics == "gradient" else 2
    opt = ig.nn.NaturalGradient(net, lr=0.3 if rule == "clip" else 0.03, curvature=curvature, damping=1e-2,
                                fisher=fisher, momentum=0.5 if rule == "clip" else 0.0, curvature_update_period=period,
                                inverse_update_period=3, placement=placement,
                                **({"inverse": inverse} if inverse else {}), step_rule=rule)
    for xb, yb in zip(X, y):
        opt.zero_grad()
        F.cross_entropy(net(xb), yb).backward()
        opt.step()
    rows = opt.preconditioner.recorder.rows
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), list(rows.used) if rows else []


# the empirical Fisher: each rank's statistics from its own backward (per-example loss gradients)
# a 64 x 64 layer on 2 x 8 rows: K-FAC solves it from the gathered rows of both ranks (both placements)
# EKFAC: the scales measured in one basis on every rank (that of the averaged factors)
CASES = [("kfac", "memory"), ("kfac", "comm"), ("kfac:eigen", "comm"), ("diag", "memory"),
         ("kfac", "memory", "empirical"), ("kfac", "memory", "exact", (64, 64)), ("kfac", "comm", "exact", (64, 64)),
         ("ekfac", "memory"), ("ekfac", "comm"),
         # Adam in the eigenbasis: every rank takes the same basis of the all-reduced factors
         ("kfac+eigen-adam", "memory"), ("ekfac+eigen-adam", "comm"),
         # and a matrix without factors (a layer applied twice) in its gradient's eigenbasis
         ("kfac+eigen-adam", "memory", "exact", "shared"),
         # gradient statistics: of the gradients DDP has averaged, so the same on every rank without an all-reduce
         ("shampoo+graft", "memory"), ("soap+eigen-adam", "comm")]
#: the cases run with four ranks
CASES_4 = [("ekfac", "memory"), ("kfac", "comm")]


#: a collective that waits longer than this on a missing rank raises (instead of hanging)
PG_TIMEOUT = datetime.timedelta(seconds=20)
#: the whole two-process run, imports included, must end within this
DEADLINE = 300.0


def _worker(rank, port, queue, world=2):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=PG_TIMEOUT)
    try:
        torch.set_num_threads(1)
        part = slice(rank * N // world, (rank + 1) * N // world)
        out = {}
        for case in (CASES if world == 2 else CASES_4):
            model, X, y = problem(*case[3:])
            # plain floats: a tensor would be shared through a file descriptor that dies with the process
            params, used = train(model, X[:, part], y[:, part], *case, ddp=True)
            out[case] = (params.tolist(), used)
        # the FSDP2 runs (where this torch has fully_shard) and the fault scenarios share these processes
        out = {"cases": out, "fsdp": _fsdp(rank, world), "bf16": _bf16_statistics(rank, world),
               "masked": {case: _masked(*case, world=world, rank=rank).tolist() for case in MASKED}}
        if world == 2:
            from .test_distributed_faults import run_scenarios
            from .test_distributed_checkpoint import run_dcp
            out["faults"] = run_scenarios(rank)
            out["dcp"] = run_dcp(rank, world)
        queue.put((rank, out))
    finally:
        dist.destroy_process_group()


def spawn_ranks(world, target=None, args=()):
    """What ``world`` spawned gloo ranks computed, ``{rank: {"cases": ..., "fsdp": ..., "faults": ...}}``, in
    bounded time; ``target``: another worker, called as ``target(rank, port, queue, world, *args)``, which puts
    ``(rank, what it computed)`` on the queue."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=target or _worker, args=(r, port, queue, world) + tuple(args)) for r in range(world)]
    for p in procs:
        p.start()
    results, start = {}, time.monotonic()
    try:
        while len(results) < world:  # fail at once, not after a timeout, if a worker dies
            assert time.monotonic() - start < DEADLINE, "the ranks did not finish in time (a deadlock?)"
            try:
                rank, out = queue.get(timeout=2)
                results[rank] = out
            except queue_module.Empty:
                assert all(p.is_alive() or p.exitcode == 0 for p in procs), "a worker failed (see its stderr)"
        for p in procs:
            p.join(timeout=30)
            # every rank delivered its result; gloo occasionally aborts a process as it exits ("terminate called
            # without an active exception", SIGABRT, seen on a loaded machine), after the work the test checks
            assert p.exitcode == 0 or p.exitcode == -signal.SIGABRT, f"a worker ended with {p.exitcode}"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    return results


#: statistics kept in bfloat16 (``factor_dtype``), factorised in float32: the placements and step rules run
BF16_CASES = [(placement, rule) for placement in ("memory", "comm") for rule in ("graft", "eigen-adam", "clip")]


def _bf16_statistics(rank, world):
    """Parameters (a float32 MLP, after its steps) with ``factor_dtype=torch.bfloat16`` for each of
    :data:`BF16_CASES`:
    the factorisations an owner broadcasts are float32 while the factors are bfloat16."""
    out = {}
    for placement, rule in BF16_CASES:
        model, X, y = problem((8,))
        model = model.float()
        net = torch.nn.parallel.DistributedDataParallel(model)
        opt = ig.nn.NaturalGradient(net, curvature="kfac", factor_dtype=torch.bfloat16, placement=placement,
                                    step_rule=rule, curvature_update_period=2, inverse_update_period=3)
        part = slice(rank * N // world, (rank + 1) * N // world)
        for xb, yb in zip(X[:6, part], y[:6, part]):
            opt.zero_grad()
            F.cross_entropy(net(xb.float()), yb).backward()
            opt.step()
        out[(placement, rule)] = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
    return out


def test_bfloat16_statistics_train_alike_on_every_rank(two_ranks):
    start = torch.cat([p.detach().reshape(-1) for p in problem((8,))[0].parameters()]).float()
    for case in BF16_CASES:
        got = [torch.tensor(two_ranks[r]["bf16"][case]) for r in range(2)]
        assert torch.equal(got[0], got[1]), case
        assert bool(torch.isfinite(got[0]).all()) and (got[0] - start).abs().max() > 1e-3, case


def _fsdp(rank, world):
    """The FSDP2 runs of :mod:`.test_fsdp` on this rank, or ``None`` where torch has no ``fully_shard``."""
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        return None
    from .test_fsdp import run_fsdp
    return run_fsdp(rank, world)


def test_four_ranks_on_quarter_batches_equal_one_process_on_the_whole(four_ranks):
    results = four_ranks
    for case in CASES_4:
        model, X, y = problem(*case[3:])
        expected, _ = train(model, X, y, *case)
        for r in range(4):
            got = torch.tensor(results[r]["cases"][case][0], dtype=torch.float64)
            assert torch.allclose(got, expected, rtol=0, atol=1e-8), (case, r, (got - expected).abs().max())


def test_two_ranks_on_half_batches_equal_one_process_on_the_whole(two_ranks):
    """DDP averages the gradients, the preconditioner the statistics; blocks are solved on their owners."""
    results = {r: two_ranks[r]["cases"] for r in range(2)}
    for case in CASES:
        model, X, y = problem(*case[3:])
        start = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        expected, used = train(model, X, y, *case)
        assert (expected - start).abs().max() > 1e-2   # the parameters moved
        for r in range(2):
            got = torch.tensor(results[r][case][0], dtype=torch.float64)
            assert torch.allclose(got, expected, rtol=0, atol=1e-8), (case, (got - expected).abs().max())
            assert results[r][case][1] == used, (case, results[r][case][1], used)   # the same route
        assert bool(used) == (case[3:] == ((64, 64),)), (case, used)


#: sequences whose loss ignores positions (``ignore_index``): the ranks keep different numbers of them, and in the
#: second pattern one rank keeps none
MASKED = [(curvature, pattern) for pattern in ("unequal", "one rank none")
          for curvature in ("kfac", "ekfac", "diag", "kfac+eigen-adam")]


def _masked(curvature, pattern, world=1, rank=0):
    """Parameters after the steps on the masked sequences of ``pattern`` (this rank's part of each batch), with
    the loss of the whole batch: the sum over its kept positions over their number, as DDP's mean of the ranks'
    losses gives it."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3)).double()
    g = torch.Generator().manual_seed(3)
    X = torch.randn(STEPS, 8, 5, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (STEPS, 8, 5), generator=g)
    ignored = torch.rand(STEPS, 8, 5, generator=g) < 0.3
    ignored[:, :4] |= torch.rand(STEPS, 4, 5, generator=g) < 0.5   # the first half keeps fewer
    if pattern == "one rank none":
        ignored[:, 4:] = True
    y[ignored] = -100
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    curvature, _, rule = curvature.partition("+")
    opt = ig.nn.NaturalGradient(net, lr=0.05, curvature=curvature, damping=1e-2, fisher="exact",
                                curvature_update_period=1, inverse_update_period=1, step_rule=rule or "clip")
    part = slice(rank * 8 // world, (rank + 1) * 8 // world)
    for xb, yb in zip(X, y):
        kept = int((yb != -100).sum())
        opt.zero_grad()
        loss = F.cross_entropy(net(xb[part]).reshape(-1, 3), yb[part].reshape(-1), reduction="sum") * world / kept
        loss.backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@pytest.mark.parametrize("world", [2, 4])
def test_ranks_that_keep_other_numbers_of_positions_equal_one_process(world, request):
    """K-FAC's input factor is a mean over the positions the loss keeps: the ranks' factors are weighted by their
    kept positions, not by their examples (5e-3 to 2e-2 off before); a rank whose positions are all ignored has no
    loss gradient at all and adds nothing (it was taken for a batch that keeps every position)."""
    results = request.getfixturevalue("two_ranks" if world == 2 else "four_ranks")
    for case in MASKED:
        expected = _masked(*case)
        for r in range(world):
            got = torch.tensor(results[r]["masked"][case], dtype=torch.float64)
            assert torch.allclose(got, expected, rtol=0, atol=1e-8), (case, r, (got - expected).abs().max())


def test_helpers_without_a_process_group():
    assert dd.world_size() == 1 and dd.rank() == 0
    t = [torch.ones(2), torch.arange(3.0), torch.zeros(1, dtype=torch.float64)]
    out = dd.all_reduce_mean(t)
    assert all(torch.equal(a, b) for a, b in zip(out, t))
    assert dd.assign_owners([1.0, 5.0, 2.0, 2.0], size=2) == [1, 0, 1, 1]
