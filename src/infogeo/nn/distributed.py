r"""Data-parallel curvature over ``torch.distributed``: averaged statistics, factorisations spread over ranks.

Every rank computes the curvature statistics of its own part of the batch.
Since each statistic is a mean over examples (:math:`A = \frac1N\sum_n \bar a_n\bar a_n^T`,
:math:`G`, a diagonal, a dense block), the mean over ranks of the per-rank means
is the statistic of the whole batch when the ranks hold equal shares (with unequal
shares each rank's statistics are weighted by its batch size first, so they remain the
union's; DDP's gradient, the plain mean of the ranks' mean gradients, is not reweighted); it is
taken by one all-reduce per dtype (the tensors are packed into one buffer, a
*bucket*, so there is one message instead of one per factor).

The factorisations (eigendecompositions, Cholesky factors) are then divided
among the ranks, each block going to the rank with the least work so far (its
cost taken as the cube of its size).  Two placements, after KAISA (Pauloski et
al., 2021):

``"memory"``
    each rank factorises and applies only its own blocks and broadcasts the
    preconditioned gradient of those blocks (memory-optimised: one copy of each
    factorisation in the whole job; a broadcast of the gradient every step);
``"comm"``
    each rank factorises its own blocks and broadcasts the factorisation, so every
    rank holds all of them and preconditions locally (communication-optimised: a
    broadcast only when the factorisations are refreshed).

Under FSDP2 the memory-optimised placement goes one step further for K-FAC and EKFAC: each block's statistics are
reduced to its owner alone (:func:`reduce_mean_to_owners`), which keeps their running average, so that each rank holds
the factors of its own blocks only (:attr:`~infogeo.nn.optim.estimate.CurvatureEstimate.owner_only`).

Every decision that changes what a step does next (skip it, undo it, retry the solve with a
larger damping, refuse the batch, stop on an error) is taken from flags agreed over the ranks
first (:func:`agree`: one all-gather of a few numbers), so the ranks never take different
branches and never wait on a collective another rank skipped.  An exception on one rank is
caught before the step's collectives and agreed too: that rank raises it, the others raise
:class:`PeerFailure` naming it.  What remains unbounded is a rank that dies or hangs outside
infogeo's code; the process group's ``timeout`` (``init_process_group(..., timeout=...)``)
bounds every collective there, as for DDP's own all-reduce.

Nothing here is used unless a process group with more than one rank is initialised.
"""
from __future__ import annotations

import heapq
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

__all__ = ["world_size", "rank", "share", "all_reduce_mean", "reduce_mean_to_owners", "all_reduce_min", "all_gather", "all_gather_objects", "assign_owners", "broadcast_from",
           "agree", "PeerFailure", "PLACEMENTS"]

PLACEMENTS = ("memory", "comm")


def world_size() -> int:
    """Number of ranks of the default process group (1 when none is initialised)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank in the default group (0 when none is initialised)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _buckets(tensors: Sequence[torch.Tensor]) -> Dict[tuple, List[int]]:
    groups: Dict[tuple, List[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.dtype, t.device), []).append(i)
    return groups


def _unpack(flat: torch.Tensor, tensors: Sequence[torch.Tensor], idx: List[int], out: list) -> None:
    """Views of ``flat`` shaped like ``tensors[i]`` for ``i`` in ``idx``, into ``out[i]``."""
    off = 0
    for i in idx:
        k = tensors[i].numel()
        out[i] = flat[off:off + k].view_as(tensors[i])
        off += k


def _bucketed(tensors: Sequence[torch.Tensor], op) -> List[torch.Tensor]:
    """Pack the tensors into one flat buffer per dtype and device, apply ``op`` to it in place, unpack."""
    out: List[Optional[torch.Tensor]] = [None] * len(tensors)
    for idx in _buckets(tensors).values():
        flat = torch.cat([tensors[i].reshape(-1) for i in idx])
        op(flat)
        _unpack(flat, tensors, idx, out)
    return out  # type: ignore[return-value]


def all_reduce_mean(tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """The mean over ranks of each tensor (one all-reduce per dtype and device); new tensors, inputs untouched."""
    n = world_size()

    def mean(flat):
        if n > 1:
            dist.all_reduce(flat)
            flat.div_(n)
    return _bucketed(tensors, mean)


def reduce_mean_to_owners(tensors: Sequence[torch.Tensor], owners: Sequence[int]) -> List[Optional[torch.Tensor]]:
    """The mean over ranks of each tensor, on its owner ``owners[i]`` alone (one reduce per owner, dtype and
    device, entered by every rank in the same order), ``None`` on the other ranks; inputs untouched."""
    n, me = world_size(), rank()
    out: List[Optional[torch.Tensor]] = [None] * len(tensors)
    for r in sorted(set(owners)):
        idx = [i for i, o in enumerate(owners) if o == r]

        def mean(flat, r=r):
            if n > 1:
                dist.reduce(flat, r)
            if r == me:
                flat.div_(n)
        part = _bucketed([tensors[i] for i in idx], mean)
        if r == me:
            for i, t in zip(idx, part):
                out[i] = t
    return out


class PeerFailure(RuntimeError):
    """Another rank met an error during the same step; this rank stops too instead of waiting for it."""


def agree(error: Optional[BaseException] = None, flags: Sequence[bool] = (),
          values: Sequence[float] = ()) -> Tuple[List[bool], torch.Tensor]:
    """Agree over the ranks on this rank's ``error``, ``flags`` and ``values`` (one all-gather of a few numbers).

    If any rank passed an ``error``, every rank raises: its own error where it happened, :class:`PeerFailure`
    naming the failed ranks elsewhere.  Else returns each flag OR-ed over the ranks and the ``values`` of every
    rank, ``(world_size, len(values))`` float64.  Without a process group: ``error`` is raised, ``flags`` and
    ``values`` come back as they are.
    """
    if world_size() == 1:   # nothing to agree on: no tensor work on the step's path
        if error is not None:
            raise error
        return [bool(f) for f in flags], torch.tensor([[float(v) for v in values]], dtype=torch.float64)
    row = torch.tensor([float(error is not None)] + [float(bool(f)) for f in flags] + [float(v) for v in values],
                       dtype=torch.float64)
    rows = torch.stack([r[0] for r in all_gather([row])])
    failed = [r for r in range(rows.shape[0]) if rows[r, 0] > 0]
    if failed:
        if error is not None:
            raise error
        raise PeerFailure(f"rank(s) {failed} failed during this optimizer step (their error is raised there); "
                          f"rank {rank()} stops too so that no rank waits on the others")
    k = len(flags)
    return [bool(rows[:, 1 + i].max() > 0) for i in range(k)], rows[:, 1 + k:]


def share(sizes: torch.Tensor) -> float:
    """This rank's weight for statistics averaged over the ranks, from every rank's batch size (``agree``'s rows):
    1 when the sizes are equal, else its size times the world size over the total."""
    if not bool((sizes != sizes[0]).any()):
        return 1.0
    if bool((sizes < 1).any()):
        raise ValueError(f"the ranks' batch sizes could not all be read ({sizes.tolist()}); "
                         f"the statistics cannot be weighted by them")
    return float(sizes[rank()] * len(sizes) / sizes.sum())


def row_shares(rows: Dict[str, float]) -> Dict[str, float]:
    """This rank's weight for each statistic that is a mean over rows of its own (``{key: this rank's row count}``,
    the same keys on every rank; e.g. K-FAC's input factor over the positions a loss keeps): its count times the
    world size over the total (one all-reduce).  A statistic no rank has rows for is left out."""
    if not rows or world_size() == 1:
        return {}
    keys = sorted(rows)
    mine = torch.tensor([float(rows[k]) for k in keys], dtype=torch.float64)
    mean = all_reduce_mean([mine])[0]
    return {k: float(m / t) for k, m, t in zip(keys, mine, mean) if t > 0}


def assign_owners(costs: Sequence[float], size: Optional[int] = None) -> List[int]:
    """A rank per item, greedily balancing the summed ``costs`` (largest first, to the least loaded rank)."""
    size = world_size() if size is None else int(size)
    heap = [(0.0, r) for r in range(size)]
    owner = [0] * len(costs)
    for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
        load, r = heapq.heappop(heap)
        owner[i] = r
        heapq.heappush(heap, (load + float(costs[i]), r))
    return owner


def broadcast_from(src: int, tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """``tensors`` as held by rank ``src``, on every rank (one broadcast per dtype and device).

    On the other ranks ``tensors`` only give the shapes and dtypes (their values are ignored).
    """
    return _bucketed(tensors, lambda flat: dist.broadcast(flat, src) if world_size() > 1 else None)


def all_reduce_min(t: torch.Tensor) -> torch.Tensor:
    """The elementwise minimum over ranks of ``t`` (a new tensor)."""
    out = t.clone()
    if world_size() > 1:
        dist.all_reduce(out, op=dist.ReduceOp.MIN)
    return out


def all_gather_objects(obj: Any) -> List[Any]:
    """Every rank's picklable ``obj``, by rank (``[obj]`` without a process group); for rare exchanges of
    descriptions, not for the tensors of every step."""
    if world_size() == 1:
        return [obj]
    out: List[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def all_gather(tensors: Sequence[torch.Tensor]) -> List[List[torch.Tensor]]:
    """Every rank's ``tensors`` (same shapes and dtypes on all ranks), by rank: one all-gather per dtype and device."""
    n = world_size()
    out: List[List[Optional[torch.Tensor]]] = [[None] * len(tensors) for _ in range(n)]
    for idx in _buckets(tensors).values():
        flat = torch.cat([tensors[i].reshape(-1) for i in idx])
        parts = [flat]
        if n > 1:
            parts = [torch.empty_like(flat) for _ in range(n)]
            dist.all_gather(parts, flat)
        for r, part in enumerate(parts):
            _unpack(part, tensors, idx, out[r])
    return out  # type: ignore[return-value]


def _solve_own(block, g, damping, rows, errors: list):
    """``block.solve`` on its owner (from the batch's ``rows`` when given).  A failure becomes NaN, so that the
    broadcasts go on and every rank sees it; an error other than a failed factorisation is also kept in
    ``errors`` (agreed by the caller)."""
    from ..linalg import NotPositiveDefiniteError
    try:
        return block.solve(g, damping) if rows is None else block.solve_rows(*rows, damping)
    except Exception as exc:
        if not isinstance(exc, NotPositiveDefiniteError):
            errors.append(exc)
        return {n: torch.full_like(g[n], float("nan")) for n in block.names}


def solve_on_owners(blocks, owners: Sequence[int], g: Dict[str, torch.Tensor], damping: float,
                    rows: Optional[Sequence[Optional[tuple]]] = None,
                    errors: Optional[list] = None) -> Dict[str, torch.Tensor]:
    r"""Memory-optimised placement: each rank applies :math:`(C_b + \lambda I)^{-1}` for its blocks; broadcast.

    ``rows[i]``, when not ``None``, are rows ``(b, a)`` of the whole batch that give block ``i``'s gradient
    (:class:`~infogeo.nn.optim.rows.RowCapture`): its owner solves from them.  Errors met on this rank's
    blocks (other than a failed factorisation, which gives NaN) are appended to ``errors``.
    """
    me = rank()
    rows = [None] * len(blocks) if rows is None else rows
    errors = [] if errors is None else errors
    out: Dict[str, torch.Tensor] = {}
    for r in sorted(set(owners)):
        mine = [(b, rw) for b, o, rw in zip(blocks, owners, rows) if o == r]
        names = [n for b, _ in mine for n in b.names]
        if r == me:
            for b, rw in mine:
                out.update(_solve_own(b, g, damping, rw, errors))
            local = [out[n] for n in names]
        else:
            local = [torch.empty_like(g[n]) for n in names]
        out.update(zip(names, broadcast_from(r, local)))
    return out


def share_factorisations(blocks, owners: Sequence[int], damping: float) -> None:
    """Communication-optimised placement: owners factorise their Kronecker blocks, every rank receives them.

    Other blocks (diagonal; dense blocks, whose Cholesky factor depends on the damping; EKFAC's) are
    factorised where they are used.  An owner that fails sends placeholders, and the failure is agreed
    (:func:`agree`) before anything uses them: every rank raises.
    """
    me = rank()
    error: Optional[BaseException] = None
    for r in sorted(set(owners)):
        mine = [b for b, o in zip(blocks, owners) if o == r and getattr(b, "shares_factorisation", False)]
        local: List[torch.Tensor] = []
        sizes = []
        for b in mine:
            tensors = None
            if r == me and error is None:
                try:
                    tensors = b.factorisation(damping)
                except Exception as exc:
                    error = exc
            tensors = b.factorisation_like() if tensors is None else tensors
            sizes.append(len(tensors))
            local.extend(tensors)
        shared = broadcast_from(r, local)
        for b, k in zip(mine, sizes):
            if error is None:
                b.adopt(shared[:k], damping)
            shared = shared[k:]
    agree(error)
