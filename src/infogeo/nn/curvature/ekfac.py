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

import torch

from ...linalg import NotPositiveDefiniteError
from . import _backprop as bp, _rows as rows
from .base import BlockCurvature
from .blocks import KronBlock
from .kfac import factored_blocks, is_factored, kfac_reducer, kron_block


class EigenKronBlock(KronBlock):
    r"""A block :math:`Q\,\operatorname{diag}(s)\,Q^T` with :math:`Q = U_G\otimes U_A` from K-FAC's factors.

    ``s`` has the shape ``(out, in [+ 1])`` of the bias-augmented weight :math:`\bar W`;
    products and damped solves act in the eigenbasis:
    :math:`(C + \lambda I)^{-1}\mathrm{vec}(V) = \mathrm{vec}\big(U_G[(U_G^TVU_A)\oslash(s + \lambda)]U_A^T\big)`.
    """

    kind = "ekfac"

    def __init__(self, weight, bias, wshape, A: torch.Tensor, G: torch.Tensor, s: torch.Tensor):
        super().__init__(weight, bias, wshape, A, G)
        self.s = s

    def stats(self):
        return {"A": self.A, "G": self.G, "s": self.s}

    def with_stats(self, stats):
        return EigenKronBlock(self.weight, self.bias, self.wshape, stats["A"], stats["G"], stats["s"])

    def basis(self):
        """``(U_A, U_G)``, the eigenvectors of the factors."""
        _, Ua, _, Ug = self.eig()
        return Ua, Ug

    def mv(self, v):
        Ua, Ug = self.basis()
        return self._split(Ug @ ((Ug.T @ self._join(v) @ Ua) * self.s) @ Ua.T)

    def solve(self, v, damping):
        Ua, Ug = self.basis()
        den = self.s + damping
        if not bool((den > 0).all()):
            raise NotPositiveDefiniteError(f"the EKFAC block of {self.names} is singular; pass damping > 0")
        return self._split(Ug @ ((Ug.T @ self._join(v) @ Ua) / den) @ Ua.T)

    def diagonal(self):
        Ua, Ug = self.basis()
        return self._split(Ug.square() @ self.s @ Ua.square().T)

    def dense(self, layout):
        Ua, Ug = self.basis()
        Q = torch.kron(Ug, Ua)
        return self.flat_index(layout), (Q * self.s.reshape(-1)) @ Q.T


def eigen_correction(space, layer: bp.Layer, cols: bp.Columns, Ua: torch.Tensor, Ug: torch.Tensor,
                     chunk_elements: int = rows.CHUNK_ELEMENTS) -> torch.Tensor:
    r""":math:`s = \frac1N\sum_r (U_G^T\mathcal D\bar W_r U_A)^{\odot 2}` over the layer's per-row pseudo-gradients."""
    out = layer.module.weight.shape[0]
    s = None
    for chunk in rows.row_grads(layer, space, cols, chunk_elements):
        parts = []
        if "weight" in layer.params:
            w = chunk[layer.params["weight"]]
            parts.append(w.reshape(w.shape[0], out, -1))
        if "bias" in layer.params:
            parts.append(chunk[layer.params["bias"]].reshape(-1, out, 1))
        Wb = torch.cat(parts, dim=2)
        sq = (Ug.T @ Wb @ Ua).square().sum(0)
        s = sq if s is None else s.add_(sq)
    return s.div_(space.batch_size)


def ekfac_reducer(approx: str):
    """K-FAC's gradient-factor sink for factorable layers, also keeping each column's output gradient."""
    kron = kfac_reducer(approx)

    def reducer(layer: bp.Layer, cols: bp.Columns):
        if not is_factored(layer):
            return None
        gram_sink = kron(layer, cols)

        def sink(j, g):
            if layer.grad_out is None:
                layer.grad_out = torch.empty((cols.count,) + tuple(g.shape), dtype=g.dtype, device=g.device)
            layer.grad_out[j] = g       # a copy: the gradient-factor sink accumulates into g in place
            gram_sink(j, g)
        return sink
    return reducer


class EKFAC(BlockCurvature):
    r"""Eigenvalue-corrected K-FAC; exact diagonal blocks where a layer has no Kronecker factors.

    Build with ``space.curvature("ekfac", method=..., kfac_approx="expand" | "reduce")``
    (the basis is K-FAC's, see :mod:`.kfac`).
    """

    @classmethod
    def build(cls, space, factor_fn, chunk_elements: int = rows.CHUNK_ELEMENTS, kfac_approx: str = "expand",
              per_position: bool = True) -> "EKFAC":
        def make_block(layer: bp.Layer, cols: bp.Columns) -> EigenKronBlock:
            kron = kron_block(space, layer, "eigen", kfac_approx)
            _, Ua, _, Ug = kron.eig()
            s = eigen_correction(space, layer, cols, Ua, Ug, chunk_elements)
            layer.grad_out, layer.inputs = None, ()
            block = EigenKronBlock(kron.weight, kron.bias, kron.wshape, kron.A, kron.G, s)
            block._eig = kron._eig   # the basis s was computed in
            return block
        blocks = factored_blocks(space, factor_fn, ekfac_reducer(kfac_approx), per_position, chunk_elements,
                                 make_block)
        return cls(space.layout, blocks, space.point)
