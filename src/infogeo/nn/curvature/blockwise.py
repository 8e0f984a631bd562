r"""Block-structured curvatures: independent blocks (:mod:`.blocks`) — diagonal, Kronecker or dense —
each covering some parameters, together covering every parameter once.

:class:`~.dense.Dense`, :class:`~.diagonal.Diagonal`, :class:`~.block.BlockDiagonal`,
:class:`~.kfac.KFAC` and :class:`~.ekfac.EKFAC` are block curvatures; one curvature may mix
block kinds.  Their statistics are tensors, so they can be averaged and checkpointed.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union, cast

import torch

from .._params import ParamLayout, Params, all_finite
from .base import Curvature
from .blocks import AbsentBlock, Block, DiagBlock


class BlockCurvature(Curvature):
    """A curvature made of independent blocks covering all parameters once."""

    def __init__(self, layout: ParamLayout, blocks: Sequence[Block], point: Optional[Params] = None):
        super().__init__(layout, point)
        covered = [n for b in blocks for n in b.names]
        if sorted(covered) != sorted(layout.names):
            raise ValueError(f"blocks cover {sorted(covered)}, expected each of {layout.names} once")
        self.blocks: List[Block] = list(blocks)

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

    def diagonal(self) -> Params:
        out = {}
        for b in self.blocks:
            out.update(b.diagonal())
        return {n: out[n] for n in self.layout.names}

    def held_diagonal(self) -> Params:
        r""":math:`\operatorname{diag} C` of the parameters whose blocks this rank holds (all of them but those of an
        :class:`~.blocks.AbsentBlock`)."""
        out: Params = {}
        for b in self.blocks:
            if not isinstance(b, AbsentBlock):
                out.update(b.diagonal())
        return out

    def keeping(self, kept: Sequence[bool]) -> "BlockCurvature":
        """This curvature with the blocks not ``kept`` reduced to their structure (:class:`~.blocks.AbsentBlock`:
        another rank holds their statistics)."""
        blocks = [b if keep or isinstance(b, AbsentBlock) else AbsentBlock(b) for b, keep in zip(self.blocks, kept)]
        return type(self)._from_blocks(self, blocks)

    def to_dense(self) -> torch.Tensor:
        ref = self.blocks[0].reference()
        M = torch.zeros(self.layout.size, self.layout.size, dtype=ref.dtype, device=ref.device)
        for b in self.blocks:
            idx, Mb = b.dense(self.layout)
            M[idx.unsqueeze(1), idx.unsqueeze(0)] = Mb.to(M.dtype)   # (a factorisation's: in its working precision)
        return M

    def precompute(self, damping: Optional[float] = None) -> "BlockCurvature":
        """Factorise every block now (the optimizer's inverse update)."""
        for b in self.blocks:
            b.precompute(damping)
        return self

    # --------------------------------------------------- factorisations (the optimizer's solver)
    def bases(self) -> Dict[str, torch.Tensor]:
        """The factorisations the Kronecker blocks have computed, ``{"<block>/<name>": tensor}`` (eigenvalues and
        eigenbases, or damped inverses and their damping): for checkpoints, since a solver's may be older than
        its factors (:meth:`share_factors`); a diagonal factor's basis, the identity, is an empty tensor."""
        return {f"{i}/{k}": t for i, b in self._factored_blocks() if b.factorised
                for k, t in b.saved_factorisation().items()}

    def _factored_blocks(self) -> List[Tuple[int, Any]]:
        """``(index, block)`` of the Kronecker blocks (:class:`~.kron.KronBlock`, known by their
        ``FACTORISATION_KEYS``: this module does not import them)."""
        return [(i, b) for i, b in enumerate(self.blocks) if getattr(b, "FACTORISATION_KEYS", ())]

    def adopt_bases(self, saved: Dict[str, torch.Tensor], dtype: Optional[torch.dtype] = None) -> None:
        """Use the factorisations of :meth:`bases` (a checkpoint's, in ``dtype`` if given) instead of the factors'
        own."""
        for i, b in self._factored_blocks():
            if all(f"{i}/{k}" in saved for k in b.FACTORISATION_KEYS):
                mine = {k: saved[f"{i}/{k}"] for k in b.FACTORISATION_KEYS}
                want = dict(zip(b.FACTORISATION_KEYS, b.factorisation_shapes()))
                if any(tuple(t.shape) != want[k] for k, t in mine.items() if k in want):
                    raise ValueError(f"checkpoint: the saved factorisation of block {i} does not fit its factors")
                b.adopt_saved(mine, dtype)

    def share_factors(self, current: "BlockCurvature") -> None:
        """Let every decomposed block refer to the factors of ``current`` (this curvature averaged further, the same
        structure) instead of its own: a solver reads only its decompositions, and its own factors, older than
        ``current``'s, would be a second copy of the largest statistics.  Blocks not decomposed here (another
        rank's, under ``placement="memory"``) keep theirs, from which they can still be decomposed."""
        if not self.same_structure(current):
            raise ValueError("share_factors: another structure")
        for b, c in zip(self.blocks, current.blocks):
            if getattr(b, "factorised", False):
                cast(Any, b).share_factors(c)

    def hold_factorised(self, basis_dtype: Union[None, str, torch.dtype] = None) -> None:
        """Let every block that can hold its factors as their factorisation do so once factorised, its eigenvectors
        in ``basis_dtype`` (:meth:`~.eigenbasis.EigenbasisKronBlock.hold_factorised`)."""
        for b in self.blocks:
            if getattr(b, "holds_factorised", False):
                cast(Any, b).hold_factorised(basis_dtype)

    # --------------------------------------------------- statistics
    def stats(self) -> Dict[str, torch.Tensor]:
        """All statistics as one flat dict ``'<block>/<stat>' -> tensor`` (for EMA, checks, checkpoints)."""
        return {f"{i}/{k}": t for i, b in enumerate(self.blocks) for k, t in b.stats().items()}

    def stat_shapes(self) -> Dict[str, Tuple[int, ...]]:
        """The shapes of :meth:`stats` once complete (what a checkpoint of this structure holds)."""
        return {f"{i}/{k}": s for i, b in enumerate(self.blocks) for k, s in b.stat_shapes().items()}

    def stat_rows(self) -> Dict[str, float]:
        """:meth:`~.blocks.Block.stat_rows` of every block, keyed as :meth:`stats`."""
        return {f"{i}/{k}": r for i, b in enumerate(self.blocks) for k, r in b.stat_rows().items()}

    def pooled(self, new: Curvature, n: int, m: int) -> Curvature:
        """The statistics of the union of this batch of ``n`` examples and ``new``'s of ``m``: each statistic's mean
        over the union's examples, or over its rows for a mean over rows of its own (:meth:`stat_rows`: K-FAC's
        :math:`A` over the positions a loss keeps), whose union count the result keeps."""
        n, m = self.pool_sizes(new, n, m)
        if isinstance(new, BlockCurvature) and not self.same_structure(new):
            # a layer one of the batches did not reach (a branch, an expert) keeps the other's block kind
            pair = new.aligned(self)
            if pair is not None:
                return pair[0].pooled(pair[1], n, m)
        rows, more = self.stat_rows(), cast(Dict[str, float], getattr(new, "stat_rows", dict)())
        if not rows or rows.keys() != more.keys():
            return super().pooled(new, n, m)
        # such a mean is pooled as a sum over its rows per example, then divided by the union's rows
        union = {k: rows[k] + more[k] for k in rows}
        pooled = self._rows_scaled({k: r / n for k, r in rows.items()}).ema(
            cast(BlockCurvature, new)._rows_scaled({k: r / m for k, r in more.items()}), n / (n + m))
        return cast(BlockCurvature, pooled)._rows_scaled({k: (n + m) / r if r else 0.0 for k, r in union.items()},
                                                         union)

    def _rows_scaled(self, scale: Dict[str, float], rows: Optional[Dict[str, float]] = None) -> "BlockCurvature":
        """The statistics ``scale`` names multiplied by its factors; the blocks then count ``rows``."""
        stats = self.stats()
        out = self.with_stats({k: t * scale[k] if k in scale else t for k, t in stats.items()})
        for i, b in enumerate(out.blocks):
            mine = {k.split("/", 1)[1]: r for k, r in (rows or {}).items() if k.split("/", 1)[0] == str(i)}
            if mine:
                b.count_rows(mine)
        return out

    def with_stats(self, stats: Dict[str, torch.Tensor]) -> "BlockCurvature":
        """The same structure with the statistics ``stats`` (keys as :meth:`stats` gives them)."""
        blocks = [b.with_stats({k.split("/", 1)[1]: t for k, t in stats.items() if k.split("/", 1)[0] == str(i)})
                  for i, b in enumerate(self.blocks)]
        return type(self)._from_blocks(self, blocks)

    @classmethod
    def _from_blocks(cls, like: "BlockCurvature", blocks):
        new = cls.__new__(cls)
        BlockCurvature.__init__(new, like.layout, blocks, like.point)
        return new

    def _reference(self) -> torch.Tensor:
        return self.blocks[0].reference()

    def is_finite(self) -> bool:
        """Whether every statistic is finite."""
        return all_finite(self.stats().values())

    def same_structure(self, other: Curvature) -> bool:
        """Same type, layout and blocks (kinds and parameters), so that statistics can be averaged."""
        return (type(self) is type(other) and self.layout == other.layout and
                [(b.kind, b.names) for b in self.blocks] == [(b.kind, b.names) for b in other.blocks])

    def aligned(self, old: Curvature) -> Optional[Tuple["BlockCurvature", "BlockCurvature"]]:
        """``(old, self)`` brought to one structure where they differ only by layers that one of them saw no use of,
        or ``None`` where they differ otherwise.

        A layer that no example of a batch reached (a branch not taken, an expert not routed to) has all-zero
        statistics, in the block its builder gives unused layers (a diagonal); the other batch's block kind is kept
        for it, with zero statistics (:meth:`adopting`), so that the running average keeps its factors (decayed, as
        the average of the batch Fishers is) instead of starting over, and a step rule's state keeps its layout."""
        if not isinstance(old, BlockCurvature) or type(old) is not type(self) or old.layout != self.layout:
            return None
        pair = old.adopting(self.templates()), self.adopting(old.templates())
        return pair if pair[0].same_structure(pair[1]) else None

    def templates(self) -> Dict[Tuple[str, ...], Block]:
        """The blocks of the layers this batch reached, with zero statistics on the CPU (what another rank, whose
        batch did not reach a layer, adopts for it: :meth:`adopting`)."""
        return {tuple(b.names): _zero_like(b, torch.device("cpu")) for b in self.blocks if not _unused(b)}

    def adopting(self, templates: Dict[Tuple[str, ...], Block]) -> "BlockCurvature":
        """This curvature with each block of a layer no example reached replaced by ``templates``' block for the
        same parameters where that is of another kind (its zero statistics, in this curvature's dtype and device)."""
        ref = self._reference()

        def zero(t: Block) -> Block:
            return t.with_stats({k: v.to(device=ref.device, dtype=ref.dtype) for k, v in t.stats().items()})
        blocks: List[Block] = []
        for b in self.blocks:
            t = templates.get(tuple(b.names))
            if t is not None and t.kind != b.kind and _unused(b):
                b = zero(t)
            elif _unused(b) and isinstance(b, DiagBlock) and len(b.names) > 1:
                # the one zero block of every parameter this batch did not reach (a branch of several layers):
                # the templates of its layers, and a zero diagonal for what no template covers
                parts: List[Block] = []
                covered: set = set()
                for key, t in templates.items():
                    if set(key) < set(b.names) and not covered & set(key):
                        parts.append(zero(t))
                        covered |= set(key)
                if parts:
                    rest = [n for n in b.names if n not in covered]
                    blocks.extend(parts + ([DiagBlock({n: b.d[n] for n in rest})] if rest else []))
                    continue
            blocks.append(b)
        # in the parameters' order, the same on every rank (a builder orders its blocks by kind first)
        where = {n: i for i, n in enumerate(self.layout.names)}
        return type(self)._from_blocks(self, sorted(blocks, key=lambda b: where[b.names[0]]))

    def ema(self, new: Curvature, decay: float) -> Curvature:
        r"""Exponential moving average :math:`\beta\,C + (1-\beta)\,C_\text{new}`, statistic by statistic.

        Curvatures of another structure are averaged as operators (:class:`LinearCombination`).
        """
        decay = self.mixing(new, decay)
        if not isinstance(new, BlockCurvature) or not self.same_structure(new):
            return super().ema(new, decay)
        old, cur = self.stats(), new.stats()
        return self.with_stats({k: torch.lerp(cur[k], old[k], decay) for k in old})  # one pass per statistic

    def minus_outer(self, g: Params) -> "BlockCurvature":
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


def _unused(block: Block) -> bool:
    """Whether a block's statistics are all zero (its layer was not reached by any example)."""
    return not any(bool(t.any()) for t in block.stats().values())


def _zero_like(block: Block, device: Optional[torch.device] = None) -> Block:
    """The same block with all-zero statistics, every one of them (also those still to be measured), on
    ``device`` (default: its own)."""
    ref = block.reference()
    return block.with_stats({k: torch.zeros(shape, dtype=ref.dtype, device=ref.device if device is None else device)
                             for k, shape in block.stat_shapes().items()})
