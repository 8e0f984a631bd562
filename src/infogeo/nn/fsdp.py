r"""Models sharded with FSDP2 (``torch.distributed.fsdp.fully_shard``): what the natural gradient needs of them.

``fully_shard`` keeps each parameter as a DTensor sharded over the ranks (by default its rows,
``Shard(0)``); before a module's forward it all-gathers the module's parameters, so the layer
inputs and output gradients the hooks record (:mod:`.optim.hooks`) are those of the whole layer
on this rank's batch, exactly as under ``DistributedDataParallel``.  The curvature statistics
(K-FAC's factors :math:`A, G`, a diagonal, EKFAC's scales) are therefore computed and averaged over the ranks
as under DDP (:mod:`.distributed`): they are per layer, not per shard.  Every rank holds them, except K-FAC's and
EKFAC's under ``placement="memory"`` with a step rule that only reads the directions: each block's are reduced to
its owner, which alone keeps them (:attr:`.optim.estimate.CurvatureEstimate.owner_only`).
Statistics of the gradients themselves (Shampoo's and SOAP's kinds) are formed from the gathered
gradients, once the ranks have agreed that the step goes ahead.

After the backward each ``.grad`` is this rank's shard of the batch-mean gradient (FSDP2
reduce-scatters; with hybrid sharding, a 2-D mesh, it also all-reduces across the replicas, and the
same holds).  A Kronecker block's direction :math:`G^{-1} W A^{-1}` mixes all rows of the
gradient :math:`W`, so :func:`gather` assembles each gradient (one all-gather per parameter,
``full_tensor``), the direction is computed as under DDP (on the blocks' owners, see
``placement``), and :func:`shard_like` keeps this rank's shard of it, with the gradient's own
placements (no communication).  The step then acts on the local shards, as torch's optimizers do
on FSDP2 parameters; the step rule's state (``"graft"``'s moments, momentum) is sharded like the
parameters.

Bytes communicated per step on top of FSDP2's own (each rank, :math:`P` gradient entries, :math:`R`
ranks, ``b`` bytes each): the all-gather of the gradients, :math:`bP(R-1)/R` received, plus the
placement's traffic as under DDP (``"memory"``: the broadcast of the directions, :math:`bP` in total
from the owners; ``"comm"``: nothing per step, the factorisations when they are refreshed).
DDP's own all-reduce of the gradients moves :math:`2bP(R-1)/R` per rank (ring).

During the backward that records the statistics, the Monte Carlo or exact Fisher's columns are
back-propagated through the model's graph inside the user's backward (:mod:`.optim.hooks`); that
pass runs FSDP2's backward hooks, so it keeps the layers unsharded (:func:`no_reshard_in_backward`)
for the user's backward to find them, which reshards each as it passes: on the steps that refresh the
statistics (every ``curvature_update_period``) the whole model is unsharded for part of the backward,
as with ``reshard_after_forward=False``; the empirical Fisher needs no such pass on 2-D outputs.  Tensor parallelism under ``fully_shard`` (parameters that
were DTensors before) is not supported (each rank's layers would compute a slice of the outputs).
"""
from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Tuple, TypeGuard

import torch

if TYPE_CHECKING:  # pragma: no cover
    from torch.distributed.tensor import DTensor

__all__ = ["class_names", "is_dtensor", "managed", "unsharded", "local", "gather", "shard_like", "shards_like",
           "no_reshard_in_backward"]


def class_names(obj: Any) -> Tuple[str, ...]:
    """The qualified names of ``obj``'s classes (recognises torch.distributed's types without importing them)."""
    return _type_names(type(obj))  # type: ignore[arg-type]  # a class is hashable


@functools.lru_cache(maxsize=None)
def _type_names(cls: type) -> Tuple[str, ...]:
    # once per type: this is asked of every gradient every step
    return tuple(f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__)


def is_dtensor(t: Any) -> "TypeGuard[DTensor]":
    """Whether ``t`` is a ``torch.distributed.tensor.DTensor`` (without importing torch.distributed.tensor)."""
    return isinstance(t, torch.Tensor) and any(n.endswith(".DTensor") for n in class_names(t))


def _fsdp_modules(module: torch.nn.Module) -> List[torch.nn.Module]:
    return [m for m in module.modules() if any(n.endswith(".FSDPModule") for n in class_names(m))]


def _groups(module: torch.nn.Module) -> list:
    """FSDP2's parameter groups of every ``fully_shard``-ed module inside ``module``."""
    out: list = []
    for m in _fsdp_modules(module):
        state = m._get_fsdp_state()  # type: ignore[operator]  # an FSDPModule (recognised by name)
        out.extend(getattr(state, "_fsdp_param_groups", None) or [])
    return out


def managed(module: torch.nn.Module) -> Dict[int, bool]:
    """The parameters ``fully_shard`` manages in ``module``: ``id(parameter) -> whether it was a DTensor before``
    (tensor parallelism under FSDP2); empty without FSDP2."""
    return {id(fp.sharded_param): bool(getattr(fp, "is_dtensor", False))
            for group in _groups(module) for fp in group.fsdp_params}


def unsharded(module: torch.nn.Module) -> Dict[int, torch.Tensor]:
    """``id(parameter) -> the parameter FSDP2 puts in its place for the forward`` (the all-gathered, unsharded
    parameter object, which a layer's forward reads as ``module.weight``), for the parameters ``fully_shard``
    manages in ``module`` that have been all-gathered once (FSDP2 creates that object at the first all-gather and
    keeps it); empty without FSDP2."""
    return {id(fp.sharded_param): fp._unsharded_param for group in _groups(module) for fp in group.fsdp_params
            if hasattr(fp, "_unsharded_param")}


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a DTensor (a view, no communication), or ``t`` itself."""
    return t.to_local() if is_dtensor(t) else t


def gather(tensors: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """The whole tensors behind the DTensors among ``tensors`` (an all-gather each; plain tensors as they are)."""
    return {n: t.full_tensor() if is_dtensor(t) else t for n, t in tensors.items()}


def shard_like(full: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``full`` laid out like the DTensor ``like`` (this rank's part of it; no communication), or ``full``
    itself when ``like`` is a plain tensor."""
    if not is_dtensor(like):
        return full
    from torch.distributed.tensor import distribute_tensor
    return distribute_tensor(full.to(like.dtype), like.device_mesh, like.placements, src_data_rank=None)


def shards_like(full: Dict[str, torch.Tensor], like: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """:func:`shard_like` of each tensor of ``full`` by the one of the same name in ``like``."""
    return {n: shard_like(t, like[n]) for n, t in full.items()}


@contextlib.contextmanager
def no_reshard_in_backward(module: torch.nn.Module) -> Iterator[None]:
    """Within this block FSDP2's post-backward hooks leave the layers unsharded.

    A backward run inside the user's backward (the curvature's columns) passes FSDP2's hooks; were a
    layer resharded there, the user's backward would meet its freed parameters.  The user's own
    backward reshards them afterwards as usual.
    """
    groups = _groups(module)
    old = [g.reshard_after_backward for g in groups]
    for g in groups:
        g.reshard_after_backward = False
    try:
        yield
    finally:
        for g, value in zip(groups, old):
            g.reshard_after_backward = value
