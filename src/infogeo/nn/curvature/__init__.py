"""Curvature representations of a network's pullback metric (the protocol: :mod:`.base`; operators: :mod:`.operators`)."""
from __future__ import annotations

import math
import warnings
from typing import Any, Optional

import torch

from ..network_metric import NetworkMetric
from ..output_metrics import FactorOutput
from . import kinds, layers, operators
from .base import Curvature, Inverse, LinearCombination, ScaledIdentity
from .blockwise import BlockCurvature
from .blocks import Block, DenseBlock, DiagBlock
from .eigenbasis import EigenbasisKronBlock, ExactKronBlock
from .kron import KronBlock, TikhonovKronBlock
from .block import BlockDiagonal
from .dense import Dense
from .diagonal import Diagonal
from .ekfac import EKFAC, EigenKronBlock
from .implicit import Implicit
from .kfac import KFAC
from .shampoo import RootDiagBlock, RootKronBlock, Shampoo

__all__ = ["Curvature", "BlockCurvature", "Inverse", "LinearCombination", "ScaledIdentity", "operators",
           "Block", "DiagBlock", "DenseBlock", "KronBlock", "TikhonovKronBlock", "EigenbasisKronBlock", "ExactKronBlock",
           "Implicit", "Dense", "Diagonal", "KFAC", "EKFAC", "EigenKronBlock", "BlockDiagonal", "Shampoo",
           "RootKronBlock", "RootDiagBlock", "build", "KINDS",
           "kinds", "layers"]

KINDS = kinds.KINDS

def build(space: Any, kind: str, method: str = "exact", *, samples: int = 1, targets: Optional[torch.Tensor] = None,
          generator: Optional[torch.Generator] = None, **options: Any) -> Curvature:
    """Build a curvature of ``kind`` for ``space``, a :class:`~infogeo.nn.space.ParameterSpace`.

    See :meth:`~infogeo.nn.space.ParameterSpace.curvature` for the kinds (:mod:`.kinds`), methods and options.
    The builder takes the space as an argument and imports nothing from :mod:`infogeo.nn.space`.
    """
    row = kinds.kind(kind)
    method = kinds.method(method)
    row.check_values(options)
    if row.statistics == "gradient":   # Shampoo's: the loss gradient's own factors, no output columns
        if method != "empirical":
            raise ValueError(f"curvature {row.name!r} is built from the gradient of the batch loss, not from the "
                             f"model's output metric: pass method='empirical' (and targets), got {method!r}")
        options.pop("columns", None)
        return row.load().build(space, space.differential(targets=targets).components, **options)
    columns = options.pop("columns", None)   # output columns the caller already has (a backward's gradient)
    if columns is not None:
        factor_fn = lambda z: columns  # noqa: E731
    else:
        factor_fn = lambda z: space.factors(z, method, samples, targets, generator)  # noqa: E731
    cls = row.load()
    if not row.captured:   # products with the whole batch's Jacobian
        if method == "exact":   # the space's own metric, unless its output metric was bound anew (ignored positions)
            metric = space.metric if space.metric.output_metric is space.output_metric else NetworkMetric(space)
        else:
            # the columns from the outputs of the very forward pass the Jacobian products use (a model's
            # no-grad forward may take another path, e.g. the fused kernels of nn.TransformerEncoder)
            metric = NetworkMetric(space, FactorOutput(factor_fn(space.metric.linearize().outputs)))
        return cls.build(space, metric, **options)
    # Monte Carlo: one backward pass per sample at all positions at once (the samples are
    # independent with mean zero at each position, so the cross-position terms vanish in
    # expectation); exact and empirical: one row per position (see _backprop.Columns)
    options["per_position"] = method != "mc"
    if method == "empirical":
        factor_fn = _noting_positions(factor_fn)
    return cls.build(space, factor_fn, **options)


_WARNED: set = set()


def _noting_positions(factor_fn):
    """``factor_fn``, warning once per output shape that the empirical Fisher of outputs with positions costs
    one backward pass per position."""
    def fn(z):
        S = factor_fn(z)
        T = math.prod(S.shape[2:-1])
        key = tuple(S.shape[2:-1])
        if T > 1 and key not in _WARNED:
            _WARNED.add(key)
            warnings.warn(
                f"the empirical Fisher of outputs with {T} positions per example back-propagates one column per "
                f"position ({T} backward passes): the loss gradients of different positions do not cancel, so "
                f"they cannot share one pass as Monte Carlo samples do; fisher='mc' costs one pass per sample "
                f"(this is said once per output shape)", RuntimeWarning, stacklevel=4)
        return S
    return fn
