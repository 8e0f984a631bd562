r"""Curvature representations: the common interface, and curvatures made of blocks.

Every representation :math:`C` of the metric at a point offers

* ``mv(v)`` — :math:`Cv`;
* ``solve(w, damping)`` — :math:`(C + \lambda I)^{-1} w` (the damped ``sharp``);
* ``diagonal()`` — :math:`\operatorname{diag} C`;
* ``to_dense()`` — the matrix, in :class:`~infogeo.nn._params.ParamLayout` order,

on ``{name: tensor}`` components.  They are :class:`~infogeo.geometry.metric.Metric`
objects at one point, so ``flat``, ``sharp`` and ``inner`` work on
:class:`TangentVector` / :class:`Covector` too.

Block-structured representations (:class:`Dense`, :class:`Diagonal`, :class:`KFAC`,
:class:`BlockDiagonal`) are :class:`BlockCurvature` objects: lists of independent
blocks (:mod:`.blocks`) — diagonal, Kronecker or dense — each covering some
parameters; a curvature may mix kinds.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch

from ...geometry.metric import Metric
from .._params import ParamLayout, Params
from .blocks import Block


def _check_damping(damping: float) -> float:
    damping = float(damping)
    if not damping >= 0:
        raise ValueError(f"damping must be >= 0, got {damping}")
    return damping


class Curvature(Metric):
    """Base class of curvature representations at a fixed point (see the module docstring)."""

    has_matrix = False

    def __init__(self, layout: ParamLayout, point: Optional[Params] = None):
        super().__init__(None)
        self.layout = layout
        self.point = point

    def _split(self, args):
        if len(args) == 1:
            return self.point, args[0]
        if len(args) == 2:
            return args
        raise TypeError(f"{type(self).__name__}.mv takes (v) or (x, v)")

    def mv(self, *args) -> Params:
        r""":math:`Cv`; ``mv(v)`` or ``mv(x, v)`` (``x`` must be the curvature's point)."""
        _, v = self._split(args)
        self.layout.check(v, "the vector")
        return self._mv(v)

    def solve(self, *args, damping: float = 0.0) -> Params:
        r""":math:`(C + \lambda I)^{-1} w`; ``solve(w, damping=..)`` or ``solve(x, w, damping)``."""
        if len(args) == 3:
            _, w, damping = args
        else:
            _, w = self._split(args)
        self.layout.check(w, "the right-hand side")
        return self._solve(w, _check_damping(damping))

    def diagonal(self) -> Params:
        r""":math:`\operatorname{diag} C` as ``{name: tensor}``."""
        raise NotImplementedError

    def to_dense(self) -> torch.Tensor:
        """The matrix, shape ``(P, P)``, in the layout order of ``model.named_parameters()``."""
        raise NotImplementedError

    def matrix(self, x=None) -> torch.Tensor:
        return self.to_dense()

    def minus_outer(self, g: Params) -> "Curvature":
        r""":math:`C - gg^T` (gradient covariance from the empirical Fisher, Eq. 35)."""
        raise NotImplementedError(f"{type(self).__name__} cannot represent C - g g^T; use 'dense', 'diag', "
                                  "'block' or 'implicit'")

    def _mv(self, v: Params) -> Params:
        raise NotImplementedError

    def _solve(self, w: Params, damping: float) -> Params:
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}({self.layout!r})"


class BlockCurvature(Curvature):
    """A curvature made of independent blocks covering all parameters once."""

    def __init__(self, layout: ParamLayout, blocks: List[Block], point: Optional[Params] = None):
        super().__init__(layout, point)
        covered = [n for b in blocks for n in b.names]
        if sorted(covered) != sorted(layout.names):
            raise ValueError(f"blocks cover {sorted(covered)}, expected each of {layout.names} once")
        self.blocks = blocks

    def _mv(self, v):
        out = {}
        for b in self.blocks:
            out.update(b.mv(v))
        return {n: out[n] for n in self.layout.names}

    def _solve(self, w, damping):
        out = {}
        for b in self.blocks:
            out.update(b.solve(w, damping))
        return {n: out[n] for n in self.layout.names}

    def diagonal(self):
        out = {}
        for b in self.blocks:
            out.update(b.diagonal())
        return {n: out[n] for n in self.layout.names}

    def to_dense(self):
        ref = next(iter(self.blocks[0].stats().values()))
        M = torch.zeros(self.layout.size, self.layout.size, dtype=ref.dtype, device=ref.device)
        for b in self.blocks:
            idx, Mb = b.dense(self.layout)
            M[idx.unsqueeze(1), idx.unsqueeze(0)] = Mb
        return M

    def precompute(self) -> "BlockCurvature":
        """Factorise every block now (the optimizer's inverse update)."""
        for b in self.blocks:
            b.precompute()
        return self

    # --------------------------------------------------- statistics
    def stats(self) -> Dict[str, torch.Tensor]:
        """All statistics as one flat dict ``'<block>/<stat>' -> tensor`` (for EMA, checks, checkpoints)."""
        return {f"{i}/{k}": t for i, b in enumerate(self.blocks) for k, t in b.stats().items()}

    def with_stats(self, stats: Dict[str, torch.Tensor]) -> "BlockCurvature":
        blocks = [b.with_stats({k.split("/", 1)[1]: t for k, t in stats.items() if k.split("/", 1)[0] == str(i)})
                  for i, b in enumerate(self.blocks)]
        return type(self)._from_blocks(self, blocks)

    @classmethod
    def _from_blocks(cls, like: "BlockCurvature", blocks):
        new = cls.__new__(cls)
        BlockCurvature.__init__(new, like.layout, blocks, like.point)
        return new

    def is_finite(self) -> bool:
        return all(bool(torch.isfinite(t).all()) for t in self.stats().values())

    def same_structure(self, other: "BlockCurvature") -> bool:
        return (type(self) is type(other) and self.layout == other.layout and
                [(b.kind, b.names) for b in self.blocks] == [(b.kind, b.names) for b in other.blocks])

    def ema(self, new: "BlockCurvature", decay: float) -> "BlockCurvature":
        r"""Exponential moving average :math:`(1-\eta)\,\text{self} + \eta\,\text{new}` with :math:`\eta = 1 - \text{decay}` (Eq. 32)."""
        if not self.same_structure(new):
            raise ValueError("cannot average curvatures of different structure")
        old, cur = self.stats(), new.stats()
        return self.with_stats({k: decay * old[k] + (1 - decay) * cur[k] for k in old})

    def minus_outer(self, g):
        blocks = []
        for b in self.blocks:
            if not hasattr(b, "minus_outer"):
                raise NotImplementedError(f"a {b.kind} block cannot represent C - g g^T")
            blocks.append(b.minus_outer(g))
        return type(self)._from_blocks(self, blocks)

    def __repr__(self):
        kinds: Dict[str, int] = {}
        for b in self.blocks:
            kinds[b.kind] = kinds.get(b.kind, 0) + 1
        return f"{type(self).__name__}({self.layout!r}, blocks={kinds})"
