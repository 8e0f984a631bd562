"""Natural gradient on models sharded with FSDP2 (``fully_shard``, DTensor parameters), gloo on CPU.

The runs share the spawned gloo ranks of :mod:`.test_distributed` (its process-group timeout and
deadline bound them).  The ranks each see a part of the batch; FSDP2 all-gathers the parameters for the forward and
reduce-scatters the gradients.  After several steps the parameters must equal those of one process
training the unsharded model on the whole batch (float64, exact Fisher), for K-FAC (both placements),
EKFAC, the diagonal, both step rules, on an MLP and a small transformer block, and with hybrid sharding (HSDP) on
four ranks.  The Monte Carlo
Fisher and bf16 mixed precision must train (finite, decreasing losses; statistics in float32).  K-FAC and EKFAC
under ``placement="memory"`` with ``"graft"`` or ``"clip"`` keep each block's statistics on its owner alone
(owner-only statistics): each rank holds its own blocks' factors (EKFAC's bases and scales too), the steps equal
those with the statistics replicated, and a NaN in one rank's statistics is discarded on every rank.
"""
import math

import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402

fsdp_api = pytest.importorskip("torch.distributed.fsdp")
if not hasattr(fsdp_api, "fully_shard"):
    pytest.skip("this torch has no fully_shard (FSDP2)", allow_module_level=True)

F = torch.nn.functional
STEPS, N, T, VOCAB = 4, 16, 5, 11


class Block(torch.nn.Module):
    """A pre-norm transformer block (attention from Linear layers, a GELU MLP) on embedded tokens, mean-pooled."""

    def __init__(self, d=8, classes=3):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, d)
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.GELU(), torch.nn.Linear(2 * d, d))
        self.head = torch.nn.Linear(d, classes)

    def forward(self, tokens):
        h = self.embed(tokens)
        a = self.norm1(h)
        w = torch.softmax(self.q(a) @ self.k(a).transpose(1, 2) / a.shape[-1] ** 0.5, dim=-1)
        h = h + self.o(w @ self.v(a))
        h = h + self.mlp(self.norm2(h))
        return self.head(h.mean(1))


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 5), torch.nn.Tanh(),
                               torch.nn.Linear(5, 3))


class Branch(torch.nn.Module):
    """The MLP and a layer its forward never calls (a branch not taken): under FSDP2 that layer stays sharded."""

    def __init__(self):
        super().__init__()
        self.net, self.spare = mlp(), torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.net(x)


class Switch(torch.nn.Module):
    """The MLP and a layer added to its output from the third forward on (a branch taken later): the statistics'
    structure changes at the refresh of step 2 (that layer's zero diagonal becomes its Kronecker factors)."""

    def __init__(self):
        super().__init__()
        self.net, self.spare, self.calls = mlp(), torch.nn.Linear(4, 3), 0

    def forward(self, x):
        self.calls += 1
        return self.net(x) + self.spare(x) if self.calls > 2 else self.net(x)


class Attention(torch.nn.Module):
    """torch's MultiheadAttention, which reads ``out_proj.weight`` without calling ``out_proj``, mean-pooled."""

    def __init__(self, d=8, classes=3):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, d)
        self.attn = torch.nn.MultiheadAttention(d, 2, batch_first=True)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, tokens):
        h = self.embed(tokens)
        return self.head((h + self.attn(h, h, h, need_weights=False)[0]).mean(1))


class Encoder(torch.nn.Module):
    """torch's own transformer layers (attention, LayerNorms, feed-forward), mean-pooled: under FSDP2 each layer is
    sharded in a unit of its own, as FSDP2's recipes shard transformer blocks."""

    def __init__(self, d=8, classes=3):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, d)
        layer = torch.nn.TransformerEncoderLayer(d, 2, 2 * d, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)).mean(1))


class Checkpointed(Encoder):
    """The encoder with each layer under activation checkpointing (``use_reentrant=False``), as FSDP2's recipes
    combine the two: the layers run again, unsharded again, inside the backward."""

    def forward(self, tokens):
        from torch.utils.checkpoint import checkpoint
        h = self.embed(tokens)
        for layer in self.encoder.layers:
            h = checkpoint(layer, h, use_reentrant=False)
        return self.head(h.mean(1))


class Tied(torch.nn.Module):
    """A read-out tied to the embedding, ``F.linear(h, embed.weight)`` (a use outside the Embedding), mean-pooled."""

    def __init__(self, d=8):
        super().__init__()
        self.embed, self.mid = torch.nn.Embedding(3, d), torch.nn.Linear(d, d)
        self.proj = torch.nn.Linear(4, d)

    def forward(self, x):
        return F.linear(torch.tanh(self.mid(self.proj(x))), self.embed.weight)


def problem(arch, dtype=torch.float64):
    """A freshly seeded model and ``STEPS`` batches of ``N`` examples."""
    torch.manual_seed(0)
    model = {"mlp": mlp, "block": Block, "branch": Branch, "switch": Switch, "attention": Attention, "tied": Tied,
             "encoder": Encoder, "checkpointed": Checkpointed}[arch]().to(dtype)
    g = torch.Generator().manual_seed(1)
    tokens = arch in ("block", "attention", "encoder", "checkpointed")
    X = torch.randn(STEPS, N, 4, generator=g, dtype=dtype) if not tokens else \
        torch.randint(0, VOCAB, (STEPS, N, T), generator=g)
    y = torch.randint(0, 3, (STEPS, N), generator=g)
    return model, X, y


def shard(model, policy=None, hybrid=False, root_only=False):
    """``fully_shard`` every Linear (and the block's MLP), then the root, as FSDP2's examples do; ``hybrid``: on a
    2 x 2 mesh (HSDP: parameters sharded within each pair of ranks, replicated across the pairs); ``root_only``:
    the root alone (a weight read outside its module must be in the unit of the module that reads it)."""
    from torch.distributed.fsdp import fully_shard
    kw = {} if policy is None else {"mp_policy": policy}
    if root_only:
        fully_shard(model, **kw)
        return model
    if hybrid:
        from torch.distributed.device_mesh import init_device_mesh
        kw["mesh"] = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    for m in list(model.modules())[1:]:
        if isinstance(m, torch.nn.Linear) or (isinstance(m, torch.nn.Sequential) and m is not model):
            if not any(isinstance(p, torch.distributed.tensor.DTensor) for p in m.parameters()):
                fully_shard(m, **kw)
    fully_shard(model, **kw)
    return model


def shard_layers(model):
    """``fully_shard`` each of the encoder's layers, then the root."""
    from torch.distributed.fsdp import fully_shard
    for layer in model.encoder.layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def train(model, X, y, curvature, placement="memory", arch="mlp", step_rule="clip", fisher="exact", named=False):
    """Losses of the steps and the whole parameters after them (float64 lists); ``named``: the curvature on the
    batch named to ``step(inputs=...)``, not recorded by the hooks."""
    opt = ig.nn.NaturalGradient(model, lr=0.3 if step_rule == "clip" else 0.05, curvature=curvature, damping=1e-2,
                                fisher=fisher, curvature_update_period=2, inverse_update_period=3,
                                placement=placement, step_rule=step_rule,
                                **({"momentum": 0.5} if step_rule == "clip" else {}))
    losses = []
    for xb, yb in zip(X, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step(**({"inputs": xb} if named else {}))
        losses.append(float(loss.detach()))
    whole = [p.full_tensor() if isinstance(p, torch.distributed.tensor.DTensor) else p for p in model.parameters()]
    return losses, torch.cat([p.detach().reshape(-1).double() for p in whole]).tolist(), opt


# (curvature, placement, architecture, step rule[, Fisher, named batch]), equal to one process
CASES = [("kfac", "memory", "mlp", "clip"), ("kfac", "comm", "mlp", "clip"), ("diag", "memory", "mlp", "clip"),
         ("ekfac", "memory", "mlp", "clip"), ("ekfac", "comm", "mlp", "clip"), ("kfac", "memory", "mlp", "graft"),
         ("block", "comm", "mlp", "clip"), ("kfac", "memory", "mlp", "clip", "empirical"),
         ("kfac", "memory", "mlp", "clip", "exact", True), ("kfac", "memory", "block", "clip"),
         ("kfac", "comm", "block", "graft"),
         # Adam in the Kronecker eigenbasis: the gradients gathered, the moments whole on every rank
         ("kfac", "memory", "mlp", "eigen-adam"), ("kfac", "comm", "block", "eigen-adam"),
         # Shampoo's statistics of the gathered gradients, and SOAP's Adam in their eigenbasis
         ("shampoo", "memory", "mlp", "graft"), ("soap", "comm", "mlp", "eigen-adam"),
         # a layer no example reaches: zero statistics of its whole shape (it was never gathered)
         ("kfac", "memory", "branch", "eigen-adam"), ("kfac", "comm", "branch", "clip"),
         ("diag", "memory", "branch", "clip"),
         # owner-only statistics meeting a change of structure: gathered, averaged as when replicated, owned again
         ("kfac", "memory", "switch", "graft"), ("kfac", "memory", "switch", "clip"),
         # EKFAC's owner-only statistics: the bases broadcast at each refresh, the scales measured on every rank
         ("ekfac", "memory", "mlp", "graft"), ("ekfac", "memory", "switch", "graft")]
CASES_4 = [("kfac", "memory", "mlp", "clip"), ("kfac", "memory", "mlp", "graft"), ("kfac", "memory", "switch", "graft"),
           ("ekfac", "comm", "mlp", "clip"),
           # three blocks on four ranks: one rank owns none, and still measures every block's scales
           ("ekfac", "memory", "mlp", "graft"), ("ekfac", "memory", "switch", "clip")]
# weights used outside their own modules (attention's out_proj.weight, a tied read-out): the whole-network route,
# with the root alone sharded (FSDP2 needs a weight in the unit of the module that reads it)
CASES_FOREIGN = [("diag", "memory", "attention", "graft"), ("kfac", "memory", "attention", "clip"),
                 ("diag", "comm", "tied", "clip"), ("kfac", "memory", "tied", "graft")]
# torch's transformer layers, each sharded in a unit of its own: the rules that read parameter values (attention,
# LayerNorm) take them as the forward used them
CASES_UNITS = [("kfac", "memory", "encoder", "graft"), ("diag", "memory", "encoder", "clip"),
               ("kfac", "comm", "encoder", "eigen-adam"),
               # and each under activation checkpointing
               ("kfac", "memory", "checkpointed", "graft"), ("kfac", "comm", "checkpointed", "eigen-adam")]
# hybrid sharding (HSDP) on the four ranks
CASES_HSDP = [("kfac", "memory", "mlp", "clip"), ("ekfac", "comm", "block", "graft")]


def run_fsdp(rank, world):
    """This rank's share of the FSDP2 runs (called by the spawned ranks of :mod:`.test_distributed`)."""
    part = slice(rank * N // world, (rank + 1) * N // world)
    out = {}
    for case in (CASES if world == 2 else CASES_4):
        model, X, y = problem(case[2])
        out[case] = train(shard(model), X[:, part], y[:, part], *case)[:2]
    out["owned"] = {rule: owned_statistics(part, rule) for rule in ("graft", "clip")}
    out["owned_ekfac"] = {rule: owned_statistics(part, rule, "ekfac") for rule in ("graft", "clip")}
    out["nan"] = nan_statistics(part)
    out["nan_ekfac"] = nan_statistics(part, "ekfac")
    if world == 2:
        out["failed_basis"] = failed_basis(part)
    out["update"] = bare_update(part)
    if world == 4:
        for case in CASES_HSDP:
            model, X, y = problem(case[2])
            out[("hsdp",) + case] = train(shard(model, hybrid=True), X[:, part], y[:, part], *case)[:2]
        out["hsdp_dcp"] = hsdp_checkpoint(rank, world)
    if world == 2:
        for case in CASES_FOREIGN:
            model, X, y = problem(case[2])
            out[case] = train(shard(model, root_only=True), X[:, part], y[:, part], *case)[:2]
        for case in CASES_UNITS:
            model, X, y = problem(case[2])
            out[("units",) + case] = train(shard_layers(model), X[:, part], y[:, part], *case)[:2]
        out["mc"] = mc_fisher(part)
        out["bf16"] = bf16(part)
        out["refused"] = refusals()
        out["resume"] = resume(part)
        out["resume_eigen"] = resume(part, "eigen-adam")
        out["resume_between"] = resume(part, at=3)   # step 3 refreshes nothing (default periods: 0, 1, 2, 4, ...)
        # eigen-adam's own schedule: statistics only at factorisations, the factors held as their factorisation
        out["resume_eigen_between"] = resume(part, "eigen-adam", at=3)
    return out


def deep_mlp():
    """An MLP of five Linear layers (more blocks than four ranks), float64."""
    torch.manual_seed(0)
    sizes, layers = (4, 8, 8, 8, 8, 3), []
    for i in range(len(sizes) - 1):
        layers += [torch.nn.Linear(sizes[i], sizes[i + 1]), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1]).double()


def owned_statistics(part, step_rule, curvature="kfac"):
    """What this rank holds of the curvature after the steps of a five-layer MLP under FSDP2 (``curvature``,
    ``placement="memory"``, ``step_rule``): whether the statistics are owner-only, the blocks' owners, the keys of
    the statistics held, of the factorisations the solver holds, the bytes of the factors held, of their
    structure's blocks (absent here: tensors only of size 0), of every block's statistics, of all the estimate
    holds (``held_bytes`` of ``benchmarks/nn_scale.py``), and the whole parameters after the steps, also with the
    statistics replicated (today's layout, forced for the comparison)."""
    from infogeo.nn.curvature.blocks import AbsentBlock
    from .._helpers import load_benchmark
    held_bytes = load_benchmark("nn_scale").held_bytes
    _, X, y = problem("mlp")
    out = {}
    for layout in ("owner", "replicated"):
        model = shard(deep_mlp())
        opt = ig.nn.NaturalGradient(model, lr=0.05, curvature=curvature, damping=1e-2, fisher="exact",
                                    curvature_update_period=2, inverse_update_period=3, step_rule=step_rule)
        est = opt.preconditioner.estimate
        est.read_everywhere = layout == "replicated"
        for xb, yb in zip(X[:, part], y[:, part]):
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
        nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
        absent = [b for c in (est.curvature, est.solver) for b in c.blocks if isinstance(b, AbsentBlock)]
        total = sum(math.prod(s) * 8 for s in est.curvature.stat_shapes().values())
        params = [p for p in model.parameters()]
        exclude = {id(p) for p in params} | {p.to_local().untyped_storage().data_ptr() for p in params}
        out[layout] = {"owner_only": est.owner_only, "owners": list(est.owners),
                       "keys": sorted(est.curvature.stats()), "solver_keys": sorted(est.solver.stats()),
                       "bytes": nbytes(est.curvature.stats().values()),
                       "absent_bytes": nbytes(t for b in absent for t in b.template.stats().values()),
                       "absent": [i for i, b in enumerate(est.curvature.blocks) if isinstance(b, AbsentBlock)],
                       "total": total, "held": held_bytes(torch, est, exclude),
                       "bases": sorted(est.solver.bases()),
                       "params": torch.cat([p.full_tensor().detach().reshape(-1) for p in params]).tolist()}
    return out


def nan_statistics(part, curvature="kfac"):
    """A NaN in this rank's (rank 1's) local statistics of the first block at the second refresh, owner-only and
    replicated (forced): ``{layout: (the warnings' messages, the whole parameters after the steps)}``, and the
    owner-only run without the NaN (``curvature``: K-FAC's or EKFAC's)."""
    import warnings
    rank = torch.distributed.get_rank()
    out = {}
    for layout in ("owner", "replicated", "clean"):
        model, X, y = problem("mlp")
        model = shard(model)
        opt = ig.nn.NaturalGradient(model, lr=0.05, curvature=curvature, damping=1e-2, fisher="exact",
                                    curvature_update_period=2, inverse_update_period=3, step_rule="graft")
        est = opt.preconditioner.estimate
        est.read_everywhere = layout == "replicated"
        local = est.local

        def poisoned(step, *args, local=local, **kw):
            new, template = local(step, *args, **kw)
            if new is not None and step == 2 and rank == 1 and layout != "clean":
                next(iter(new[0].stats().values())).mul_(float("nan"))   # in place: the block keeps its rows
            return new, template
        est.local = poisoned
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for xb, yb in zip(X[:, part], y[:, part]):
                opt.zero_grad()
                F.cross_entropy(model(xb), yb).backward()
                opt.step()
        whole = torch.cat([p.full_tensor().detach().reshape(-1) for p in model.parameters()])
        out[layout] = ([str(w.message) for w in caught if "curvature statistics" in str(w.message)], whole.tolist(),
                       est.owner_only)
    return out


def failed_basis(part):
    """EKFAC's owner-only statistics: rank 1's eigendecompositions fail at the refresh of step 2, where each owner
    factorises its blocks before broadcasting their bases.  Per step, ``"ok"`` or the exception's type and message
    (every rank raises, after the broadcasts: none waits on another), and the whole parameters after the steps."""
    from infogeo.nn.curvature import eigenbasis
    rank = torch.distributed.get_rank()
    model, X, y = problem("mlp")
    model = shard(model)
    opt = ig.nn.NaturalGradient(model, lr=0.05, curvature="ekfac", damping=1e-2, fisher="exact",
                                curvature_update_period=2, inverse_update_period=3, step_rule="graft")
    own = eigenbasis._factor_eig

    def failing(*args, **kwargs):
        raise RuntimeError("the eigendecomposition failed on this rank")
    outcomes = []
    for step, (xb, yb) in enumerate(zip(X[:, part], y[:, part])):
        if step == 2 and rank == 1:
            eigenbasis._factor_eig = failing
        try:
            outcomes.append(outcome(lambda: train_step(model, opt, xb, yb)))
        finally:
            eigenbasis._factor_eig = own
    return outcomes, torch.cat([p.full_tensor().detach().reshape(-1) for p in model.parameters()]).tolist()


def train_step(model, opt, xb, yb):
    opt.zero_grad()
    F.cross_entropy(model(xb), yb).backward()
    opt.step()


def bare_update(part):
    """A ``Preconditioner`` whose ``update()`` feeds a rule of one's own (one that reads the factorisation): whether
    it kept owner-only statistics and any block without them after 2 updates; and what ``update()`` says after
    ``step()`` solved with owner-only statistics."""
    from infogeo.nn.curvature.blocks import AbsentBlock
    model, X, y = problem("mlp")
    model = shard(model)
    out = {}
    for first in ("update", "step"):
        pre = ig.nn.Preconditioner(model, "kfac", 1e-2, fisher="exact", kl_clip=None)
        for xb, yb in zip(X[:2, part], y[:2, part]):
            model.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            if first == "update":
                pre.update()
            else:
                pre.step()
        out[first] = (pre.estimate.owner_only, any(isinstance(b, AbsentBlock) for b in pre.solver.blocks),
                      outcome(pre.update))
        pre.remove()
    return out


def hsdp_checkpoint(rank, world):
    """:func:`.test_distributed_checkpoint.resumed` under HSDP: the largest difference between the run that went on
    and the one saved by ``dcp.save`` and resumed (flattened optimizer state dict)."""
    import tempfile
    import torch.distributed as dist
    from . import test_distributed_checkpoint as dcp_tests
    X, y = dcp_tests.problem()
    part = slice(rank * dcp_tests.N // world, (rank + 1) * dcp_tests.N // world)
    paths = [tempfile.mkdtemp() if rank == 0 else None]
    dist.broadcast_object_list(paths)
    return dcp_tests.resumed(X[:, part], y[:, part], True, paths[0], lambda m: shard(m, hybrid=True))


def resume(part, step_rule=None, at=None):
    """Largest difference between 8 steps in one go and 4 steps, state_dict, a new optimizer loading it, 4 more
    (with the default step rule, or ``step_rule``); ``at``: resumed after ``at`` steps with the default periods
    (the step after the load then does not refresh the statistics)."""
    def run(model, opt, X, y):
        for xb, yb in zip(X, y):
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()

    def fresh(state=None):
        model = shard(problem("mlp")[0])
        if state is not None:
            model.load_state_dict(state)
        periods = {} if at is not None else {"curvature_update_period": 2, "inverse_update_period": 3}
        return model, ig.nn.NaturalGradient(model, lr=0.05, curvature="kfac", damping=1e-2, fisher="exact",
                                            **periods, **({} if step_rule is None else {"step_rule": step_rule}))
    _, X, y = problem("mlp")
    X, y = torch.cat([X[:, part]] * 2), torch.cat([y[:, part]] * 2)
    k = len(X) // 2 if at is None else at
    model, opt = fresh()
    run(model, opt, X, y)
    half, half_opt = fresh()
    run(half, half_opt, X[:k], y[:k])
    saved = half_opt.state_dict()
    kinds = sorted({type(v).__name__ for st in saved["state"].values() if isinstance(st, dict) for v in st.values()})
    again, again_opt = fresh(half.state_dict())
    again_opt.load_state_dict(saved)
    run(again, again_opt, X[k:], y[k:])
    whole = [torch.cat([p.full_tensor().reshape(-1) for p in m.parameters()]) for m in (model, again)]
    return float((whole[0] - whole[1]).abs().max()), kinds


def outcome(fn):
    """``("ok", None)`` or the exception's type name and message."""
    try:
        fn()
        return ("ok", None)
    except Exception as exc:   # checked by the test
        return (type(exc).__name__, str(exc))


def refusals():
    """What needs the model evaluated at its (sharded) parameters is refused at construction; so is tensor
    parallelism under fully_shard."""
    out = {"dense": outcome(lambda: ig.nn.NaturalGradient(shard(mlp()), curvature="dense")),
           "cg": outcome(lambda: ig.nn.NaturalGradient(shard(mlp()), curvature="cg")),
           "partial": outcome(lambda: ig.nn.NaturalGradient(partial())),
           "quadratic": outcome(lambda: ig.nn.NaturalGradient(shard(mlp()), quadratic_model=True)),
           "adaptive": outcome(lambda: ig.nn.NaturalGradient(shard(mlp()), adaptive_damping=True)),
           # not refused: the default step rule of K-FAC and EKFAC falls back to graft under FSDP2
           "default_rule": [ig.nn.NaturalGradient(shard(mlp()), curvature=c).step_rule for c in ("kfac", "ekfac")]}
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
        model = parallelize_module(mlp(), mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fully_shard(model, mesh=mesh["dp"])
    except Exception:   # this torch cannot build it on CPU
        return out
    out["tensor_parallel"] = outcome(lambda: ig.nn.NaturalGradient(model))
    return out


def partial():
    """Some layers sharded, the root and the last layer not: their gradients would not be averaged over the ranks."""
    from torch.distributed.fsdp import fully_shard
    model = mlp().double()
    fully_shard(model[0])
    fully_shard(model[2])
    return model


def mc_fisher(part):
    model, X, y = problem("mlp")
    losses, params, _ = train(shard(model), X[:, part].repeat(2, 1, 1), y[:, part].repeat(2, 1), "kfac",
                              fisher="mc")
    return losses, params


def bf16(part):
    """FSDP2 mixed precision: bf16 compute, float32 parameters; statistics and factorisations in float32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy
    model, X, y = problem("mlp", torch.float32)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    losses, _, opt = train(shard(model, policy), X[:, part].repeat(2, 1, 1), y[:, part].repeat(2, 1), "kfac",
                           step_rule="graft")
    stats = opt.preconditioner.curvature.stats()
    return (losses, sorted({str(t.dtype) for t in stats.values()}),
            sorted({str(p.dtype) for p in opt.preconditioner.params}))


def expected(case):
    """The one-process run on the whole batch, unsharded."""
    model, X, y = problem(case[2])
    start = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    _, params, _ = train(model, X, y, *case)
    params = torch.tensor(params, dtype=torch.float64)
    assert (params - start).abs().max() > 1e-2   # the parameters moved
    return params


@pytest.fixture(scope="module")
def two(two_ranks):
    return {r: two_ranks[r]["fsdp"] for r in range(2)}


def test_two_ranks_of_fsdp2_equal_one_process_on_the_whole_batch(two):
    for case in CASES:
        want = expected(case)
        for r in range(2):
            got = torch.tensor(two[r][case][1], dtype=torch.float64)
            assert torch.allclose(got, want, rtol=0, atol=1e-8), (case, r, (got - want).abs().max())


def test_transformer_layers_sharded_each_in_a_unit_of_their_own_equal_one_process(two):
    """The attention (Kronecker factors from the attention run again) and the LayerNorms (per-example vjps) read
    their parameters' values, which FSDP2 shards again after each layer's forward: the hooks copy them as the
    forward used them (before, a raw DTensor error from the LayerNorm).  Also with each layer under activation
    checkpointing (non-reentrant), which runs the layers again in the backward."""
    for case in CASES_UNITS:
        want = expected(case)
        for r in range(2):
            got = torch.tensor(two[r][("units",) + case][1], dtype=torch.float64)
            assert torch.allclose(got, want, rtol=0, atol=1e-8), (case, r, (got - want).abs().max())


def test_weights_used_outside_their_modules_under_fsdp2_equal_one_process(two):
    """FSDP2 puts unsharded parameters in place of the sharded ones for the forward: a use of those outside their
    module (MultiheadAttention's out_proj.weight, a tied read-out) is seen, and takes the whole-network route."""
    for case in CASES_FOREIGN:
        want = expected(case)
        for r in range(2):
            got = torch.tensor(two[r][case][1], dtype=torch.float64)
            assert torch.allclose(got, want, rtol=0, atol=1e-8), (case, r, (got - want).abs().max())


def test_four_ranks_of_fsdp2_equal_one_process_on_the_whole_batch(four_ranks):
    results = {r: four_ranks[r]["fsdp"] for r in range(4)}
    for case in CASES_4:
        want = expected(case)
        for r in range(4):
            got = torch.tensor(results[r][case][1], dtype=torch.float64)
            assert torch.allclose(got, want, rtol=0, atol=1e-8), (case, r, (got - want).abs().max())


def test_hybrid_sharding_on_four_ranks_equals_one_process_on_the_whole_batch(four_ranks):
    """HSDP (``fully_shard`` on a 2-D mesh: sharded over one axis, replicated over the other) trains exactly."""
    for case in CASES_HSDP:
        want = expected(case)
        for r in range(4):
            got = torch.tensor(four_ranks[r]["fsdp"][("hsdp",) + case][1], dtype=torch.float64)
            assert torch.allclose(got, want, rtol=0, atol=1e-8), (case, r, (got - want).abs().max())


def test_a_distributed_checkpoint_resumes_bit_identically_under_hybrid_sharding(four_ranks):
    """``torch.distributed.checkpoint`` under HSDP on 4 ranks (moments sharded over one axis, replicated over the
    other): saved after 4 steps, resumed in a new model and optimizer, the run continues exactly."""
    for r in range(4):
        assert four_ranks[r]["fsdp"]["hsdp_dcp"] == 0.0


def test_monte_carlo_fisher_trains_under_fsdp2(two):
    for r in range(2):
        losses, params = two[r]["mc"]
        assert all(torch.isfinite(torch.tensor(losses + params)))
        assert sum(losses[-3:]) < sum(losses[:3]), losses
    assert two[0]["mc"][1] == two[1]["mc"][1]   # one model: the ranks' whole parameters agree


def test_bf16_mixed_precision_trains_with_float32_statistics(two):
    for r in range(2):
        losses, stat_dtypes, param_dtypes = two[r]["bf16"]
        assert all(torch.isfinite(torch.tensor(losses))), losses
        assert sum(losses[-3:]) < sum(losses[:3]), losses
        assert stat_dtypes == ["torch.float32"] and param_dtypes == ["torch.float32"]


def test_what_needs_the_sharded_parameters_is_refused_at_construction(two):
    for r in range(2):
        got = two[r]["refused"]
        for key, words in (("dense", "curvature='dense'"), ("quadratic", "quadratic_model"),
                           ("adaptive", "adaptive_damping"),
                           ("tensor_parallel", "tensor parallelism")):
            if key in got:
                name, message = got[key]
                assert name == "ValueError" and words in message and "FSDP2" in message, (key, got[key])


def test_cg_under_fsdp2_is_refused_with_a_kind_that_fsdp2_accepts(two):
    for r in range(2):
        name, message = two[r]["refused"]["cg"]
        assert name == "ValueError" and "'kfac'" in message and "or 'dense'" not in message, message


def test_a_model_sharded_in_part_is_refused_with_what_to_shard(two):
    for r in range(2):
        name, message = two[r]["refused"]["partial"]
        assert name == "ValueError" and "'4.weight'" in message and "fully_shard(model)" in message, message


def test_the_default_step_rule_under_fsdp2_is_graft(two):
    for r in range(2):
        assert two[r]["refused"]["default_rule"] == ["graft", "graft"]


def test_a_checkpoint_resumes_bit_identically_under_fsdp2(two):
    for r in range(2):
        diff, kinds = two[r]["resume"]
        assert diff == 0.0
        assert "DTensor" in kinds   # the step rule's moments are sharded like the parameters
        diff, kinds = two[r]["resume_eigen"]   # eigen-adam: whole moments in the eigenbasis, the same on every rank
        assert diff == 0.0 and "DTensor" not in kinds
        diff, _ = two[r]["resume_between"]   # the structure recorded by the hooks: no forward of its own
        assert diff == 0.0
        diff, _ = two[r]["resume_eigen_between"]
        assert diff == 0.0


def check_owned(results, world, key="owned"):
    """Each rank holds the statistics (and factorisations) of its own blocks alone, its bytes of them are its
    blocks' share, and the steps equal those with the statistics replicated (to 1e-12: reduced to one rank rather
    than all-reduced)."""
    for rule in ("graft", "clip"):
        owner = [results[r][key][rule]["owner"] for r in range(world)]
        replicated = [results[r][key][rule]["replicated"] for r in range(world)]
        owners = owner[0]["owners"]
        assert len(owners) == 5 and all(o["owners"] == owners for o in owner), rule
        assert sorted(set(owners)) == list(range(world)), owners   # five blocks: every rank owns one at least
        total = owner[0]["total"]
        assert all(o["total"] == total for o in owner + replicated)
        for r in range(world):
            mine = [i for i, o in enumerate(owners) if o == r]
            o, rep = owner[r], replicated[r]
            assert o["owner_only"] and not rep["owner_only"], (rule, r)
            assert sorted({int(k.split("/")[0]) for k in o["keys"]}) == mine, (rule, r, o["keys"])
            assert {int(k.split("/")[0]) for k in o["solver_keys"]} <= set(mine), (rule, r)
            assert {int(k.split("/")[0]) for k in o["bases"]} <= set(mine), (rule, r, o["bases"])
            a, b = (torch.tensor(x["params"], dtype=torch.float64) for x in (o, rep))
            assert torch.allclose(a, b, rtol=0, atol=1e-12), (rule, r, (a - b).abs().max())
            assert o["absent"] == [i for i in range(5) if i not in mine] and o["absent_bytes"] == 0, (rule, r)
            assert rep["bytes"] == total and rep["absent"] == [], (rule, r)   # today's layout: every factor
            assert 0 < o["bytes"] < total
            # what the whole estimate holds shrinks by the factors (and their factorisations) of the others' blocks
            assert o["held"] <= rep["held"] - (total - o["bytes"]), (rule, r, o["held"], rep["held"])
        # the owned shares make up the whole, each rank's its blocks' (the owners balance factorisation costs)
        assert sum(o["bytes"] for o in owner) == total, rule


def test_each_rank_holds_only_its_own_blocks_statistics_under_fsdp2(two):
    """K-FAC, ``placement="memory"``, ``"graft"`` and ``"clip"``: the statistics are reduced to each block's owner,
    and the other ranks keep only the block's structure (an ``AbsentBlock``: no tensor of its factors' sizes)."""
    check_owned(two, 2)


def test_each_of_four_ranks_holds_only_its_own_blocks_statistics_under_fsdp2(four_ranks):
    check_owned({r: four_ranks[r]["fsdp"] for r in range(4)}, 4)


def test_each_rank_holds_only_its_own_blocks_ekfac_statistics_under_fsdp2(two):
    """EKFAC, ``placement="memory"``, ``"graft"`` and ``"clip"``: factors, bases and scales of a block live on its
    owner alone (the bases are broadcast at a refresh for every rank to measure its scales in, then dropped), and
    the steps equal those with the statistics replicated."""
    check_owned(two, 2, "owned_ekfac")


def test_each_of_four_ranks_holds_only_its_own_blocks_ekfac_statistics_under_fsdp2(four_ranks):
    check_owned({r: four_ranks[r]["fsdp"] for r in range(4)}, 4, "owned_ekfac")


def test_an_owners_failed_eigendecomposition_is_raised_on_every_rank_after_the_bases_broadcasts(two):
    """EKFAC's owner-only refresh: rank 1 cannot factorise its blocks; it still takes part in the broadcasts of the
    bases (placeholders), then raises its error, and rank 0 a PeerFailure naming it (agreed: no rank waits on
    another); the statistics are left as they were, and the next steps go on alike on both ranks."""
    (o0, p0), (o1, p1) = two[0]["failed_basis"], two[1]["failed_basis"]
    assert o0[:2] == o1[:2] == [("ok", None)] * 2 and o0[3] == o1[3] == ("ok", None), (o0, o1)
    assert o1[2][0] == "RuntimeError" and "eigendecomposition failed" in o1[2][1], o1[2]
    assert o0[2][0] == "PeerFailure" and "[1]" in o0[2][1], o0[2]
    assert p0 == p1


@pytest.mark.parametrize("key", ["nan", "nan_ekfac"])
def test_a_nan_in_one_ranks_statistics_is_discarded_on_every_rank_as_when_replicated(two, key):
    """A NaN in rank 1's local statistics of one block: its owner finds it after the reduce, the ranks agree, and
    every rank discards the refresh with the same warning, as with the statistics replicated; the parameters after
    the steps equal the replicated run's (and differ from those of the run without the NaN).  K-FAC and EKFAC
    (whose NaN factors are found before any basis is broadcast)."""
    for r in range(2):
        got = two[r][key]
        owner, replicated, clean = got["owner"], got["replicated"], got["clean"]
        assert owner[2] and not replicated[2]
        assert len(owner[0]) == 1 and "contain NaN or inf; they are discarded" in owner[0][0], owner[0]
        assert owner[0] == replicated[0] and clean[0] == []
        a, b, c = (torch.tensor(x[1], dtype=torch.float64) for x in (owner, replicated, clean))
        assert torch.allclose(a, b, rtol=0, atol=1e-12), (a - b).abs().max()
        assert (a - c).abs().max() > 1e-6
    assert two[0][key]["owner"][1] == two[1][key]["owner"][1]


def test_a_preconditioner_that_updates_keeps_every_blocks_statistics_and_one_that_solved_refuses_to(two):
    """``Preconditioner.update()`` serves rules that read the whole factorisation: its statistics stay replicated
    under FSDP2; after ``step()`` solved with owner-only statistics, ``update()`` raises on every rank, saying so."""
    for r in range(2):
        got = two[r]["update"]
        assert got["update"] == (False, False, ("ok", None)), got["update"]
        owner_only, absent, (name, message) = got["step"]
        assert owner_only and absent and name == "ValueError" and "owner rank alone" in message, got["step"]


def test_fsdp2_is_recognised_and_other_dtensors_refused_without_a_process_group():
    from infogeo.nn import fsdp
    assert fsdp.managed(mlp()) == {} and not fsdp.is_dtensor(torch.zeros(2))
    t = torch.arange(3.0)
    assert fsdp.gather({"a": t})["a"] is t and fsdp.shard_like(t, t) is t and fsdp.local(t) is t
