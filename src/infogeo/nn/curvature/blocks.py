r"""The blocks that block-structured curvatures are made of: diagonal and dense (Kronecker-factored: :mod:`.kron`).

Each :class:`Block` covers some parameters and offers ``mv``, ``solve(v, damping)``,
``diagonal`` and ``dense(layout)``; its statistics are tensors (``stats`` /
``with_stats``) so that curvatures can be averaged and checkpointed.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ...linalg import NotPositiveDefiniteError
from .._params import ParamLayout, Params, working


class Block:
    """A curvature block over some parameters; subclasses hold their statistics as tensors."""

    names: List[str]
    kind = "block"

    def stats(self) -> Dict[str, torch.Tensor]:
        raise NotImplementedError

    def with_stats(self, stats: Dict[str, torch.Tensor]) -> "Block":
        raise NotImplementedError

    def reference(self) -> torch.Tensor:
        """A tensor of the statistics' dtype and device (not necessarily one of them)."""
        return next(iter(self.stats().values()))

    def stat_shapes(self) -> Dict[str, Tuple[int, ...]]:
        """The shapes of :meth:`stats`."""
        return {k: tuple(t.shape) for k, t in self.stats().items()}

    def stat_rows(self) -> Dict[str, float]:
        """The statistics that are means over rows other than the examples (K-FAC's :math:`A`: over positions),
        with their row counts: the ranks' batches are weighted by these, not by their example counts."""
        return {}

    def count_rows(self, rows: Dict[str, float]) -> None:
        """Take ``rows`` as the row counts of :meth:`stat_rows`' statistics (after they were pooled)."""

    def mv(self, v: Params) -> Params:
        raise NotImplementedError

    def solve(self, v: Params, damping: float) -> Params:
        raise NotImplementedError

    def diagonal(self) -> Params:
        raise NotImplementedError

    def dense(self, layout: ParamLayout) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(idx, M)``: global flat indices of this block and its dense matrix."""
        raise NotImplementedError

    def precompute(self, damping: Optional[float] = None) -> None:
        """Factorise now (eigendecompositions, damped inverses, ...), so that later solves are cheap."""

    def _indices(self, layout: ParamLayout, names: Sequence[str], device) -> torch.Tensor:
        return torch.cat([torch.arange(layout.offsets[n], layout.offsets[n] + layout.numels[n], device=device)
                          for n in names])


class AbsentBlock(Block):
    """The structure of a block whose statistics another rank holds (owner-only statistics,
    :attr:`~infogeo.nn.optim.estimate.CurvatureEstimate.owner_only`): its kind, parameters and statistics' shapes,
    no tensor of their sizes.  Its products and solves are its owner's; :meth:`with_stats` of statistics gives the
    block itself again (of its own class)."""

    #: nothing factorised here (a distributed step leaves this block to its owner)
    factorised = False

    def __init__(self, block: Block):
        self.names, self.kind, self.shapes = list(block.names), block.kind, dict(block.stat_shapes())
        like = block.reference()
        self._like = like.new_empty(0)
        #: the block's own class and layout with empty statistics (what :meth:`with_stats` fills)
        self.template = block.with_stats({k: self._like for k in self.shapes})

    def stats(self) -> Dict[str, torch.Tensor]:
        return {}

    def with_stats(self, stats: Dict[str, torch.Tensor]) -> Block:
        return self if not stats else self.template.with_stats(stats)

    def reference(self) -> torch.Tensor:
        return self._like

    def stat_shapes(self) -> Dict[str, Tuple[int, ...]]:
        return dict(self.shapes)

    def _absent(self, *args, **kwargs):
        raise RuntimeError(f"the statistics of {self.names} are held by another rank (owner-only statistics)")

    mv = solve = diagonal = dense = _absent   # type: ignore[assignment]


def structure(block: Block) -> Block:
    """The block, or the layout of one whose statistics another rank holds (:class:`AbsentBlock`): what tells which
    parameters and layout it has (e.g. a Kronecker block's weight and bias)."""
    return block.template if isinstance(block, AbsentBlock) else block


class DiagBlock(Block):
    r"""A diagonal block :math:`\operatorname{diag}(d)`."""

    kind = "diag"

    def __init__(self, diag: Params):
        self.names = list(diag)
        self.d = diag

    #: a diagonal needs no factorisation: an optimizer's solver solves with the current one (:meth:`share_factors`)
    factorised = True

    def share_factors(self, current: "DiagBlock") -> None:
        """Solve with the diagonal of ``current`` (a later average of the same statistics) instead of this block's
        own: a diagonal costs nothing to factorise, and keeping the older one would be a second copy."""
        if current.names != self.names:
            raise ValueError("share_factors: another block")
        self.d = current.d

    def stats(self):
        return dict(self.d)

    def with_stats(self, stats):
        return DiagBlock({n: stats[n] for n in self.names})

    def mv(self, v):
        return {n: self.d[n] * v[n] for n in self.names}

    def solve(self, v, damping):
        out = {}
        for n in self.names:
            den = working(self.d[n]) + damping
            if not bool((den > 0).all()):
                raise NotPositiveDefiniteError(f"the diagonal curvature of {n!r} has zero or negative entries; "
                                               "pass damping > 0")
            out[n] = v[n] / den
        return out

    def diagonal(self):
        return dict(self.d)

    def dense(self, layout):
        d = torch.cat([self.d[n].reshape(-1) for n in self.names])
        return self._indices(layout, self.names, d.device), torch.diag(d)

    def minus_outer(self, g):
        return DiagBlock({n: self.d[n] - g[n] ** 2 for n in self.names})


class DenseBlock(Block):
    """A dense block over the concatenated (row-major) parameters ``names``."""

    kind = "dense"

    def __init__(self, names: Sequence[str], shapes: Sequence[Tuple[int, ...]], M: torch.Tensor):
        self.names = list(names)
        self.sub = ParamLayout(self.names, shapes)
        self.M = M
        self._chol: Dict[float, torch.Tensor] = {}

    def stats(self):
        return {"M": self.M}

    def with_stats(self, stats):
        return DenseBlock(self.names, [self.sub.shapes[n] for n in self.names], stats["M"])

    def mv(self, v):
        x = self.sub.flatten(v)
        return self.sub.unflatten(self.M.to(x.dtype) @ x)

    def _cholesky(self, damping):
        L = self._chol.get(damping)
        if L is None:
            L, info = torch.linalg.cholesky_ex(shifted(working(self.M), damping))
            if int(info) != 0:
                raise NotPositiveDefiniteError(f"the dense curvature block of {self.names} is not positive "
                                               f"definite with damping {damping}; increase damping")
            self._chol = {damping: L}  # keep one factorisation (the current damping)
        return L

    def solve(self, v, damping):
        L = self._cholesky(damping)
        return self.sub.unflatten(torch.cholesky_solve(self.sub.flatten(v).unsqueeze(-1), L).squeeze(-1))

    def diagonal(self):
        return self.sub.unflatten(torch.diagonal(self.M))

    def dense(self, layout):
        return self._indices(layout, self.names, self.M.device), self.M

    def minus_outer(self, g):
        gv = self.sub.flatten(g)
        return DenseBlock(self.names, [self.sub.shapes[n] for n in self.names], self.M - torch.outer(gv, gv))


def shifted(M: torch.Tensor, shift: float) -> torch.Tensor:
    """:math:`M + sI` as one new matrix (no identity matrix allocated)."""
    out = M.clone()
    out.diagonal().add_(shift)
    return out
