r"""``torch.nn.MultiheadAttention`` as self-attention: Kronecker factors for its two projections.

The module computes, for an input :math:`x` (``(N, T, E)``, batch first),

.. math:: [q\ k\ v] = W_{in} x + b_{in},\qquad c = \operatorname{attention}(q, k, v),\qquad
          y = W_{out} c + b_{out},

with the projections applied through ``F.linear`` inside the module (``out_proj`` is never called as
a module).  In self-attention (query, key and value the same tensor) the packed in-projection is one
Linear map of :math:`x` onto :math:`3E` outputs, and the out-projection one of the attention's output
:math:`c`: each gets the Kronecker factors of a Linear layer shared over positions (Eschenhagen et al.
2023), :math:`A_{in}` from :math:`x`, :math:`G_{in}` from :math:`\partial[q\,k\,v]`; :math:`A_{out}` from
:math:`c`, :math:`G_{out}` from :math:`\partial y`.  The module's forward hides :math:`c` and
:math:`\partial[q\,k\,v]`, so the rule runs the attention again from the recorded input (the masks and
the ``is_causal`` hint read as torch reads them) and back-propagates each output column through that
copy: one attention backward per column.  The pseudo-gradients of both projections are then exact, and
so are the diagonal, block and EKFAC curvatures built from them.

Cross-attention (a key or value other than the query), separate q/k/v weights (``kdim``/``vdim``),
``add_bias_kv``, ``add_zero_attn`` and active dropout are left to the other routes (the parameters of the
module then go through the whole network, exactly).  Under FSDP2 the optimizer's hooks copy the
projections as the forward used them (unsharded), so an attention sharded in a unit of its own is read too.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

from ...fsdp import is_dtensor
from .._reducers import common_dtype
from .base import LayerRule, Part, attribute
from .linear import LinearRule

_MHA = torch.nn.MultiheadAttention
_KWARGS = {"key_padding_mask", "need_weights", "attn_mask", "average_attn_weights", "is_causal"}


class Projection:
    """One projection the attention module holds as parameters (``weight``, ``bias``) without a module of its own."""

    def __init__(self, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor]):
        self.weight, self.bias = weight, bias


def additive_mask(mask: Optional[torch.Tensor], dtype: torch.dtype) -> Optional[torch.Tensor]:
    """A boolean mask (``True``: not attended) as ``-inf``/``0``; a float mask as it is (torch's reading)."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))
    return mask.to(dtype)


def self_attention(m: Any, qkv: torch.Tensor, kwargs: Dict[str, Any]):
    r"""``(c, weights)``: the attention of module ``m`` on the packed projections ``qkv`` (``(N, T, 3E)``), before
    the out-projection, and the attention weights the module returns (``None`` unless ``need_weights``)."""
    N, T, _ = qkv.shape
    E, h = m.embed_dim, m.num_heads
    d = E // h
    q, k, v = (t.reshape(N, T, h, d).transpose(1, 2) for t in qkv.split(E, -1))
    need_weights = kwargs.get("need_weights", True)
    padding = additive_mask(kwargs.get("key_padding_mask"), qkv.dtype)
    if kwargs.get("is_causal", False) and padding is None and not need_weights:
        # torch then drops attn_mask and takes is_causal as the mask
        mask: Optional[torch.Tensor] = torch.ones(T, T, dtype=torch.bool, device=qkv.device).triu_(1)
        mask = additive_mask(mask, qkv.dtype)
    else:
        mask = additive_mask(kwargs.get("attn_mask"), qkv.dtype)
    if mask is not None:
        mask = mask.reshape(N, h, T, T) if mask.dim() == 3 else mask
    if padding is not None:
        padding = padding.reshape(N, 1, 1, T)
        mask = padding if mask is None else mask + padding
    scores = (q * d ** -0.5) @ k.transpose(-1, -2)
    if mask is not None:
        scores = scores + mask
    P = torch.softmax(scores, -1)
    c = (P @ v).transpose(1, 2).reshape(N, T, E)
    weights = (P.mean(1) if kwargs.get("average_attn_weights", True) else P) if need_weights else None
    return c, weights


class AttentionRule(LayerRule):
    r"""``nn.MultiheadAttention`` called as self-attention, batch first: two Linear sub-layers (:meth:`parts`)."""

    name = "attention"
    description = ("`torch.nn.MultiheadAttention`, self-attention, batch first: Kronecker factors for the packed "
                   "q/k/v projection and the out-projection, from the attention run again per output column")
    kronecker = True
    #: the module returns ``(output, weights)``: the gradients of both reach :meth:`part_gradients`
    tuple_outputs = True
    #: masks are keyword tensors, read as the module reads them
    tensor_kwargs = True
    #: the attention is run again with the projections' values
    reads_parameters = True

    def adopts(self, module: torch.nn.Module) -> Sequence[str]:
        # out_proj's parameters are used by the attention's forward, never by a call of out_proj
        return ("out_proj",) if isinstance(module, _MHA) else ()

    def matches(self, module, args, kwargs) -> bool:
        if not (isinstance(module, _MHA) and type(module).forward is _MHA.forward):
            return False
        m: Any = module
        return (m.batch_first and m._qkv_same_embed_dim and m.bias_k is None and m.bias_v is None
                and not m.add_zero_attn and not (m.training and m.dropout > 0)
                and len(args) == 3 and args[0] is args[1] and args[1] is args[2]
                and isinstance(args[0], torch.Tensor) and args[0].dim() == 3 and args[0].is_floating_point()
                and set(kwargs) <= _KWARGS)

    def rows(self, layer, space, cols, chunk_elements: int = 0):
        raise AssertionError("the attention rule's layer is replaced by its parts before any curvature reads it")

    def parts(self, layer, space) -> List[Part]:
        r"""The two projections as Linear layers: the in-projection on the input :math:`x`, the out-projection on
        the attention's output :math:`c` (each only where it has trainable parameters).  The attention is run
        again here, with a graph from the packed projections :math:`[q\,k\,v]` kept for :meth:`part_gradients`."""
        m = layer.module

        given = self.parameter_values(layer, space)

        def value(attr: str) -> Optional[torch.Tensor]:
            # the recorded call's or the point's value; a frozen parameter's is the module's own
            t = given[attr] if attr in given else attribute(m, attr)
            if is_dtensor(t):
                raise ValueError(f"the attention {layer.path!r} is run again at its parameters, which FSDP2 holds "
                                 f"sharded here: record it through the optimizer's hooks (NaturalGradient, "
                                 f"Preconditioner), which copy them as the forward used them")
            return None if t is None else t.detach()

        W_in, b_in, W_out = value("in_proj_weight"), value("in_proj_bias"), value("out_proj.weight")
        assert W_in is not None and W_out is not None   # packed projections (matches): both weights exist
        x = layer.inputs[0]
        dt = common_dtype(x, W_in, W_out)
        with torch.enable_grad():
            qkv = F.linear(x.to(dt), W_in.to(dt), None if b_in is None else b_in.to(dt)).detach().requires_grad_()
            c, weights = self_attention(m, qkv, layer.kwargs)
        subs = {}
        for part, module, names, inputs, width in (
                ("in_proj", Projection(m.in_proj_weight, m.in_proj_bias), ("in_proj_weight", "in_proj_bias"), x,
                 3 * m.embed_dim),
                ("out_proj", m.out_proj, ("out_proj.weight", "out_proj.bias"), c.detach(), m.embed_dim)):
            params = {role: layer.params[a] for role, a in zip(("weight", "bias"), names) if a in layer.params}
            if params:
                subs[part] = Part(part, module, params, LinearRule(), (inputs,), x.shape[:2] + (width,))
        layer.cache = (qkv, c, weights, W_out.to(dt), subs)
        return list(subs.values())

    def part_gradients(self, layer, g) -> List[torch.Tensor]:
        r"""One column's output gradients of the :meth:`parts`: :math:`\partial[q\,k\,v]` (through the attention
        run again) and :math:`\partial y`."""
        qkv, c, weights, W_out, subs = layer.cache
        g_out, g_weights = (g[0], g[1] if len(g) > 1 else None) if isinstance(g, (tuple, list)) else (g, None)
        out = []
        if "in_proj" in subs:
            roots, grads = [c], [g_out.to(c.dtype) @ W_out]
            if g_weights is not None and weights is not None:
                roots.append(weights)
                grads.append(g_weights.to(weights.dtype))
            with torch.enable_grad():
                out.append(torch.autograd.grad(roots, qkv, grads, retain_graph=True)[0])
        if "out_proj" in subs:
            out.append(g_out)
        return out

    def release(self, layer) -> None:
        """Drop the attention's copy and its graph (after the last column)."""
        layer.cache = None

