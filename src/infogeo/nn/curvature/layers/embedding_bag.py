r"""``torch.nn.EmbeddingBag`` (``mode="sum"`` or ``"mean"``): :math:`z_n = W^T c_n`, a Linear map of each bag's
token counts.

A bag :math:`n` of tokens :math:`x_{n1}, \dots, x_{nL}` has the count vector :math:`c_n = \sum_t w_{nt}e_{x_{nt}}`
(:math:`w = 1` for ``"sum"``, one over the bag's size for ``"mean"``, 0 at ``padding_idx``, which torch leaves
out of the bag), so the layer is an :class:`~.base.AffineRule` with one position per example and input rows
:math:`c_n`: the per-example gradients, the closed-form diagonal and the Kronecker factors
:math:`A = \frac1N\sum_n c_nc_n^T`, :math:`G` follow from the base class.  Unlike a single token's one-hot
vector, a bag's counts are not orthogonal to the others', so :math:`A` is not diagonal; a vocabulary too large
for a dense factor gets its diagonal (``max_factor_dim``), as any wide side.  The weight is stored ``(V, d)``:
the ``(out, in)`` matrix is its transpose.  ``offsets``, ``per_sample_weights``, ``max_norm``, ``mode="max"`` and
sparse gradients are left to the generic rule.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from .base import AffineRule


class EmbeddingBagRule(AffineRule):
    """An EmbeddingBag summing or averaging the rows of a 2-D integer input (one bag per row)."""

    name = "embedding_bag"
    description = ("`torch.nn.EmbeddingBag`, `mode='sum'` or `'mean'`, 2-D input: a Linear map of each bag's "
                   "token counts (Kronecker factors over the rows of the weight)")
    transposed = True

    def matches(self, module, args, kwargs) -> bool:
        return (isinstance(module, torch.nn.EmbeddingBag) and type(module).forward is torch.nn.EmbeddingBag.forward
                and module.mode in ("sum", "mean") and module.max_norm is None and not module.scale_grad_by_freq
                and not module.sparse and len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor)
                and args[0].dim() == 2 and not args[0].is_floating_point() and not args[0].is_complex())

    def inputs(self, layer) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        tok = layer.inputs[0]
        m = layer.module
        w = torch.ones(tok.shape, dtype=m.weight.dtype, device=tok.device)
        if m.padding_idx is not None:
            w = w * (tok != m.padding_idx).to(w)
        if m.mode == "mean":   # the mean over the bag's tokens other than padding_idx (none: a zero output)
            w = w / w.sum(1, keepdim=True).clamp_min(1)
        counts = torch.zeros(tok.shape[0], m.weight.shape[0], dtype=w.dtype, device=w.device).scatter_add_(1, tok, w)
        return counts.unsqueeze(1), None

    def outputs(self, g: torch.Tensor) -> torch.Tensor:
        return g.reshape(g.shape[0], 1, g.shape[-1])

    def single_position(self, layer) -> bool:
        return True
