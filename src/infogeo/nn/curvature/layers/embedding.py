r"""``torch.nn.Embedding``: :math:`z_t = W^T e_{x_t}`, a Linear map of the one-hot vector of token :math:`x_t`.

The weight is stored ``(V, d)``, one row per token, so in the ``(out, in)`` layout of
:class:`~.base.AffineRule` the matrix is its transpose (``(d, V)``, as for Hugging Face's ``Conv1D``).
The one-hot inputs make the Kronecker input factor diagonal: :math:`A = \frac1{NT}\operatorname{diag}(c)`
with :math:`c_v` the number of positions holding token :math:`v`, and :math:`G` is the usual
``(d, d)`` second moment of the output gradients, so the block is :math:`\operatorname{diag}(c)/(NT)\otimes G`
over the rows of the weight (Eschenhagen et al. 2023 treat a layer shared over positions this way;
K-FAC-expand).  Under the Euclidean output metric a lone Embedding's K-FAC block equals the exact one,
:math:`\operatorname{diag}(c)/N \otimes I_d`.  The row of ``padding_idx`` gets no gradient (torch's
backward), so no curvature: it is left out of :math:`c`.

The per-row pseudo-gradients, the exact diagonal and EKFAC's scales are scatter-adds of the output
gradients into the rows of the tokens, :math:`O(RTd)`, never a one-hot ``(N, T, V)`` tensor.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from .._reducers import accumulation_dtype
from .base import CHUNK_ELEMENTS, AffineRule, Rows, chunks


class EmbeddingRule(AffineRule):
    """An Embedding called on one integer tensor (no ``max_norm``, ``scale_grad_by_freq`` or ``sparse``)."""

    name = "embedding"
    description = ("`torch.nn.Embedding`: Kronecker factors diag(token frequencies) ⊗ G over the rows of the weight "
                   "(K-FAC-expand; reduce: exact diagonal block)")
    transposed = True
    #: the input factor of one-hot inputs is diagonal (see :func:`~..kfac.factor_layout`)
    diagonal_inputs = True
    rows_are_positions = True

    def matches(self, module, args, kwargs) -> bool:
        # max_norm renormalises the weight in the forward, scale_grad_by_freq and sparse change the backward:
        # the generic rule (per-example vjps of the module itself) takes those
        return (isinstance(module, torch.nn.Embedding) and type(module).forward is torch.nn.Embedding.forward
                and module.max_norm is None and not module.scale_grad_by_freq and not module.sparse
                and len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor)
                and not args[0].is_floating_point() and not args[0].is_complex() and args[0].dim() >= 1)

    def tokens(self, layer) -> torch.Tensor:
        """The token ids as ``(N, T)``."""
        x = layer.inputs[0]
        return x.reshape(x.shape[0], -1)

    def _kept(self, layer, tok: torch.Tensor) -> torch.Tensor:
        """Booleans: the positions whose token is not ``padding_idx`` (those have no gradient)."""
        p = layer.module.padding_idx
        return torch.ones_like(tok, dtype=torch.bool) if p is None else tok != p

    def outputs(self, g: torch.Tensor) -> torch.Tensor:
        return g.reshape(g.shape[0], -1, g.shape[-1])

    def inputs(self, layer) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        raise NotImplementedError("an Embedding's inputs are token ids; its rule never forms the one-hot rows")

    # ------------------------------------------------------------ pseudo-gradients and the exact diagonal
    def rows(self, layer, space, cols, chunk_elements: int = CHUNK_ELEMENTS) -> Rows:
        tok = self.tokens(layer)
        N, T = tok.shape
        V, d = layer.module.weight.shape
        b = layer.grad_out
        bf = torch.stack([self.outputs(b[j]) for j in range(b.shape[0])]).reshape(cols.rows, T, d)
        bf = bf.to(accumulation_dtype(bf))
        bf = bf * self._kept(layer, tok).repeat(cols.rows // N, 1).unsqueeze(-1)
        for sl in chunks(cols.rows, layer.numel, chunk_elements):
            n_idx = torch.arange(sl.start, sl.stop, device=tok.device) % N
            r = sl.stop - sl.start
            dest = (torch.arange(r, device=tok.device).unsqueeze(1) * V + tok[n_idx]).reshape(-1)
            out = bf.new_zeros(r * V, d).index_add_(0, dest, bf[sl].reshape(-1, d))
            yield {layer.params["weight"]: out.reshape(r, V, d)}

    def _pair_sums(self, layer):
        """``(tokens, index, kept)``: each kept position's (example, token) pair as an index into the distinct
        pairs, and the token of each distinct pair; a row's pseudo-gradient is the sum of its output
        gradients over the positions of each pair."""
        tok = self.tokens(layer)
        N, T = tok.shape
        V = layer.module.weight.shape[0]
        kept = self._kept(layer, tok)
        ids = (torch.arange(N, device=tok.device).unsqueeze(1) * V + tok)[kept]
        pairs, index = torch.unique(ids, return_inverse=True)
        return pairs % V, index, kept

    def _squared_pair_sums(self, layer, rotate=None):
        r""":math:`\sum_j` of the squared per-pair sums of column :math:`j`'s output gradients (rotated by ``rotate``
        first), scattered onto the tokens: ``(V, d)``."""
        V, d = layer.module.weight.shape
        token, index, kept = self._pair_sums(layer)
        g = layer.grad_out
        dt = accumulation_dtype(g)
        out = torch.zeros(V, d, dtype=dt, device=g.device)
        for j in range(g.shape[0]):
            b = self.outputs(g[j])[kept].to(dt)
            if rotate is not None:
                b = b @ rotate
            S = b.new_zeros(token.shape[0], d).index_add_(0, index, b)
            out.index_add_(0, token, S.square())
        return out

    def diagonal_sink(self, layer, cols):
        return None   # every column is kept: the diagonal sums over (example, token) pairs first

    def diagonal(self, layer, N: int) -> Optional[Dict[str, torch.Tensor]]:
        r""":math:`(\mathcal D W_r)_{v} = \sum_{t:\,x_{nt} = v} b_{rt}`: the squares of those sums over the
        distinct (example, token) pairs, scattered onto the tokens."""
        d = self._squared_pair_sums(layer).div_(N)
        layer.grad_out = None
        return {layer.params["weight"]: d}

    def eigen_correction(self, layer, Ua: Optional[torch.Tensor], Ug: Optional[torch.Tensor]) -> torch.Tensor:
        r"""EKFAC's :math:`N s = \sum_r (U_G^T\mathcal D\bar W_r)^{\odot 2}` (``(d, V)``; :math:`U_A` is the identity
        of the diagonal input factor)."""
        return self._squared_pair_sums(layer, None if Ug is None else Ug.to(accumulation_dtype(Ug))).T.contiguous()

    # ------------------------------------------------------------ Kronecker factors
    def input_factor(self, layer, approx: str = "expand", mask: Optional[torch.Tensor] = None,
                     diagonal: bool = True) -> Tuple[torch.Tensor, int]:
        r"""``(A, R)``: :math:`A = \operatorname{diag}(c)/R`: the count of each token over the :math:`R` positions (those that
        carry a loss, with ``mask``), ``padding_idx`` left out."""
        tok = self.tokens(layer)
        kept = self._kept(layer, tok)
        if mask is not None and mask.shape == tok.shape:
            tok, kept = tok[mask], kept[mask]
        R = tok.numel()
        V = layer.module.weight.shape[0]
        c = torch.bincount(tok[kept].reshape(-1), minlength=V).to(accumulation_dtype(layer.module.weight))
        return c.div_(max(R, 1)), R
