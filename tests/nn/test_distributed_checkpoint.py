"""``torch.distributed.checkpoint`` (DCP) with :class:`~infogeo.nn.NaturalGradient`, as FSDP2's users save and resume.

``get_state_dict(model, opt)`` names an optimizer's state by the parameters' qualified names and so asks that
all of it be per-parameter: the optimizer's own entry (the preconditioner's statistics, the previous step) is in
its first parameter's state.  A run saved with ``dcp.save`` after 4 steps and resumed with ``dcp.load`` and
``set_state_dict`` into a new model and optimizer must continue exactly as the run that went on (8 steps in one
go), with the optimizer state dict flattened (``flatten_optimizer_state_dict=True``, torchtitan's choice) or not:
in one process, and on 2 gloo ranks under DDP and under FSDP2 (the ranks spawned by :mod:`.test_distributed`).
A state dict that ``dcp.load`` could not fill (taken from an optimizer that has no state yet) is refused when set,
with what to do, instead of resuming with fresh statistics unseen.  Under FSDP2 with K-FAC or EKFAC and ``"graft"``
each rank saves the statistics (and factorisations) of its own blocks (owner-only): their union resumes on 2 ranks,
on 4 (and a 4-rank one on 2), in one process, and a DDP checkpoint resumes under FSDP2.
"""
import tempfile

import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from infogeo.nn.optim import state as ng_state  # noqa: E402

dcp = pytest.importorskip("torch.distributed.checkpoint")
sd_api = pytest.importorskip("torch.distributed.checkpoint.state_dict")
F = torch.nn.functional
STEPS, N = 8, 16


def problem():
    g = torch.Generator().manual_seed(1)
    return torch.randn(STEPS, N, 4, generator=g, dtype=torch.float64), torch.randint(0, 3, (STEPS, N), generator=g)


def build(wrap=None, **kw):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 5), torch.nn.Tanh(),
                                torch.nn.Linear(5, 3)).double()
    net = model if wrap is None else wrap(model)
    settings = dict(lr=0.05, damping=1e-2, fisher="exact", curvature_update_period=2, inverse_update_period=3)
    return net, ig.nn.NaturalGradient(net, **{**settings, **kw})


def run(net, opt, X, y):
    for xb, yb in zip(X, y):
        opt.zero_grad()
        F.cross_entropy(net(xb), yb).backward()
        opt.step()


def whole(net):
    return torch.cat([(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().reshape(-1)
                      for p in net.parameters()])


def resumed(X, y, flat, path, wrap=None, **kw):
    """Largest difference between 8 steps in one go and 4 steps, ``dcp.save``, a new model and optimizer (one step
    on another batch: the structure the load fills), ``dcp.load``, ``set_state_dict``, 4 more."""
    options = sd_api.StateDictOptions(flatten_optimizer_state_dict=flat)
    net, opt = build(wrap, **kw)
    run(net, opt, X, y)
    half, half_opt = build(wrap, **kw)
    run(half, half_opt, X[:4], y[:4])
    msd, osd = sd_api.get_state_dict(half, half_opt, options=options)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
    again, again_opt = build(wrap, **kw)
    run(again, again_opt, X[-1:], y[-1:])
    msd, osd = sd_api.get_state_dict(again, again_opt, options=options)
    dcp.load({"model": msd, "optim": osd}, checkpoint_id=path)
    sd_api.set_state_dict(again, again_opt, model_state_dict=msd, optim_state_dict=osd, options=options)
    run(again, again_opt, X[4:], y[4:])
    return float((whole(net) - whole(again)).abs().max())


def refused(path, flat, wrap=None, **kw):
    """The message of the ValueError that a state dict of a fresh optimizer, filled by ``dcp.load``, raises."""
    options = sd_api.StateDictOptions(flatten_optimizer_state_dict=flat)
    net, opt = build(wrap, **kw)
    msd, osd = sd_api.get_state_dict(net, opt, options=options)
    dcp.load({"model": msd, "optim": osd}, checkpoint_id=path)
    try:
        sd_api.set_state_dict(net, opt, model_state_dict=msd, optim_state_dict=osd, options=options)
    except ValueError as exc:
        return str(exc)
    return None


#: (flattened, settings): bit-identical resumption (the exact Fisher: no Monte Carlo stream)
CASES = [(False, {}), (True, {}), (True, {"step_rule": "graft"}), (False, {"step_rule": "eigen-adam"}),
         (True, {"step_rule": "eigen-adam", "curvature": "ekfac"}),
         # EKFAC's owner-only statistics under FSDP2 (factors, scales and the bases they were measured in)
         (True, {"step_rule": "graft", "curvature": "ekfac"}), (False, {"step_rule": "clip", "curvature": "ekfac"})]


def run_dcp(rank, world):
    """This rank's DCP runs under DDP and under FSDP2 (called by the spawned ranks of :mod:`.test_distributed`)."""
    import torch.distributed as dist
    part = slice(rank * N // world, (rank + 1) * N // world)
    X, y = problem()
    X, y = X[:, part], y[:, part]
    paths = [tempfile.mkdtemp() if rank == 0 else None]
    dist.broadcast_object_list(paths)
    out, k = {}, 0

    def where():
        nonlocal k
        k += 1
        return f"{paths[0]}/{k}"

    wraps = {"ddp": torch.nn.parallel.DistributedDataParallel}
    try:
        from torch.distributed.fsdp import fully_shard
        wraps["fsdp"] = lambda m: fully_shard(m)
    except ImportError:   # this torch has no FSDP2
        pass
    for name, wrap in wraps.items():
        for flat, kw in CASES:
            out[(name, flat, tuple(sorted(kw.items())))] = resumed(X, y, flat, where(), wrap, **kw)
        # the Monte Carlo Fisher: one rank's stream saved (DCP keeps one copy of what the ranks hold alike); the
        # ranks that load another rank's stream draw one of their own from it
        path = where()
        out[(name, "mc")] = resumed(X, y, True, path, wrap, fisher="mc")
        out[(name, "fresh")] = refused(path, True, wrap, fisher="mc")
        out[(name, "saved")] = saved_at_half(X, y, where(), wrap)
        out[(name, "sections")] = own_sections(X, y, wrap)
        out[(name, "sections_ekfac")] = own_sections(X, y, wrap, "ekfac")
    if "fsdp" in wraps:   # saved under DDP (every rank every statistic), resumed under FSDP2 (each its own blocks')
        out[("fsdp", "from_ddp")] = resumed_from(out[("ddp", "saved")][0], X, y, wraps["fsdp"])
    return out


def own_sections(X, y, wrap, curvature="kfac"):
    """``(the keys of the curvature statistics in this rank's state dict after 4 steps, its counts, the error of
    loading it into an optimizer of the same model unwrapped, which keeps every block's statistics, the keys of
    the factorisations it holds)``."""
    half, half_opt = build(wrap, step_rule="graft", curvature=curvature)
    run(half, half_opt, X[:4], y[:4])
    pre = half_opt.state_dict()["state"][0]["natural_gradient"]["preconditioner"]
    _, plain = build(step_rule="graft", curvature=curvature)
    try:
        plain.load_state_dict(half_opt.state_dict())
        error = None
    except ValueError as exc:
        error = str(exc)
    return sorted(pre["curvature"]), pre["counts"], error, sorted(pre.get("basis", ()))


def resumed_from(path, X, y, wrap, curvature="kfac"):
    """The whole parameters after a new model and optimizer under ``wrap`` (one step on another batch, then
    ``dcp.load`` of ``path``, saved after 4 steps by :func:`saved_at_half`, flattened) take the last 4 steps."""
    options = sd_api.StateDictOptions(flatten_optimizer_state_dict=True)
    again, again_opt = build(wrap, step_rule="graft", curvature=curvature)
    run(again, again_opt, X[-1:], y[-1:])
    msd, osd = sd_api.get_state_dict(again, again_opt, options=options)
    dcp.load({"model": msd, "optim": osd}, checkpoint_id=path)
    sd_api.set_state_dict(again, again_opt, model_state_dict=msd, optim_state_dict=osd, options=options)
    run(again, again_opt, X[4:], y[4:])
    return whole(again).tolist()


def saved_at_half(X, y, path, wrap=None):
    """``(path, the parameters after 8 steps in one go)``: the run saved by ``dcp.save`` after 4 steps to ``path``
    (flattened), for a resumption elsewhere (:func:`test_a_two_rank_dcp_checkpoint_resumes_in_one_process`)."""
    options = sd_api.StateDictOptions(flatten_optimizer_state_dict=True)
    net, opt = build(wrap, step_rule="graft")
    run(net, opt, X, y)
    half, half_opt = build(wrap, step_rule="graft")
    run(half, half_opt, X[:4], y[:4])
    msd, osd = sd_api.get_state_dict(half, half_opt, options=options)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
    return path, whole(net).tolist()


def across(rank, port, queue, world, path, save, curvature="kfac"):
    """A spawned rank (:func:`.test_distributed.spawn_ranks`) under FSDP2: 4 steps of ``curvature`` saved to
    ``path`` by ``dcp.save`` (``save``), or that checkpoint resumed (:func:`resumed_from`); puts ``(rank, the whole
    parameters or, saving, whether its statistics were owner-only)``."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from .test_distributed import PG_TIMEOUT
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=PG_TIMEOUT)
    try:
        torch.set_num_threads(1)
        part = slice(rank * N // world, (rank + 1) * N // world)
        X, y = problem()
        X, y = X[:, part], y[:, part]
        if save:
            net, opt = build(fully_shard, step_rule="graft", curvature=curvature)
            run(net, opt, X[:4], y[:4])
            options = sd_api.StateDictOptions(flatten_optimizer_state_dict=True)
            msd, osd = sd_api.get_state_dict(net, opt, options=options)
            dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
            queue.put((rank, opt.preconditioner.estimate.owner_only))
        else:
            queue.put((rank, resumed_from(path, X, y, fully_shard, curvature)))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("curvature", ["kfac", "ekfac"])
@pytest.mark.parametrize("saved_on, resumed_on", [(2, 4), (4, 2)])
def test_an_fsdp2_dcp_checkpoint_resumes_on_another_number_of_ranks(tmp_path, saved_on, resumed_on, curvature):
    """Owner-only statistics saved by 2 (4) FSDP2 ranks, each its own blocks', resume on 4 (2), whose blocks have
    other owners: DCP's union holds every block's (EKFAC's bases too), and the run continues as one process's on the
    whole batch (to 1e-8)."""
    fsdp_api = pytest.importorskip("torch.distributed.fsdp")
    if not hasattr(fsdp_api, "fully_shard"):
        pytest.skip("this torch has no fully_shard (FSDP2)")
    from .test_distributed import spawn_ranks
    path = str(tmp_path)
    assert all(spawn_ranks(saved_on, across, (path, True, curvature)).values())
    got = spawn_ranks(resumed_on, across, (path, False, curvature))
    X, y = problem()
    net, opt = build(step_rule="graft", curvature=curvature)
    run(net, opt, X, y)
    for r in range(resumed_on):
        assert float((torch.tensor(got[r], dtype=torch.float64) - whole(net)).abs().max()) < 1e-8, r


@pytest.fixture(scope="module")
def two(two_ranks):
    return {r: two_ranks[r]["dcp"] for r in range(2)}


def test_dcp_resumes_bit_identically_on_two_ranks_under_ddp_and_fsdp2(two):
    names = sorted({key[0] for key in two[0]})
    fsdp_api = pytest.importorskip("torch.distributed.fsdp")
    assert names == (["ddp", "fsdp"] if hasattr(fsdp_api, "fully_shard") else ["ddp"])
    for r in range(2):
        for name in names:
            for flat, kw in CASES:
                assert two[r][(name, flat, tuple(sorted(kw.items())))] == 0.0, (name, flat, kw)


def test_dcp_with_the_monte_carlo_fisher_resumes_finite_and_a_fresh_optimizer_is_refused(two):
    for r in range(2):
        for name in sorted({key[0] for key in two[0]}):
            assert 0.0 <= two[r][(name, "mc")] < 1.0   # resumed (another stream on one rank), not diverged
            message = two[r][(name, "fresh")]
            assert message is not None and "take one step" in message and "get_state_dict" in message


def test_a_two_rank_dcp_checkpoint_resumes_in_one_process(two):
    """Saved by 2 ranks (DDP, and FSDP2 with its moments sharded), resumed by one process on the whole batch: DCP
    gathers the shards and the factorisations each rank held of its own blocks; the run continues as the
    2-rank run went on (to 1e-8: one process equals 2 ranks to that, float64).  The step rule is named: FSDP2's
    default is ``"graft"``, one process's ``"eigen-adam"``."""
    X, y = problem()
    for name in sorted({key[0] for key in two[0]}):
        path, went_on = two[0][(name, "saved")]
        options = sd_api.StateDictOptions(flatten_optimizer_state_dict=True)
        net, opt = build(step_rule="graft")
        run(net, opt, X[-1:], y[-1:])
        msd, osd = sd_api.get_state_dict(net, opt, options=options)
        dcp.load({"model": msd, "optim": osd}, checkpoint_id=path)
        sd_api.set_state_dict(net, opt, model_state_dict=msd, optim_state_dict=osd, options=options)
        run(net, opt, X[4:], y[4:])
        assert float((whole(net) - torch.tensor(went_on, dtype=torch.float64)).abs().max()) < 1e-8, name


@pytest.mark.parametrize("section", ["sections", "sections_ekfac"])
def test_under_fsdp2_each_rank_saves_its_own_blocks_statistics_and_dcp_keeps_their_union(two, section):
    """K-FAC and EKFAC with ``"graft"`` under FSDP2 keep each block's statistics on its owner: each rank's state
    dict holds those of its own blocks (counts: every block's; EKFAC's factorisations, its bases, too), the two are
    disjoint and make up every statistic (the DCP resumptions above, on 2 ranks and in one process, read that
    union); one rank's alone is refused by an optimizer that needs them all, saying what to do.  Under DDP every
    rank holds them all, as before."""
    if ("fsdp", section) not in two[0]:
        pytest.skip("this torch has no fully_shard (FSDP2)")
    keys = [set(two[r][("fsdp", section)][0]) for r in range(2)]
    counts = two[0][("fsdp", section)][1]
    assert keys[0] and keys[1] and not keys[0] & keys[1], keys
    assert counts == {"curvature": len(keys[0] | keys[1])} == two[1][("fsdp", section)][1]
    bases = [set(two[r][("fsdp", section)][3]) for r in range(2)]
    assert not bases[0] & bases[1], bases
    for r in range(2):   # a rank's factorisations are those of its own blocks
        assert {k.split("/")[0] for k in bases[r]} <= {k.split("/")[0] for k in keys[r]}, (r, bases[r])
        error = two[r][("fsdp", section)][2]
        assert error is not None and "fewer statistics" in error and "torch.distributed.checkpoint" in error, error
        ddp_keys, ddp_counts, ddp_error, _ = two[r][("ddp", section)]
        assert ddp_counts == counts and len(ddp_keys) == counts["curvature"] and ddp_error is None


def test_a_dcp_checkpoint_saved_under_ddp_resumes_under_fsdp2(two):
    """Saved under DDP (every rank holds every block's statistics), loaded under FSDP2, where each rank takes its
    own blocks' statistics: the run continues as the DDP run went on (to 1e-8: the two equal one process)."""
    if ("fsdp", "from_ddp") not in two[0]:
        pytest.skip("this torch has no fully_shard (FSDP2)")
    went_on = torch.tensor(two[0][("ddp", "saved")][1], dtype=torch.float64)
    for r in range(2):
        got = torch.tensor(two[r][("fsdp", "from_ddp")], dtype=torch.float64)
        assert float((got - went_on).abs().max()) < 1e-8, r


@pytest.mark.parametrize("flat", [False, True])
@pytest.mark.parametrize("kw", [{}, {"step_rule": "graft"}, {"step_rule": "eigen-adam"}, {"fisher": "mc"},
                                {"curvature": "ekfac", "fisher": "mc"}])
def test_dcp_resumes_bit_identically_in_one_process(tmp_path, flat, kw):
    X, y = problem()
    assert resumed(X, y, flat, str(tmp_path), **kw) == 0.0   # one rank: its own Monte Carlo stream


@pytest.mark.parametrize("flat", [False, True])
def test_set_state_dict_of_the_state_dict_in_memory_resumes_bit_identically(flat):
    options = sd_api.StateDictOptions(flatten_optimizer_state_dict=flat)
    X, y = problem()
    net, opt = build(fisher="mc")
    run(net, opt, X, y)
    half, half_opt = build(fisher="mc")
    run(half, half_opt, X[:4], y[:4])
    msd, osd = sd_api.get_state_dict(half, half_opt, options=options)
    keys = list(osd) if flat else list(osd["state"])
    assert all(isinstance(k, str) and "natural_gradient" not in k.split(".")[:2] for k in keys)
    again, again_opt = build(fisher="mc")
    run(again, again_opt, X[-1:], y[-1:])
    sd_api.set_state_dict(again, again_opt, model_state_dict=msd, optim_state_dict=osd, options=options)
    run(again, again_opt, X[4:], y[4:])
    assert torch.equal(whole(net), whole(again))


def test_a_fresh_optimizer_filled_by_dcp_load_is_refused_and_left_as_it_was(tmp_path):
    X, y = problem()
    net, opt = build()
    run(net, opt, X[:4], y[:4])
    msd, osd = sd_api.get_state_dict(net, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(tmp_path))
    fresh, fresh_opt = build()
    before = fresh_opt.state_dict()
    message = refused(str(tmp_path), False)
    assert "take one step" in message and "0 of" in message
    after = fresh_opt.state_dict()
    assert after["state"].keys() == before["state"].keys() and fresh_opt.preconditioner.steps == 0


def test_the_optimizers_own_entry_is_in_its_first_parameters_state():
    X, y = problem()
    net, opt = build()
    run(net, opt, X[:2], y[:2])
    saved = opt.state_dict()
    first = next(net.parameters())
    assert set(saved["state"]) == set(range(6))   # every parameter, an empty entry where nothing is kept
    assert "natural_gradient" in saved["state"][0] and "natural_gradient" in opt.state[first]
    pre = saved["state"][0]["natural_gradient"]["preconditioner"]
    assert pre["counts"] == {"curvature": 6} and pre["rank"] == 0
    assert pre["sections"] == {"curvature": 1, "solver": 1, "basis": 1} and pre["solver"] == {}
    # no None anywhere (DCP's flattened optimizer state dict takes tensors, numbers and dicts only)

    def values(tree):
        for v in tree.values():
            yield from values(v) if isinstance(v, dict) else [v]
    assert all(isinstance(v, (torch.Tensor, int, float)) for s in saved["state"].values() for v in values(s))


def test_names_split_at_their_dots_are_joined_again():
    t = torch.zeros(2)
    assert ng_state.joined({"0": {"weight": t, "bias/A": t}, "head.weight": t}) == {
        "0.weight": t, "0.bias/A": t, "head.weight": t}
    saved = ng_state.normalised({"sections": {"curvature": 1, "solver": 1, "basis": 0},
                                 "curvature": {"enc": {"0/A": t, "0/G": t}}, "shapes": {"0": {"weight": t}}})
    assert set(saved["curvature"]) == {"enc.0/A", "enc.0/G"} and saved["solver"] == {} and "basis" not in saved
    assert set(saved["shapes"]) == {"0.weight"}


def test_another_ranks_monte_carlo_stream_gives_a_stream_of_this_ranks_own():
    X, y = problem()
    net, opt = build(fisher="mc")
    run(net, opt, X[:3], y[:3])
    saved = opt.state_dict()
    pre = saved["state"][0]["natural_gradient"]["preconditioner"]
    streams = []
    for rank in (0, 1, 1):
        copy_ = {**pre, "rank": rank}
        _, other = build(fisher="mc")
        other.preconditioner.load_state_dict(copy_)
        streams.append(other.preconditioner.estimate.generator.get_state())
    assert torch.equal(streams[0], pre["rng"])                          # its own: continued
    assert not torch.equal(streams[1], pre["rng"]) and torch.equal(streams[1], streams[2])   # drawn, reproducibly


def test_a_distributed_checkpoint_of_another_fisher_is_refused_by_name(tmp_path):
    """The names of the kind and the Fisher have one size: ``dcp.load`` fills them, and the load names the
    mismatch (not DCP's size error on the name's bytes)."""
    X, y = problem()
    net, opt = build(fisher="mc")
    run(net, opt, X[:2], y[:2])
    msd, osd = sd_api.get_state_dict(net, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(tmp_path))
    other, other_opt = build(fisher="exact")
    run(other, other_opt, X[:1], y[:1])
    msd, osd = sd_api.get_state_dict(other, other_opt)
    dcp.load({"model": msd, "optim": osd}, checkpoint_id=str(tmp_path))
    with pytest.raises(ValueError, match="fisher='mc'"):
        sd_api.set_state_dict(other, other_opt, model_state_dict=msd, optim_state_dict=osd)


def test_the_preconditioner_goes_into_a_distributed_checkpoint_beside_its_optimizer(tmp_path):
    """``Preconditioner`` + AdamW: the preconditioner's ``state_dict()`` saved by ``dcp.save`` beside the model's
    and AdamW's, loaded into that of a preconditioner that has stepped: the run goes on bit for bit (Monte Carlo
    Fisher, one process)."""
    X, y = problem()

    def make():
        torch.manual_seed(0)
        model = build()[0]
        return model, ig.nn.Preconditioner(model, "kfac", 1e-2, kl_clip=None), torch.optim.AdamW(
            model.parameters(), lr=1e-2)

    def go(model, pre, opt, X, y):
        for xb, yb in zip(X, y):
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            pre.step()
            opt.step()
    model, pre, opt = make()
    go(model, pre, opt, X, y)
    half, half_pre, half_opt = make()
    go(half, half_pre, half_opt, X[:4], y[:4])
    msd, osd = sd_api.get_state_dict(half, half_opt)
    dcp.save({"model": msd, "optim": osd, "pre": half_pre.state_dict()}, checkpoint_id=str(tmp_path))
    again, again_pre, again_opt = make()
    go(again, again_pre, again_opt, X[-1:], y[-1:])
    msd, osd = sd_api.get_state_dict(again, again_opt)
    pre_sd = again_pre.state_dict()
    dcp.load({"model": msd, "optim": osd, "pre": pre_sd}, checkpoint_id=str(tmp_path))
    sd_api.set_state_dict(again, again_opt, model_state_dict=msd, optim_state_dict=osd)
    again_pre.load_state_dict(pre_sd)
    go(again, again_pre, again_opt, X[4:], y[4:])
    assert torch.equal(whole(model), whole(again))


@pytest.mark.parametrize("given", [3, None, [1, 2], "state"])
def test_a_preconditioner_checkpoint_that_is_not_a_dict_is_refused_with_a_type_error(given):
    """Checked before its names are joined again (a flattened state dict's nesting): a TypeError saying what a
    checkpoint is, not an AttributeError from inside the loader."""
    torch.manual_seed(0)
    pre = ig.nn.Preconditioner(build()[0], kl_clip=None)
    with pytest.raises(TypeError, match="a Preconditioner checkpoint is the dict of its state_dict"):
        pre.load_state_dict(given)
