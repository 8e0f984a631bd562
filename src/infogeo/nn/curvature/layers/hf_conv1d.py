r"""Hugging Face's ``Conv1D`` (GPT-2's attention and MLP projections): a Linear layer whose weight is stored
transposed, ``(in, out)``, computing :math:`z = a W + b`.

Recognised by behaviour, without importing ``transformers``: a module named ``Conv1D`` with a 2-D weight
whose second axis is its ``nf`` attribute (the output width) and a bias of that width.
"""
from __future__ import annotations

import torch

from .linear import LinearRule


class HFConv1DRule(LinearRule):
    """``transformers.pytorch_utils.Conv1D``: :class:`.linear.LinearRule` with the weight transposed."""

    name = "hf_conv1d"
    description = "Hugging Face `Conv1D` (GPT-2): a Linear layer with an (in, out) weight; Kronecker factors"
    transposed = True

    def matches(self, module, args, kwargs) -> bool:
        w = getattr(module, "weight", None)
        b = getattr(module, "bias", None)
        return (type(module).__name__ == "Conv1D" and isinstance(w, torch.Tensor) and w.dim() == 2
                and getattr(module, "nf", None) == w.shape[1] and (b is None or tuple(b.shape) == (w.shape[1],))
                and len(args) == 1 and not kwargs and args[0].is_floating_point() and args[0].shape[-1] == w.shape[0])
