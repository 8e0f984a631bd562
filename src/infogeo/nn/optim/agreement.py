r"""The step's one agreement over the ranks, with the structure of their new curvature statistics.

Statistics are all-reduced entry by entry, so every rank's must have one structure (block kinds, parameters,
shapes).  A layer that the batches of some ranks only reached (a branch, an expert) is a zero block of another
kind on the others: they adopt its kind (:meth:`~infogeo.nn.curvature.blockwise.BlockCurvature.adopting`), which
is what the statistics of the union batch hold.  Any other difference raises one error on every rank.
"""
from __future__ import annotations

import zlib
from typing import Any, Dict, Optional, Tuple

import torch

from .. import distributed as dd

__all__ = ["agree_step"]


def agree_step(error: Optional[BaseException], finite: bool, n: int,
               new: Optional[Tuple[Any, int]]) -> Tuple[bool, torch.Tensor, Optional[Tuple[Any, int]]]:
    """The step's one agreement over the ranks (:func:`~infogeo.nn.distributed.agree`): this rank's ``error``,
    whether its gradients are ``finite``, its batch size ``n`` and the structure of its ``new`` statistics.
    Returns whether some rank's gradient is not finite, every rank's ``n`` (column 0), and ``new``.

    Statistics of other structures cannot be averaged.  Where a layer was reached by the batches of some ranks
    only (a branch, an expert), the others adopt its block kind with zero statistics (one exchange of the
    blocks' descriptions, only then; not for EKFAC's statistics awaiting their scales); any other difference
    raises the same ``ValueError`` on every rank instead of exchanging tensors of other shapes."""
    (nonfinite,), values = dd.agree(error, [not finite], [n, _structure_code(new)])
    if not nonfinite and len({c for c in values[:, 1].tolist() if c >= 0}) > 1 and new is not None and \
            hasattr(new[0], "templates") and not getattr(new[0], "deferred", False):
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
    return nonfinite, values, new


def _structure_code(new: Optional[Tuple[Any, int]]) -> float:
    """A number that differs between statistics of other structures (kinds, parameters, shapes); -1 for none."""
    blocks = getattr(new[0], "blocks", None) if new is not None else None
    return -1.0 if blocks is None else float(zlib.crc32(repr([(b.kind, b.names, b.stat_shapes())
                                                              for b in blocks]).encode()))
