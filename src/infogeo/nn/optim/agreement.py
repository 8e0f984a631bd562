r"""The step's one agreement over the ranks, with the structure of their new curvature statistics.

Statistics are all-reduced entry by entry, so every rank's must have one structure (block kinds, parameters,
shapes).  A layer that the batches of some ranks only reached (a branch, an expert) is a zero block of another
kind on the others: they adopt its kind (:meth:`~infogeo.nn.curvature.blockwise.BlockCurvature.adopting`), which
is what the statistics of the union batch hold.  Any other difference raises one error on every rank, as do
ranks whose steps would differ (:func:`settings_codes`: another step rule or learning rate, another set of
parameters without a gradient).
"""
from __future__ import annotations

import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .. import distributed as dd

__all__ = ["agree_step", "settings_codes", "replicas_differ", "InBackward"]

#: a layer's roles in a refresh: whether it read the data, whether it wrote the output (:mod:`.hooks`)
Roles = Tuple[bool, ...]


def agree_step(error: Optional[BaseException], finite: bool, n: int, new: Optional[Tuple[Any, int]],
               replicas: Optional[Tuple[Dict[str, torch.Tensor], Sequence[torch.Tensor]]] = None,
               settings: Sequence[float] = (-1.0, -1.0), roles: Optional[Dict[str, Roles]] = None
               ) -> Tuple[bool, torch.Tensor, Optional[Tuple[Any, int]], Optional[Dict[str, Roles]]]:
    """The step's one agreement over the ranks (:func:`~infogeo.nn.distributed.agree`): this rank's ``error``,
    whether its gradients are ``finite``, its batch size ``n`` and the structure of its ``new`` statistics.
    Returns whether some rank's gradient is not finite, every rank's ``n`` (column 0), ``new``, and ``roles``
    agreed over the ranks.

    ``replicas``: ``(gradients, parameters)`` of a model that neither DDP nor FSDP2 keeps the same on every rank
    (the same on all ranks when the user all-reduces its gradients): their sums are compared, and ranks that
    differ raise the same ``ValueError`` (:func:`replicas_differ`) before they drift apart.

    ``settings``: :func:`settings_codes` of this rank (-1 where not computed): ranks whose steps would differ (another
    step rule, curvature or learning rate; another set of parameters without a gradient) raise the same
    ``ValueError`` instead of drifting apart or waiting in a collective the others skip.

    ``roles``: whether each layer called in this refresh's forwards read the data and wrote the output (by path;
    :meth:`~.hooks.ForwardRecorder.take_roles`).  Where the ranks' differ (a layer only some batches reached), they
    are exchanged and merged (a layer has a role where it had it on every rank that called it), so every rank
    scales the same learning rates (one exchange, only then).

    Statistics of other structures cannot be averaged.  Where a layer was reached by the batches of some ranks
    only (a branch, an expert), the others adopt its block kind with zero statistics (one exchange of the
    blocks' descriptions, only then; not for EKFAC's statistics awaiting their scales); any other difference
    raises the same ``ValueError`` on every rank instead of exchanging tensors of other shapes."""
    sums = _sums(*replicas) if replicas is not None and error is None and finite else [0.0, 0.0]
    # whether this rank's statistics can adopt another's blocks: the exchange is entered by all ranks or none
    adopts = float(new is not None and hasattr(new[0], "templates") and not getattr(new[0], "deferred", False))
    (nonfinite,), values = dd.agree(error, [not finite], [n, _structure_code(new), adopts] + sums + list(settings)
                                    + [_code(roles)])
    _settings_agree(values[:, 5:7])
    if len({c for c in values[:, 7].tolist() if c >= 0}) > 1:   # (every rank decides alike: also on a skipped step)
        roles = _merged(dd.all_gather_objects(roles))
    if replicas is not None and not nonfinite and bool((values[:, 3:5] != values[0, 3:5]).any()):
        raise replicas_differ()
    if not nonfinite and len({c for c in values[:, 1].tolist() if c >= 0}) > 1 and bool((values[:, 2] == 1).all()) \
            and new is not None:   # (every rank's adopts: so is this one's new)
        offers = dd.all_gather_objects(new[0].templates())
        templates: Dict[tuple, Any] = {}
        for offer in offers:
            for names, block in offer.items():
                templates.setdefault(names, block)
        new = (new[0].adopting(templates), new[1])
        values[:, 1] = torch.tensor(dd.all_gather_objects(_structure_code(new)), dtype=values.dtype)
    if len({c for c in values[:, 1].tolist() if c >= 0}) > 1:   # (-1: no statistics, e.g. a skipped step)
        raise ValueError("the ranks' curvature statistics have other structures at this refresh: a layer reached "
                         "by the batch of some ranks only (e.g. a branch or an expert: every rank's batch must "
                         "reach the same layers on the steps that refresh the statistics), or other optimizer "
                         "settings on some ranks (curvature, its options)")
    return nonfinite, values, new, roles


def _code(roles: Optional[Dict[str, Roles]]) -> float:
    return -1.0 if roles is None else float(zlib.crc32(repr(sorted(roles.items())).encode()))


def _merged(offers: List[Optional[Dict[str, Roles]]]) -> Dict[str, Roles]:
    """The ranks' views of the layers' roles merged: a layer has a role where it had it for every rank that called
    it."""
    merged: Dict[str, Roles] = {}
    for offer in offers:
        for path, roles in (offer or {}).items():
            before = merged.get(path, (True,) * len(roles))
            merged[path] = tuple(a and b for a, b in zip(before, roles))
    return merged


def settings_codes(pre: Any) -> List[float]:
    """Two numbers that differ between ranks whose steps would differ: one of the settings (curvature, Fisher,
    placement, what the preconditioner's owner adds, :attr:`~.preconditioner.Preconditioner.owner_settings`: a
    NaturalGradient's step rule and Adam's rates; the learning rate of every parameter), one of the parameters
    without a gradient (which the step leaves alone)."""
    lrs = pre.learning_rates()
    text = repr((pre.kind, pre.fisher, pre.placement, pre.owner_settings(), [lrs[id(p)] for p in pre.params]))
    idle = repr([n for n, p in zip(pre.names, pre.params) if p.grad is None])
    return [float(zlib.crc32(text.encode())), float(zlib.crc32(idle.encode()))]


def _settings_agree(codes: torch.Tensor) -> None:
    """The same ``ValueError`` on every rank where the ranks' :func:`settings_codes` differ."""
    for col, what in ((0, "other settings (step rule, curvature, Fisher, learning rates, Adam's rates) on some "
                          "ranks: build the optimizer alike on every rank and step its schedulers alike"),
                      (1, "other parameters without a gradient on some ranks (a .grad set to None on one rank "
                          "only, e.g. zero_grad() between backward() and step()): each rank would step other "
                          "parameters")):
        c = codes[:, col]
        if bool((c >= 0).all()) and bool((c != c[0]).any()):
            raise ValueError(f"the ranks would take other steps: {what}")


def _sums(grads: Dict[str, torch.Tensor], params: Sequence[torch.Tensor]) -> List[float]:
    """The sums of the gradients and of the parameters, in float64 (equal on ranks that hold the same ones)."""
    return [float(sum(g.detach().double().sum() for g in grads.values())),
            float(sum(p.detach().double().sum() for p in params))]


def replicas_differ() -> ValueError:
    """The error of a model whose ranks hold other gradients or parameters, though no wrapper keeps them equal."""
    return ValueError("the ranks' gradients or parameters differ, and the model is neither wrapped in "
                      "torch.nn.parallel.DistributedDataParallel nor sharded by fully_shard (FSDP2): each rank would "
                      "step its own model and the ranks drift apart (the curvature statistics are averaged over "
                      "them). Wrap the model in DistributedDataParallel (it averages the gradients and starts every "
                      "rank from rank 0's parameters), or, if you average the gradients yourself, do so before "
                      "step() and start every rank from the same parameters")


def _structure_code(new: Optional[Tuple[Any, int]]) -> float:
    """A number that differs between statistics of other structures (kinds, parameters, shapes); -1 for none."""
    blocks = getattr(new[0], "blocks", None) if new is not None else None
    return -1.0 if blocks is None else float(zlib.crc32(repr([(b.kind, b.names, b.stat_shapes())
                                                              for b in blocks]).encode()))


class InBackward:
    """One agreement over the ranks for each batch whose statistics the user's backward records, under FSDP2.

    There the curvature's columns go back through the model inside the user's backward, and that pass runs FSDP2's
    collectives (its pre-backward all-gathers): a rank that does not (an empty batch, an error before the pass)
    would leave the others waiting in it, or meet their all-gathers in its own backward.  So every rank agrees
    once, right before the pass (:meth:`ready`) or, where it never gets there, when the batch ends (:meth:`end`):
    an error on one rank stops the pass on all of them (that rank keeps its error, the others a
    :class:`~infogeo.nn.distributed.PeerFailure`), which the step raises.  Inactive (no collective) without FSDP2
    or a process group: DDP's column pass has no collectives.
    """

    def __init__(self, sharded: bool):
        self.done = not (sharded and dd.world_size() > 1)

    def ready(self, error: Optional[BaseException] = None) -> None:
        """Agree on ``error`` (``None``: this rank is ready for the pass): raises it, or a ``PeerFailure``."""
        if not self.done:
            self.done = True
            dd.agree(error)

    def end(self, error: Optional[BaseException]) -> Optional[BaseException]:
        """The batch's error once agreed (``error``, a ``PeerFailure``, or ``None``), if :meth:`ready` did not run."""
        try:
            self.ready(error)
        except Exception as exc:   # noqa: BLE001 - agreed: recorded for the step to raise
            return exc
        return error
