"""Curvature representations of a network's pullback metric (the protocol: :mod:`.base`; operators: :mod:`.operators`)."""
from __future__ import annotations

from typing import Any, Optional

import torch

from ..network_metric import NetworkMetric
from ..output_metrics import FactorOutput
from . import operators
from .base import BlockCurvature, Curvature, LinearCombination, ScaledIdentity
from .blocks import Block, DenseBlock, DiagBlock, KronBlock
from .block import BlockDiagonal
from .dense import Dense
from .diagonal import Diagonal
from .ekfac import EKFAC, EigenKronBlock
from .implicit import Implicit
from .kfac import KFAC

__all__ = ["Curvature", "BlockCurvature", "LinearCombination", "ScaledIdentity", "operators",
           "Block", "DiagBlock", "DenseBlock", "KronBlock",
           "Implicit", "Dense", "Diagonal", "KFAC", "EKFAC", "EigenKronBlock", "BlockDiagonal", "build", "KINDS"]

KINDS = {"implicit": "implicit", "cg": "implicit", "dense": "dense", "diag": "diag", "diagonal": "diag",
         "kfac": "kfac", "ekfac": "ekfac", "block": "block", "block_diagonal": "block"}


def build(space: Any, kind: str, method: str = "exact", *, samples: int = 1, targets: Optional[torch.Tensor] = None,
          generator: Optional[torch.Generator] = None, **options: Any) -> Curvature:
    """Build a curvature of ``kind`` for ``space``, a :class:`~infogeo.nn.space.ParameterSpace`.

    See :meth:`~infogeo.nn.space.ParameterSpace.curvature` for the kinds, methods and options.
    The builder takes the space as an argument and imports nothing from :mod:`infogeo.nn.space`.
    """
    key = KINDS.get(str(kind).lower())
    if key is None:
        raise ValueError(f"unknown curvature kind {kind!r}; expected one of {sorted(KINDS)}")
    columns = options.pop("columns", None)   # output columns the caller already has (a backward's gradient)
    if columns is not None:
        factor_fn = lambda z: columns  # noqa: E731
    else:
        factor_fn = lambda z: space.factors(z, method, samples, targets, generator)  # noqa: E731
    if key in ("implicit", "dense"):
        if method == "exact":
            metric = space.metric
        else:
            # the columns from the outputs of the very forward pass the Jacobian products use (a model's
            # no-grad forward may take another path, e.g. the fused kernels of nn.TransformerEncoder)
            metric = NetworkMetric(space, FactorOutput(factor_fn(space.metric.linearize().outputs)))
        if key == "dense":
            return Dense.build(space, metric)
        return Implicit(space.layout, metric, space.point, max_iter=options.get("max_iter", space.cg_max_iter),
                        rtol=options.get("rtol", space.cg_rtol))
    # Monte Carlo: one backward pass per sample at all positions at once (the samples are
    # independent with mean zero at each position, so the cross-position terms vanish in
    # expectation); exact and empirical: one row per position (see _backprop.Columns)
    options["per_position"] = method != "mc"
    if key == "diag":
        return Diagonal.build(space, factor_fn, **options)
    if key == "kfac":
        return KFAC.build(space, factor_fn, **options)
    if key == "ekfac":
        return EKFAC.build(space, factor_fn, **options)
    return BlockDiagonal.build(space, factor_fn, **options)
