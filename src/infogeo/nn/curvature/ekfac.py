r"""EKFAC: K-FAC's Kronecker eigenbasis with the exact curvature's scales in it (George et al., 2018).

K-FAC approximates a layer's block by :math:`G \otimes A`; with
:math:`A = U_A\Lambda_A U_A^T`, :math:`G = U_G\Lambda_G U_G^T` its eigenbasis is
:math:`Q = U_G\otimes U_A` and its eigenvalues are :math:`\lambda_G\lambda_A^T`.
EKFAC ("Fast Approximate Natural Gradient Descent in a Kronecker-factored
Eigenbasis", George, Laurent, Bouthillier, Ballas & Vincent, NeurIPS 2018) keeps
the basis and replaces the eigenvalues by the second moments of the per-row
pseudo-gradients projected onto it:

.. math:: s = \frac1N\sum_r \big(U_G^T\,\mathcal D\bar W_r\,U_A\big)^{\odot 2}
          = \operatorname{diag}\big(Q^T G_\text{block}\, Q\big),

the diagonal of the exact block in the Kronecker eigenbasis (the best diagonal
in that basis in Frobenius norm).  The rows :math:`r` are those of the exact
diagonal and block curvatures (one per position and factor column), so the
identity holds for every output shape; it makes EKFAC exact whenever the block
is diagonal in :math:`Q`, e.g. for a single Linear layer under the Euclidean
output metric.  Layers without Kronecker factors get their exact diagonal block.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple, cast

import torch

from .._params import working
from . import _backprop as bp
from ._reducers import accumulation_dtype
from .base import Curvature
from .blockwise import BlockCurvature
from .blocks import AbsentBlock, Block
from .eigenbasis import EigenbasisKronBlock
from .kfac import (MAX_FACTOR_BYTES, MAX_FACTOR_DIM, check_factor_limits, factor_layout, factored_blocks,
                   kfac_reducer, kron_blocks, position_mask)
from .layers.base import CHUNK_ELEMENTS, chunks

#: a basis per layer, keyed by the weight's (or bias') parameter name: ``(U_A, U_G)``
Basis = Dict[str, Tuple[torch.Tensor, torch.Tensor]]


class EigenKronBlock(EigenbasisKronBlock):
    r"""A block :math:`Q\,\operatorname{diag}(s)\,Q^T` with :math:`Q = U_G\otimes U_A` from K-FAC's factors.

    ``s`` has the shape ``(out, in [+ 1])`` of the bias-augmented weight :math:`\bar W`;
    products and damped solves act in the eigenbasis (shared with K-FAC's
    :class:`~.eigenbasis.ExactKronBlock`), with the scales :math:`s + \lambda`:
    :math:`(C + \lambda I)^{-1}\mathrm{vec}(V) = \mathrm{vec}\big(U_G[(U_G^TVU_A)\oslash(s + \lambda)]U_A^T\big)`.
    The basis is that of the factors :math:`A, G` the block holds (their eigenvectors, computed once).
    """

    kind = "ekfac"
    #: the optimizer measures the scales in the basis on every rank (:meth:`EKFAC.refreshed`): nothing to share
    shares_factorisation = False

    def __init__(self, weight, bias, wshape, A: torch.Tensor, G: torch.Tensor, transposed: bool = False,
                 s: Optional[torch.Tensor] = None, pending: Optional[List[Tuple[float, Callable]]] = None):
        super().__init__(weight, bias, wshape, A, G, transposed)
        self.s = s
        #: scales still to be measured (``s is None``): ``[(weight, f(U_A, U_G) -> s)]`` of the batches pooled
        self.pending = pending

    @property
    def key(self) -> str:
        """The name this block's basis is kept under (its weight's, else its bias')."""
        return self.names[0]

    def stats(self):
        if self.s is None:   # awaiting its basis: only the factors are statistics yet
            return {"A": self.A, "G": self.G}
        return {"A": self.A, "G": self.G, "s": self.s}

    def with_stats(self, stats):
        return EigenKronBlock(self.weight, self.bias, self.wshape, stats["A"], stats["G"], self.transposed,
                              stats.get("s"), None if "s" in stats else self.pending)

    def stat_shapes(self):
        return {"A": tuple(self.A.shape), "G": tuple(self.G.shape), "s": (self.G.shape[0], self.A.shape[0])}

    def measured(self, eig=None) -> "EigenKronBlock":
        """The block with its pending scales measured in the eigenbasis of its factors, or in ``eig``
        (a factorisation ``(λ_A, U_A, λ_G, U_G)``), which the result keeps."""
        if eig is not None:
            self._eig = eig
        Ua, Ug = self.basis()
        block = EigenKronBlock(self.weight, self.bias, self.wshape, self.A, self.G, self.transposed,
                               _measure(self, Ua, Ug, self.A.dtype))
        block._eig = self._eig
        return block

    def _scales_of(self):
        return self.s

    def scales(self, damping: float) -> torch.Tensor:
        if self.s is None:
            raise ValueError("the EKFAC scales of this block have not been measured yet (see EKFAC.refreshed)")
        return working(self.s) + damping

    def mv(self, v):
        return self.mv_scaled(v, self.s)

    def diagonal(self):
        return self.diagonal_scaled(self.s)

    def dense(self, layout):
        return self.dense_scaled(layout, self.s)


def _measure(block: EigenKronBlock, Ua: Optional[torch.Tensor], Ug: Optional[torch.Tensor],
             dtype: torch.dtype) -> torch.Tensor:
    """The scales of ``block``'s pending measurements (this rank's batches, weighted) in the basis ``(U_A, U_G)``,
    in ``dtype``; zeros where no example reached the layer."""
    s: Any = None
    for w, f in block.pending or ():
        t = f(Ua, Ug).mul_(w)
        s = t if s is None else s.add_(t)
    if s is None:
        s = block.A.new_zeros(block.G.shape[0], block.A.shape[0])
    return s.to(dtype)


def eigen_correction(space, layer: bp.Layer, cols: bp.Columns, Ua: torch.Tensor, Ug: torch.Tensor,
                     chunk_elements: int = CHUNK_ELEMENTS) -> torch.Tensor:
    r""":math:`s = \frac1N\sum_r (U_G^T\mathcal D\bar W_r U_A)^{\odot 2}` from the layer's inputs and output gradients.

    The pseudo-gradient of row :math:`r` (example :math:`n`) is :math:`\sum_t b_{rt}\bar a_{nt}^T`, so its
    rotation is :math:`\sum_t (U_G^Tb_{rt})(U_A^T\bar a_{nt})^T`: the inputs and output gradients are
    rotated first, :math:`O(R\,T\,d^2)`, and no per-row :math:`d\times d` product is formed.  With one
    position per example, :math:`s = \frac1N\,(\tilde b^{\odot 2})^T(\tilde a^{\odot 2})` is one product.
    """
    rule = layer.rule
    own = getattr(rule, "eigen_correction", None)
    if own is not None:   # a rule with its own closed form (Embedding: one-hot inputs)
        return own(layer, Ua, Ug).div_(space.batch_size)
    a = rule.ordered_inputs(layer)                                   # (N, T, in)
    N, T = a.shape[0], a.shape[1]
    dt = accumulation_dtype(a, layer.grad_out)
    a = a.to(dt)
    parts = []
    if "weight" in layer.params:
        parts.append(a)
    if rule.bias_column(layer):
        parts.append(torch.ones(N, T, 1, dtype=dt, device=a.device))
    at = torch.cat(parts, dim=2) if len(parts) > 1 else parts[0]
    if Ua is not None:
        at = at @ Ua.to(dt)                                          # (N, T, in [+ 1]) rotated
    gs = layer.grad_out
    out = rule.out_features(layer.module)
    s = torch.zeros(out, at.shape[2], dtype=dt, device=a.device)
    Ugd = None if Ug is None else Ug.to(dt)
    for j in range(gs.shape[0]):
        bt = rule.outputs(gs[j]).to(dt)
        if Ugd is not None:
            bt = bt @ Ugd                                            # (N, T, out) rotated
        if T == 1:
            s.addmm_(bt[:, 0].square().T, at[:, 0].square())
            continue
        for sl in chunks(N, out * at.shape[2], chunk_elements):
            P = torch.einsum("nto,nti->noi", bt[sl], at[sl])          # rotated pseudo-gradients of the rows
            s.add_(P.square().sum(0))
    return s.div_(space.batch_size)


def moment_scales(G: torch.Tensor, Ua: Optional[torch.Tensor], Ug: Optional[torch.Tensor]) -> torch.Tensor:
    r"""EKFAC's scales of a block :math:`G\otimes[1]` whose :math:`G` is the exact second moment of its rows (a
    bias in a block of its own): :math:`s = \operatorname{diag}(U_G^TGU_G)\,(U_A^{\odot 2})`, ``(out, 1)``."""
    d = G if Ug is None else torch.einsum("io,ij,jo->o", Ug, G, Ug)
    return d.unsqueeze(1) * (1 if Ua is None else Ua[:1].square())   # a new tensor: the caller scales it in place


def _fits(basis: Tuple[Optional[torch.Tensor], Optional[torch.Tensor]], block: EigenKronBlock) -> bool:
    """Whether a basis ``(U_A, U_G)`` is one for the factors of ``block`` (``None``: a diagonal factor's)."""
    return all((U is None) == (F.dim() == 1) and (U is None or U.shape == F.shape)
               for U, F in zip(basis, (block.A, block.G)))


def ekfac_reducer(approx: str, max_factor_dim: int = MAX_FACTOR_DIM, max_factor_bytes: int = MAX_FACTOR_BYTES,
                  reached: bool = False):
    """K-FAC's gradient-factor sink for layers with Kronecker factors, also keeping each column's output gradient."""
    kron = kfac_reducer(approx, max_factor_dim, max_factor_bytes, reached=reached)

    def reducer(layer: bp.Layer, cols: bp.Columns):
        if factor_layout(layer, max_factor_dim, approx, max_factor_bytes) is None:
            return layer.rule.diagonal_sink(layer, cols)
        gram_sink = kron(layer, cols)

        def sink(j, g):
            if layer.grad_out is None:
                layer.grad_out = torch.empty((cols.count,) + tuple(g.shape), dtype=g.dtype, device=g.device)
            layer.grad_out[j] = g       # a copy: the gradient-factor sink may accumulate into g in place
            gram_sink(j, g)
        return sink
    return reducer


class EKFAC(BlockCurvature):
    r"""Eigenvalue-corrected K-FAC; exact diagonal blocks where a layer has no Kronecker factors.

    Build with ``space.curvature("ekfac", method=..., kfac_approx="expand" | "reduce")``
    (the basis is K-FAC's, see :mod:`.kfac`).

    ``basis`` (``{weight name: (U_A, U_G)}``) computes the scales in a given basis instead of the
    eigenvectors of this batch's factors.  ``defer=True`` (the optimizers' form) keeps each layer's inputs
    and output gradients and leaves the scales to :meth:`refreshed`, once the basis is known on every
    rank (George et al. 2018 refresh the basis rarely and the scales often).
    """

    @classmethod
    def build(cls, space, factor_fn, chunk_elements: int = CHUNK_ELEMENTS, kfac_approx: str = "expand",
              per_position: bool = True, basis: Optional[Basis] = None, defer: bool = False,
              max_factor_dim: int = MAX_FACTOR_DIM, max_factor_bytes: int = MAX_FACTOR_BYTES) -> "EKFAC":
        mask = position_mask(space)
        limits = check_factor_limits(max_factor_dim, max_factor_bytes)

        def make_blocks(layers: List[bp.Layer], layouts, cols: bp.Columns) -> List[EigenKronBlock]:
            blocks = []
            for layer, layout in zip(layers, layouts):
                for kron in cast(List[EigenKronBlock], kron_blocks(space, layer, EigenKronBlock, layout,
                                                                   kfac_approx, mask)):
                    if kron.weight is None and layer.rule.separate_bias:   # a bias's own exact block
                        measure = (lambda G: lambda Ua, Ug: moment_scales(G, Ua, Ug))(kron.G.clone())
                    else:
                        measure = (lambda l: lambda Ua, Ug: eigen_correction(space, l, cols, Ua, Ug,
                                                                             chunk_elements))(layer)
                    if defer:   # the layer's inputs and output gradients are kept until the basis is known
                        kron.pending = [(1.0, measure)]
                    else:
                        given = basis.get(kron.key) if basis is not None else None
                        if given is not None and not _fits(given, kron):
                            given = None
                        kron.s = measure(*(given if given is not None else kron.basis()))
                    blocks.append(kron)
                if not defer:
                    layer.grad_out, layer.inputs = None, ()
            return blocks
        blocks = factored_blocks(space, factor_fn, ekfac_reducer(kfac_approx, *limits, reached=mask is not None), per_position,
                                 chunk_elements, make_blocks, limits, kfac_approx)
        return cls(space.layout, blocks, space.point)

    def basis(self) -> Basis:
        """Each Kronecker block's eigenbasis ``{weight name: (U_A, U_G)}`` (the ``basis`` option of :meth:`build`)."""
        return {b.key: b.basis() for b in self.blocks if isinstance(b, EigenKronBlock)}

    # ------------------------------------------------------------ the optimizer's schedule
    @property
    def deferred(self) -> bool:
        """Whether scales are still to be measured (built with ``defer=True``; see :meth:`refreshed`)."""
        return any(isinstance(b, EigenKronBlock) and b.s is None for b in self.blocks)

    def ema(self, new: "Curvature", decay: float) -> "Curvature":
        """Deferred statistics pool with deferred ones (micro-batches): factors averaged, measurements kept."""
        decay = self.mixing(new, decay)
        if not (self.deferred or getattr(new, "deferred", False)):
            return super().ema(new, decay)
        if not (isinstance(new, EKFAC) and self.deferred and new.deferred and self.same_structure(new)):
            raise ValueError("EKFAC statistics awaiting their scales combine only with others of the same layers")
        blocks: List[Block] = []
        for a, b in zip(self.blocks, new.blocks):
            if isinstance(a, EigenKronBlock) and isinstance(b, EigenKronBlock):
                blocks.append(EigenKronBlock(a.weight, a.bias, a.wshape, torch.lerp(b.A, a.A, decay),
                                             torch.lerp(b.G, a.G, decay), a.transposed, None,
                                             [(w * decay, f) for w, f in a.pending or ()] +
                                             [(w * (1 - decay), f) for w, f in b.pending or ()]))
            else:
                old, cur = a.stats(), b.stats()
                blocks.append(a.with_stats({k: torch.lerp(cur[k], old[k], decay) for k in old}))
        return type(self)._from_blocks(self, blocks)

    def refreshed(self, old: Optional["EKFAC"], decay: float,
                  reduce: Optional[Callable[[List[torch.Tensor]], List[Optional[torch.Tensor]]]] = None,
                  basis_of: Optional["Curvature"] = None, local: Optional["EKFAC"] = None,
                  share: Optional[Callable[..., List[Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]]]] = None,
                  dtype: Optional[torch.dtype] = None) -> "EKFAC":
        r"""Deferred statistics (already averaged over the ranks) made current, with their basis.

        The factors are averaged with ``old``'s (:math:`\beta` = ``decay``); the scales are measured in the
        basis of ``basis_of`` (the solver's, between factorisations) or else in that of the averaged factors,
        ``reduce`` (the mean over the ranks) is applied to them, and they are averaged with ``old``'s scales
        (George et al. 2018 keep averaging the scales when the basis is renewed).  The result keeps the
        basis it was measured in (it is factorised).

        Owner-only statistics (the blocks another rank holds are :class:`~.blocks.AbsentBlock` in ``self``,
        ``old`` and ``basis_of``): this rank's scales of every block are measured from ``local``, its own deferred
        statistics before the reduce, in the bases ``share(indices, held, error)`` gives on every rank (each
        Kronecker block's, at ``indices``, broadcast by its owner from ``held``: the bases of the blocks held here,
        ``None`` elsewhere; ``error``: this rank's failure to compute them, agreed); ``reduce`` gives their mean on
        the owners (``None`` elsewhere), and ``dtype`` is the statistics' dtype.
        """
        if old is not None and not (isinstance(old, EKFAC) and self.same_structure(old)):
            pair = self.aligned(old)   # layers unused in one of the batches keep their kind; else start over
            if pair is None:
                old = None
            else:
                old, aligned = cast("EKFAC", pair[0]), pair[1]
                return cast("EKFAC", aligned).refreshed(old, decay, reduce, basis_of, local, share, dtype)
        known = {} if basis_of is None else {b.key: b.eig() for b in getattr(basis_of, "blocks", [])
                                             if isinstance(b, EigenKronBlock)}
        blocks: List[Block] = []
        for i, b in enumerate(self.blocks):
            o: Any = old.blocks[i] if old is not None else None
            if isinstance(b, EigenKronBlock):
                A, G = (b.A, b.G) if o is None else (torch.lerp(b.A, o.A, decay), torch.lerp(b.G, o.G, decay))
                fresh = EigenKronBlock(b.weight, b.bias, b.wshape, A, G, b.transposed)
                eig = known.get(b.key)
                if eig is not None and _fits((eig[1], eig[3]), fresh):
                    fresh._eig = eig
                blocks.append(fresh)
            elif isinstance(b, AbsentBlock):   # another rank's (owner-only)
                blocks.append(b)
            else:
                cur = b.stats()
                blocks.append(b if o is None else b.with_stats({k: torch.lerp(cur[k], t, decay)
                                                                for k, t in o.stats().items()}))
        source = self if local is None else local   # whose pending measurements give this rank's scales
        kron = [i for i, b in enumerate(source.blocks) if isinstance(b, EigenKronBlock)]
        if share is None:
            bases = [cast(EigenKronBlock, blocks[i]).basis() for i in kron]
        else:   # the owners' bases, for every rank to measure its own scales in
            held: List[Any] = []
            error: Optional[BaseException] = None
            for i in kron:
                try:
                    b = blocks[i]
                    held.append(b.basis() if isinstance(b, EigenKronBlock) else None)
                except Exception as exc:   # (a failed factorisation: agreed, every rank raises)
                    error, held = exc, held + [None]
            bases = share(kron, held, error)
        scales: List[Optional[torch.Tensor]] = [
            _measure(cast(EigenKronBlock, source.blocks[i]), Ua, Ug,
                     cast(EigenKronBlock, blocks[i]).A.dtype if dtype is None else dtype)
            for i, (Ua, Ug) in zip(kron, bases)]
        if reduce is not None and scales:
            scales = reduce(cast(List[torch.Tensor], scales))
        for i, s in zip(kron, scales):
            if s is None:   # another rank's block
                continue
            b = cast(EigenKronBlock, blocks[i])
            if old is not None:
                s = torch.lerp(s, cast(torch.Tensor, cast(EigenKronBlock, old.blocks[i]).s), decay)
            b.s = s
        return type(self)._from_blocks(self, blocks)
