r"""Checkpoints of a :class:`~.preconditioner.Preconditioner` that ``torch.load(weights_only=True)`` reads
(and the checks of :class:`~.natural_gradient.NaturalGradient`'s own entries, :func:`check_optimizer`), the
one way to copy an optimizer (:class:`NotCopyable`).

The state is tensors and Python numbers only: the step count, the damping and its base, the
Monte Carlo generator's state (a byte tensor) and the rank it was saved on, the curvature statistics, the solver's
own statistics where they are not the curvature's (``{"<block>/<factor>": tensor}``; a solver refers to the current
factors between factorisations, and those are saved once), the factorisations it holds (``"basis"``), the number of
curvature statistics and which of these three sections it has (``"counts"``, ``"sections"``), and what the
checkpoint is checked against when loaded: the curvature kind and the Fisher (their names as
byte tensors), the preconditioned parameters' shapes, and the number of ranks.  No entry is ``None`` and every
name is a key, so ``torch.distributed.checkpoint`` saves it as it is, flattened or not (a flattened state dict
comes back with the dotted names split into nested dicts: :func:`joined` makes them names again).  The curvature
*objects* are not saved: their structure (which block covers which parameters) comes from the
model, so at the first step after loading it is rebuilt on that step's batch and the saved
statistics are put into it; the saved factorisations are adopted and any other one is recomputed from its saved
statistics (deterministically, hence a bit-identical continuation).

Loading checks everything before it changes anything, raises one ``ValueError`` naming the
first mismatch, copies what it keeps (the caller's dict is neither changed nor aliased), and
converts floating statistics to the preconditioner's ``factor_dtype`` (a checkpoint of a float32
model loaded into a float64 one).  The number of ranks may differ: the statistics are the
same on every rank, or, owner-only (:attr:`~.estimate.CurvatureEstimate.owner_only`), each rank's are those of its
own blocks (``"counts"`` names all of them), whose union a distributed checkpoint saves and from which each rank
takes its own blocks' (a rank's own checkpoint resumes that rank); a rank continues the Monte Carlo stream it
loads if it was saved on that rank, and otherwise (a distributed checkpoint keeps one rank's copy of what the
ranks hold alike) one of its own drawn from it.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional, Tuple

import torch

from .. import distributed as dd
from .settings import check_betas, check_group_lr, positive_number

__all__ = ["checkpoint", "check", "check_optimizer", "own_entry", "joined", "normalised", "check_param_states",
           "load", "check_fits", "restore", "NotCopyable", "keep_saved_dtypes", "tensor_count"]

_CURVATURE_KEYS = ("curvature", "solver")
#: the sections of statistics and factorisations (noted when saved, :func:`_counted`)
_SECTIONS = _CURVATURE_KEYS + ("basis",)
#: the sections keyed by parameter or block names
_NAMED = _SECTIONS + ("shapes",)
_REQUIRED = ("step", "damping", "rng")
#: the per-parameter entries of each step rule (:mod:`.step`) that come together: the grafted rule's (told apart
#: by its own entries), Adam's in an eigenbasis (whose basis and gradient statistics need its moments)
_GRAFT = ("exp_avg", "exp_avg_sq", "direction_avg", "graft_step")
_EIGEN = ("exp_avg", "exp_avg_sq", "step")
_COUNTS = ("step", "graft_step")


class NotCopyable:
    """Refuses ``copy.copy``, ``copy.deepcopy`` and pickling with a ``TypeError`` that says what to do instead.

    An optimizer's hooks are on its own model and its statistics come from them: a copy would lack its
    preconditioner (``torch.optim.Optimizer`` pickles only its defaults, state and groups) or record the
    original model, not the copy.  The copy is a new optimizer built on the (copied or loaded) model, with
    the checkpoint (``state_dict()``) of this one loaded.
    """

    def __reduce_ex__(self, protocol: Any) -> Any:
        name = type(self).__name__
        raise TypeError(f"a {name} cannot be copied or pickled (its hooks are on its own model, its statistics "
                        f"come from them): save or copy its state_dict() instead, and load_state_dict() it into a "
                        f"new {name} built on the copied or loaded model")


#: a name's bytes, padded with zeros to one length: a distributed checkpoint loads into tensors of the saved sizes,
#: so another kind's name reaches :func:`check` (which names the mismatch) instead of failing the load on its size
_NAME_BYTES = 32


def name_tensor(text: str) -> torch.Tensor:
    raw = list(text.encode())
    return torch.tensor(raw + [0] * (_NAME_BYTES - len(raw)), dtype=torch.uint8)


def _text(t: Any) -> str:
    return bytes(t.tolist()).rstrip(b"\0").decode() if isinstance(t, torch.Tensor) else str(t)


def checkpoint(pre) -> Dict[str, Any]:
    """The preconditioner's state as tensors and numbers."""
    est = pre.estimate
    out: Dict[str, Any] = {"step": pre.state["step"], **pre.damper.state_dict(), "rng": est.generator.get_state(),
                           "rank": dd.rank(), "kind": name_tensor(pre.kind), "fisher": name_tensor(pre.fisher),
                           "world_size": dd.world_size(),
                           "shapes": {n: torch.tensor(p.shape, dtype=torch.int64) for n, p in zip(pre.names, pre.params)},
                           "unfilled": est.unfilled}
    if est.loaded is not None:  # saved again before the next step: what was loaded
        out.update({k: {n: t.clone() for n, t in v.items()} for k, v in est.loaded.items()})
        return _counted(out, est.loaded_total if est.owner_only else None)
    current = est.curvature.stats() if est.curvature is not None and hasattr(est.curvature, "stats") else {}
    for key, c in (("curvature", est.curvature), ("solver", est.solver)):
        if c is not None and hasattr(c, "stats"):
            stats = current if c is est.curvature else c.stats()   # (a factor held as its factorisation: rebuilt)
            if key == "solver":   # what it shares with the curvature is saved once, there
                stats = {k: t for k, t in stats.items() if current.get(k) is not t}
            out[key] = {k: t.detach().clone() for k, t in stats.items()}
    if est.solver is not None and hasattr(est.solver, "bases"):
        # EKFAC between factorisations: the basis is not that of the solver's own (later) factors
        out["basis"] = {k: t.detach().clone() for k, t in est.solver.bases().items()}
    total = len(est.curvature.stat_shapes()) if est.owner_only and est.curvature is not None else None
    return _counted(out, total)


def _counted(out: Dict[str, Any], total: Optional[int] = None) -> Dict[str, Any]:
    """``out`` with the number of curvature statistics (``"counts"``, the same on every rank) and which sections of
    statistics it has (``"sections"``, 1 or 0: under ``placement="memory"`` a rank holds the factorisations of its
    own blocks only, so their number is not a rank's to state).  A state dict that
    ``torch.distributed.checkpoint.load`` filled has only the entries it held before, which :func:`check` tells
    from a checkpoint that has none; and a flattened distributed state dict drops an empty section, which
    :func:`normalised` tells from one that was not there.  ``total``: the statistics of the whole curvature where
    this rank holds those of its own blocks only (owner-only statistics)."""
    out["counts"] = {"curvature": len(out.get("curvature", ())) if total is None else total}
    out["sections"] = {k: int(k in out) for k in _SECTIONS}
    return out


def joined(tree: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """A dict of tensors keyed by dotted names (parameters ``"0.weight"``, blocks ``"encoder.0/A"``) whose names
    were split at their dots into nested dicts (``torch.distributed.checkpoint``'s flattened optimizer state
    dict is rebuilt that way), keyed by whole names again; one without nesting is copied as it is."""
    out: Dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, Mapping):
            out.update(joined(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def normalised(saved: Mapping[str, Any]) -> Dict[str, Any]:
    """A preconditioner checkpoint with its sections of names as flat dicts (:func:`joined`), an empty section that
    a flattened state dict dropped back (:func:`_counted`); the others as given."""
    out = {k: joined(v) if k in _NAMED and isinstance(v, Mapping) else v for k, v in saved.items()}
    sections = out.get("sections")
    if isinstance(sections, Mapping):
        for k in _SECTIONS:
            if sections.get(k) == 1 and k not in out:
                out[k] = {}
    return out


def check(pre, saved: Any) -> Dict[str, Any]:
    """Raise a ValueError naming the first way ``saved`` does not fit ``pre``; else ``saved`` :func:`normalised`."""
    if not isinstance(saved, Mapping):
        raise TypeError(f"a Preconditioner checkpoint is the dict of its state_dict(), got {type(saved).__name__}")
    saved = normalised(saved)
    missing = [k for k in _REQUIRED if k not in saved]
    if missing:
        raise ValueError(f"not a Preconditioner checkpoint: keys {missing} are missing (it has {sorted(saved)[:8]})")
    step, damping = saved["step"], saved["damping"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"checkpoint: step must be an integer >= 0, got {step!r}")
    for key in ("damping", "base_damping"):
        v = saved.get(key, damping)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
            raise ValueError(f"checkpoint: {key} must be a finite number > 0, got {v!r}")
    unfilled = saved.get("unfilled", 0.0)
    if isinstance(unfilled, bool) or not isinstance(unfilled, (int, float)) or not 0.0 <= unfilled <= 1.0:
        raise ValueError(f"checkpoint: 'unfilled' must be a number in [0, 1], got {unfilled!r}")
    rank = saved.get("rank", 0)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"checkpoint: 'rank' must be an integer >= 0, got {rank!r}")
    est = pre.estimate
    # owner-only statistics with a structure known: this rank needs those of its own blocks
    need = est.owned_keys(est.curvature) if est.owner_only and est.curvature is not None else None
    _check_counts(saved, need, est.owner_only)
    rng = saved["rng"]
    try:
        torch.Generator(pre.estimate.generator.device).set_state(torch.as_tensor(rng).cpu())
    except Exception as exc:
        raise ValueError(f"checkpoint: 'rng' is not a random generator state for device "
                         f"{pre.estimate.generator.device} ({exc})") from None
    for key, mine in (("kind", pre.kind), ("fisher", pre.fisher)):
        if key in saved and _text(saved[key]) != mine:
            raise ValueError(f"checkpoint: saved with {key}={_text(saved[key])!r}, this preconditioner uses "
                             f"{mine!r}; build it with the checkpoint's {key} to resume")
    if "shapes" in saved:
        shapes = {n: tuple(int(d) for d in s) for n, s in saved["shapes"].items()}
        mine = {n: tuple(p.shape) for n, p in zip(pre.names, pre.params)}
        if set(shapes) != set(mine):
            raise ValueError(f"checkpoint: parameters {sorted(set(shapes) ^ set(mine))} are in one of the checkpoint "
                             f"and the model only")
        wrong = [f"{n}: {shapes[n]} saved, {mine[n]} here" for n in mine if shapes[n] != mine[n]]
        if wrong:
            raise ValueError(f"checkpoint: parameter shapes differ ({'; '.join(wrong)})")
    for key in _CURVATURE_KEYS:
        if saved.get(key) is not None:
            _finite_tensors(f"the statistics in {key!r}", saved[key])
    if saved.get("basis") is not None:
        _finite_tensors("the factorisations in 'basis'", saved["basis"])
    layouts = [("checkpoint's curvature", saved.get("curvature")), ("checkpoint's solver", _solver_stats(saved))]
    given = [(what, {k: tuple(t.shape) for k, t in s.items()}) for what, s in layouts if s is not None]
    current = pre.estimate.curvature
    if current is not None and hasattr(current, "stat_shapes"):
        given.append(("this preconditioner's curvature", current.stat_shapes()))
    if need is not None:   # a rank's own blocks (or more): each statistic one of this structure's, of its shape
        mine = given.pop()[1]
        for what, shapes in given:
            diff = [k for k in shapes if mine.get(k) != shapes[k]]
            if diff:
                raise ValueError(f"checkpoint: the {what} statistics and this preconditioner's curvature differ "
                                 f"(first differences: {diff[:4]}); was it saved for another architecture?")
        given = []
    for what, shapes in given[1:]:
        if shapes != given[0][1]:
            diff = sorted(set(shapes) ^ set(given[0][1])) or [k for k in shapes if shapes[k] != given[0][1][k]]
            raise ValueError(f"checkpoint: the {given[0][0]} and the {what} statistics differ (first differences: "
                             f"{diff[:4]}); was it saved for another architecture?")
    return saved


def _finite_tensors(what: str, tree: Any) -> None:
    """Raise a ValueError unless ``tree`` is a dict of finite floating tensors (``what``: its name in the message)."""
    if not isinstance(tree, Mapping):
        raise ValueError(f"checkpoint: {what} must be a dict of tensors, got {type(tree).__name__}")
    bad = [k for k, t in tree.items()
           if not (isinstance(t, torch.Tensor) and t.is_floating_point() and bool(torch.isfinite(t).all()))]
    if bad:
        raise ValueError(f"checkpoint: {what}: {bad[:4]} are not finite floating tensors (got "
                         f"{', '.join(type(tree[k]).__name__ for k in bad[:4])})")


def check_param_states(states: Mapping[Any, Any], key: str) -> None:
    """Raise a ValueError naming the first per-parameter step-rule state of an optimizer checkpoint (``states``,
    the entries other than the optimizer's own ``key``) that the step rules (:mod:`.step`) cannot continue from:
    not a dict of finite floating tensors, a rule's entries missing (:data:`_GRAFT`, :data:`_EIGEN`), a negative
    second moment, or a step count that is not one number >= 0."""
    for i, s in states.items():
        if i == key:
            continue
        what = f"the step rule's state of parameter {i!r}"
        _finite_tensors(what, s)
        rule = _GRAFT if {"direction_avg", "graft_step"} & set(s) else _EIGEN if set(_EIGEN + (
            "U_A", "U_G", "L", "R")) & set(s) else ()
        missing = [k for k in rule if k not in s]
        if missing:
            raise ValueError(f"checkpoint: {what} lacks {missing} (it has {sorted(s)})")
        if "exp_avg" in s and s["exp_avg"].shape != s["exp_avg_sq"].shape:
            raise ValueError(f"checkpoint: {what}: exp_avg {tuple(s['exp_avg'].shape)} and exp_avg_sq "
                             f"{tuple(s['exp_avg_sq'].shape)} differ in shape")
        if "exp_avg_sq" in s and bool((s["exp_avg_sq"] < 0).any()):
            raise ValueError(f"checkpoint: {what}: the second moment exp_avg_sq has negative entries")
        for count in _COUNTS:
            if count in s and (s[count].numel() != 1 or float(s[count]) < 0):
                raise ValueError(f"checkpoint: {what}: the count {count!r} must be one number >= 0, got {s[count]}")


def _take_a_step(what: str) -> str:
    """What to do where a distributed load left out what a checkpoint holds (``what``: statistics, moments)."""
    return (f"torch.distributed.checkpoint.load fills only the entries the state dict it is given already has, "
            f"and an optimizer has its {what} once it has taken a step: take one step (on any batch: the load "
            f"replaces all it changes) before get_state_dict() of the optimizer you load into")


def tensor_count(states: Mapping[Any, Any]) -> int:
    """The tensors in per-parameter states (what a distributed load may leave out: :func:`check_optimizer`)."""
    return sum(isinstance(t, torch.Tensor) for s in states.values() if isinstance(s, Mapping) for t in s.values())


def _check_counts(saved: Mapping[str, Any], need: Optional[list] = None, owner_only: bool = False) -> None:
    """Raise a ValueError if a section of statistics holds fewer tensors than were saved in it (``"counts"``).

    Owner-only statistics (:attr:`~.estimate.CurvatureEstimate.owner_only`): ``need``, the keys of this rank's own
    blocks where its structure is known, must all be there; else, where this preconditioner keeps owner-only
    statistics, some (a rank's own state dict, whose blocks are checked at the next step, :func:`check_fits`); else
    (statistics replicated here) every one that was saved."""
    counts, sections = saved.get("counts", {}), saved.get("sections", {})
    for key, value, low, high in (("counts", counts, 0, math.inf), ("sections", sections, 0, 1)):
        if not isinstance(value, Mapping) or any(isinstance(n, bool) or not isinstance(n, int) or not low <= n <= high
                                                 for n in value.values()):
            raise ValueError(f"checkpoint: {key!r} must map sections to integers in [{low}, {high}], got {value!r}")
    have = {k: len(saved.get(k) or {}) for k in counts}
    if need is not None:
        lacking = [k for k in need if k not in (saved.get("curvature") or {})]
        short = {"curvature": (len(need) - len(lacking), f"the {len(need)} of this rank's blocks")} if lacking else {}
    else:
        short = {k: (have[k], f"{n}") for k, n in counts.items() if (have[k] == 0 if owner_only else have[k] < n) and n}
    if short:
        got = ", ".join(f"{k}: {h} of {n}" for k, (h, n) in short.items())
        split = " Under FSDP2 a rank's own state_dict() holds the statistics of its own blocks alone (the " \
                "others' are kept by their owners): resume each rank from its own, or save and load them all " \
                "with torch.distributed.checkpoint (dcp.save keeps their union)." if have.get("curvature") else ""
        raise ValueError(f"checkpoint: it holds fewer statistics than were saved ({got}).{split} "
                         f"{_take_a_step('statistics')}")


def _solver_stats(saved: Mapping[str, Any]) -> Any:
    """The solver's statistics of a checkpoint, those it shared with the curvature (saved there) included."""
    solver, curvature = saved.get("solver"), saved.get("curvature")
    if not isinstance(solver, Mapping) or not isinstance(curvature, Mapping):
        return solver
    return {**curvature, **solver}


def load(pre, saved: Dict[str, Any]) -> None:
    """Take a :func:`checkpoint` (checked first, copied); the statistics wait for :func:`restore` at the next step."""
    saved = check(pre, saved)
    est = pre.estimate
    pre.state["step"] = int(saved["step"])
    pre.damper.load_state_dict({"damping": float(saved["damping"]),
                                "base_damping": float(saved.get("base_damping", saved["damping"]))})
    est.generator.set_state(torch.as_tensor(saved["rng"]).cpu().clone())
    if saved.get("rank", dd.rank()) != dd.rank():
        # another rank's Monte Carlo stream (a distributed checkpoint saves one rank's): a stream of this rank's
        # own, drawn from it, so that the ranks do not sample alike
        base = int(torch.randint(0, 2 ** 62, (), generator=est.generator))
        est.generator.manual_seed(base + 1_000_003 * dd.rank())
    # (a checkpoint of an earlier version has no entry: its average is taken as full, as that version used it)
    est.unfilled = float(saved.get("unfilled", 0.0 if "curvature" in saved else 1.0))
    est.loaded = {k: {n: t.detach().clone() for n, t in saved[k].items()} for k in _CURVATURE_KEYS + ("basis",)
                  if k in saved}
    est.loaded_total = int(saved.get("counts", {}).get("curvature", len(saved.get("curvature") or {})))
    if "solver" in est.loaded:   # the statistics it shared with the curvature: the same (copied) tensors
        est.loaded["solver"] = _solver_stats(est.loaded)
    est.curvature = est.solver = None
    est.arm(pre.state["step"])   # the next batch: its statistics if the step refreshes them, else its structure


def check_fits(est, template) -> None:
    """Raise a ValueError unless the loaded statistics fit ``template``, the curvature structure of this batch."""
    expected = template.stat_shapes()
    need = est.owned_keys(template) if est.owner_only else None   # this rank's own blocks (owner-only)
    for key, stats in est.loaded.items():
        if key not in _CURVATURE_KEYS:
            continue   # the EKFAC basis: checked against the factors when adopted
        got = {k: tuple(t.shape) for k, t in stats.items()}
        if need is None and got != expected:
            diff = sorted(set(got) ^ set(expected)) or [k for k in got if got[k] != expected[k]]
        else:
            diff = [k for k in got if expected.get(k) != got[k]]
        if diff:
            raise ValueError(f"checkpoint: the saved {key} statistics do not fit this model's curvature "
                             f"(first differences: {diff[:4]}); was it saved for another architecture?")
        lacking = [k for k in need or () if k not in got] if key == "curvature" else []
        if lacking:
            raise ValueError(f"checkpoint: it lacks the statistics {lacking[:4]} of the blocks this rank owns (a "
                             f"rank's own state_dict() holds those of its blocks only: resume each rank from its "
                             f"own with the same number of ranks, or save and load them all with "
                             f"torch.distributed.checkpoint)")


def restore(est, template, damping: float) -> None:
    """Put the loaded statistics (checked by :func:`check_fits`) into ``template``."""
    loaded, est.loaded = est.loaded, None
    device = template._reference().device
    kept = None
    if est.owner_only:   # this rank's own blocks' statistics, the others' structure
        template = est.owning(template)
        kept = set(est.owned_keys(template, est.owners))
    for key in _CURVATURE_KEYS:
        if key not in loaded:
            continue
        stats = template.with_stats({k: t.to(device=device, dtype=est.factor_dtype) for k, t in loaded[key].items()
                                     if kept is None or k in kept})
        if key == "curvature":
            est.curvature = stats
        else:
            adopted = "basis" in loaded and hasattr(stats, "adopt_bases")
            if adopted:   # the factorisations the solver had (older than its factors, or at another damping)
                stats.adopt_bases({k: t.to(device=device) for k, t in loaded["basis"].items()}, est.compute_dtype)
            est.solver = est.factorise(stats, None if adopted else damping)


def keep_saved_dtypes(optimizer: torch.optim.Optimizer, saved: Mapping[str, Any]) -> None:
    """After ``optimizer.load_state_dict(saved)`` (``saved`` a private copy): its per-parameter state that torch
    narrowed back in the precision it was saved in.  ``torch.optim.Optimizer.load_state_dict`` casts
    floating-point state to the parameter's dtype, and the step rules keep the moments of half-precision
    parameters in float32 (or bfloat16, ``state_dtype``): rounded to the parameters' dtype, a resumed run would
    differ from the one that went on.
    (A widening cast, a float32 checkpoint into a float64 model, is kept; the step rules bring state kept in
    another dtype than the parameters' back to theirs at the next step.)"""
    ids = [i for g in saved["param_groups"] for i in g["params"]]
    for i, p in zip(ids, (p for g in optimizer.param_groups for p in g["params"])):
        mine = optimizer.state.get(p)
        if mine is None:
            continue
        for key, t in saved["state"].get(i, {}).items():
            now = mine.get(key)
            if isinstance(t, torch.Tensor) and t.is_floating_point() and isinstance(now, torch.Tensor) and \
                    now.is_floating_point() and _narrower(now.dtype, t.dtype):
                mine[key] = t.to(device=now.device)


def _narrower(a: torch.dtype, b: torch.dtype) -> bool:
    """Whether ``a`` holds less than ``b`` of precision or of range (bfloat16 into float16 loses range)."""
    fa, fb = torch.finfo(a), torch.finfo(b)
    return fa.eps > fb.eps or fa.max < fb.max or fa.tiny > fb.tiny


def first_param(groups: Any) -> Any:
    """The first parameter (or its index) of the first group that has one: where a NaturalGradient keeps its own
    entry (torch takes an empty group); ``None`` where no group has one."""
    return next((p for g in groups if isinstance(g, Mapping) for p in g.get("params") or ()), None)


def own_entry(state_dict: Mapping[str, Any], key: str) -> Tuple[Any, Dict[Any, Any]]:
    """``(the optimizer's own entry, the per-parameter states without it)`` of an optimizer checkpoint: the entry
    ``key`` in the state of the first parameter, of the first group that has one (where
    :meth:`.NaturalGradient.state_dict` puts it, as ``torch.optim.LBFGS`` keeps its own), or, as earlier versions
    saved it, beside the parameters' states."""
    states = state_dict["state"]
    if key in states:
        return states[key], {k: v for k, v in states.items() if k != key}
    groups = state_dict["param_groups"]
    first = first_param(groups)
    if first is None or not isinstance(states.get(first), Mapping):
        return None, dict(states)
    rest = dict(states)
    rest[first] = {k: v for k, v in states[first].items() if k != key}
    return states[first].get(key), rest


#: a key of the per-parameter state that only one step rule keeps: the rule of a checkpoint that does not name it
_RULE_KEYS = (("momentum_buffer", "clip"), ("direction_avg", "graft"), ("step", "eigen-adam"))


def saved_rule(own: Mapping[str, Any], states: Mapping[Any, Any]) -> Optional[str]:
    """The step rule a :class:`~.natural_gradient.NaturalGradient` checkpoint was saved with: named in its own entry
    ``own``, or (earlier versions) told by its parameters' ``states``; ``None`` when nothing tells (no step taken)."""
    if "step_rule" in own:
        return _text(own["step_rule"])
    keys = {k for st in states.values() if isinstance(st, Mapping) for k in st}
    return next((rule for k, rule in _RULE_KEYS if k in keys), None)


def check_optimizer(pre, param_groups, state_dict: Any, key: str, rule: Optional[str] = None):
    """A :class:`~.natural_gradient.NaturalGradient` checkpoint checked against the optimizer (its preconditioner
    ``pre``, ``param_groups``) before anything changes: ``(the preconditioner's state, the previous step, the
    groups' lrs as the floats checked, the per-parameter states)``, or one ``ValueError`` naming the first
    mismatch; ``key``: the optimizer's own entry (:func:`own_entry`); ``rule``: the optimizer's step rule, which the
    checkpoint's must be (another's state would be read as this one's).  The parameters may be named by their
    indices (``state_dict()``) or by any other distinct keys, as ``torch.distributed.checkpoint``'s
    ``set_state_dict`` names them (their qualified names)."""
    if not isinstance(state_dict, Mapping) or not {"state", "param_groups"} <= set(state_dict) or \
            not isinstance(state_dict["state"], Mapping) or not isinstance(state_dict["param_groups"], list):
        raise ValueError("not an optimizer checkpoint: expected the dict of NaturalGradient.state_dict() "
                         "with keys 'state' and 'param_groups'")
    mine, states = own_entry(state_dict, key)
    if not isinstance(mine, Mapping) or not isinstance(mine.get("preconditioner"), Mapping):
        raise ValueError(f"not a NaturalGradient checkpoint: its state has no {key!r} entry with the "
                         "preconditioner's state (saved by another optimizer?)")
    pre_state = dict(mine["preconditioner"])
    if "base_damping" in mine:   # written by earlier versions next to the preconditioner's state
        pre_state.setdefault("base_damping", mine["base_damping"])
    pre_state = check(pre, pre_state)
    check_param_states(states, key)
    was = saved_rule(mine, states)
    if rule is not None and was is not None and was != rule:
        raise ValueError(f"checkpoint: saved with step_rule={was!r}, this optimizer uses {rule!r}: its moments are "
                         f"another rule's; load it into a NaturalGradient built with step_rule={was!r}")
    held = tensor_count(states)
    saved = mine.get("moments", 0)
    if isinstance(saved, bool) or not isinstance(saved, int) or saved < 0:
        raise ValueError(f"checkpoint: 'moments' must be an integer >= 0, got {saved!r}")
    if held < saved:
        raise ValueError(f"checkpoint: its parameters' states hold {held} of the {saved} tensors saved. "
                         f"{_take_a_step('moments')}")
    prev = mine.get("previous_step")
    shapes = {n: tuple(p.shape) for n, p in zip(pre.names, pre.params)}
    if prev is not None:
        prev = joined(prev) if isinstance(prev, Mapping) else prev
        _finite_tensors("the previous step", prev)
        if set(prev) != set(shapes) or any(tuple(prev[n].shape) != shapes[n] for n in shapes):
            raise ValueError("checkpoint: its previous step does not match this optimizer's parameters")
    groups = state_dict["param_groups"]
    try:
        if len(groups) != len(param_groups) or any(len(a["params"]) != len(b["params"])
                                                    for a, b in zip(groups, param_groups)):
            raise ValueError(f"{[len(g['params']) for g in groups]} parameters per group saved, "
                             f"{[len(g['params']) for g in param_groups]} here")
        ids = [i for g in groups for i in g["params"]]
        if any(isinstance(i, bool) or not isinstance(i, (int, str)) for i in ids) or len(set(ids)) != len(ids):
            raise ValueError(f"the groups' params must be distinct indices or names, got {ids}")
        stray = [k for k in states if k not in ids]
        if stray:
            raise ValueError(f"the state has entries {stray[:4]} that no group's params name")
        # the groups' checks at construction and at each step (the params: this optimizer's, the saved are ids)
        lrs = [check_group_lr(g["lr"], here["params"]) for g, here in zip(groups, param_groups)]
        for g in groups:
            positive_number("a parameter group's momentum", g["momentum"], inclusive=True, maximum=1.0)
            if "betas" in g:
                check_betas(g["betas"], "a parameter group's betas")
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint: its parameter groups do not fit this optimizer ({exc})") from None
    return pre_state, prev, lrs, states
