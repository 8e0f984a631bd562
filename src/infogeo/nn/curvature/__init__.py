"""Curvature representations of a network's pullback metric (see :mod:`.base`)."""
from __future__ import annotations

from ..network_metric import NetworkMetric
from ..output_metrics import FactorOutput
from .base import BlockCurvature, Curvature
from .blocks import Block, DenseBlock, DiagBlock, KronBlock
from .block import BlockDiagonal
from .dense import Dense
from .diagonal import Diagonal
from .implicit import Implicit
from .kfac import KFAC

__all__ = ["Curvature", "BlockCurvature", "Block", "DiagBlock", "DenseBlock", "KronBlock",
           "Implicit", "Dense", "Diagonal", "KFAC", "BlockDiagonal", "build", "KINDS"]

KINDS = {"implicit": "implicit", "cg": "implicit", "dense": "dense", "diag": "diag", "diagonal": "diag",
         "kfac": "kfac", "block": "block", "block_diagonal": "block"}


def build(space, kind: str, method: str = "exact", *, samples: int = 1, targets=None, generator=None,
          **options) -> Curvature:
    """Build a curvature of ``kind`` for ``space`` (see :meth:`ParameterSpace.curvature`)."""
    key = KINDS.get(str(kind).lower())
    if key is None:
        raise ValueError(f"unknown curvature kind {kind!r}; expected one of {sorted(KINDS)}")
    factor_fn = lambda z: space.factors(z, method, samples, targets, generator)  # noqa: E731
    if key in ("implicit", "dense"):
        if method == "exact":
            metric = space.metric
        else:
            metric = NetworkMetric(space, FactorOutput(factor_fn(space.outputs)))
        if key == "dense":
            return Dense.build(space, metric)
        return Implicit(space.layout, metric, space.point, max_iter=options.get("max_iter", space.cg_max_iter),
                        rtol=options.get("rtol", space.cg_rtol))
    if key == "diag":
        return Diagonal.build(space, factor_fn, **options)
    if key == "kfac":
        return KFAC.build(space, factor_fn, **options)
    return BlockDiagonal.build(space, factor_fn, **options)
