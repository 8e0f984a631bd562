r"""Per-row pseudo-gradients :math:`J_n^T s_{jn}` of one layer's parameters, in bounded-memory chunks.

Linear and convolution layers get them by an einsum of recorded inputs and output
gradients; other modules by ``torch.func.vmap`` of the module's own vjp per
example (a loop over examples where vmap cannot batch the module, e.g. the fused
kernels of recurrent layers); parameters whose module is called more than once,
not called, or returns non-tensors, by per-example vjps of the whole network.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn.functional as F

from ...geometry.linearization import composite_attention as math_attention

from ..batch import Batch
from ._backprop import Columns, Layer
from ._reducers import accumulation_dtype, common_dtype

logger = logging.getLogger(__name__)

#: default number of per-example gradient elements materialised at once
CHUNK_ELEMENTS = 1 << 24


def linear_inputs(layer: Layer) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """``(a, b, T)``: inputs ``(N, T, in)``, output gradients ``(K, N, T, out)``, positions ``T`` per example."""
    a = layer.inputs[0]
    N = a.shape[0]
    a = a.reshape(N, -1, a.shape[-1])
    b = layer.grad_out
    b = b.reshape(b.shape[0], N, -1, b.shape[-1])
    return a, b, a.shape[1]


def conv_padding(m: torch.nn.Module) -> List[Tuple[int, int]]:
    """``(left, right)`` padding of each spatial axis of a convolution (``"same"`` may be asymmetric)."""
    if isinstance(m.padding, str):
        if m.padding == "valid":
            return [(0, 0)] * len(m.kernel_size)
        total = [d * (k - 1) for d, k in zip(m.dilation, m.kernel_size)]   # "same", as torch pads it
        return [(t // 2, t - t // 2) for t in total]
    return [(p, p) for p in m.padding]


def kernel_major_patches(layer: Layer) -> torch.Tensor:
    """The input patches of a Conv1d/2d/3d layer, ``(N, L, prod(kernel) * C_in)``, kernel offset major.

    The input is padded as the layer pads it (zeros or its ``padding_mode``) and moved to
    channels last, then every spatial axis is cut into windows (views); the one copy reads
    runs of ``C_in`` contiguous entries, several times faster than gathering the
    channel-major order directly.  Positions are ordered like the flattened output;
    :func:`weight_order` permutes the entries to ``weight.reshape(out, -1)``'s order.
    """
    m = layer.module
    x = layer.inputs[0]
    nd = len(m.kernel_size)
    pads = conv_padding(m)
    if any(p for lr in pads for p in lr):
        mode = "constant" if m.padding_mode == "zeros" else m.padding_mode
        x = F.pad(x, [p for lr in reversed(pads) for p in lr], mode=mode)
    x = x.movedim(1, -1).contiguous()                    # (N, S_1..S_nd, C)
    for i, (k, s, d) in enumerate(zip(m.kernel_size, m.stride, m.dilation)):
        x = x.unfold(1 + i, d * (k - 1) + 1, s)          # the window is appended as the last axis
        if d > 1:
            x = x[..., ::d]
    N, C = x.shape[0], x.shape[1 + nd]
    x = x.movedim(1 + nd, -1)                            # (N, L_1..L_nd, k_1..k_nd, C)
    return x.reshape(N, -1, C * math.prod(m.kernel_size))


def weight_order(m: torch.nn.Module, device=None) -> Optional[torch.Tensor]:
    """Column ``j`` of ``weight.reshape(out, -1)`` (channel major) is column ``order[j]`` of the kernel-major
    patches; ``None`` for one input channel, where both orders agree."""
    C, K = m.weight.shape[1], math.prod(m.kernel_size)
    if C == 1:
        return None
    return torch.arange(C * K, device=device).reshape(K, C).T.flatten()


def conv_patches(layer: Layer) -> torch.Tensor:
    """The input patches of a Conv1d/2d/3d layer, ``(N, L, C_in * prod(kernel))`` (a Linear over them).

    Entries are ordered like ``weight.reshape(out, -1)`` and positions like the flattened output.
    """
    a = kernel_major_patches(layer)
    order = weight_order(layer.module, a.device)
    return a if order is None else a[..., order]


def conv_inputs(layer: Layer) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """A convolution as a Linear over patches: ``(N, L, C_in prod(kernel))`` and ``(K, N, L, C_out)``."""
    a = conv_patches(layer)
    b = layer.grad_out
    b = b.reshape(b.shape[0], b.shape[1], b.shape[2], -1).transpose(2, 3)
    return a, b, a.shape[1]


def layer_ab(layer: Layer):
    return linear_inputs(layer) if layer.kind == "linear" else conv_inputs(layer)


def _chunks(R: int, per_row: int, chunk_elements: int) -> Iterator[slice]:
    step = max(1, chunk_elements // max(per_row, 1))
    for s in range(0, R, step):
        yield slice(s, min(R, s + step))


def row_grads(layer: Layer, space, cols: Columns, chunk_elements: int = CHUNK_ELEMENTS
              ) -> Iterator[Dict[str, torch.Tensor]]:
    r"""Per-row pseudo-gradients :math:`J_n^T s_{jn}` of this layer's parameters, in chunks of rows.

    Rows are ordered ``r = j * N + n``; each chunk is a dict full name -> ``(R, *shape)``.
    """
    N = space.batch_size
    R = cols.rows
    per_row = layer.numel
    if layer.kind in ("linear", "conv"):
        a, b, _ = layer_ab(layer)
        m = layer.module
        # mixed precision (autocast: half output gradients, inputs of either precision): float32 rows
        dt = accumulation_dtype(a, b)
        a, bf = a.to(dt), b.reshape(R, b.shape[2], b.shape[3]).to(dt)
        for sl in _chunks(R, per_row, chunk_elements):
            n_idx = torch.arange(sl.start, sl.stop, device=a.device) % N
            out = {}
            if "weight" in layer.params:
                gw = torch.einsum("rto,rti->roi", bf[sl], a[n_idx])
                out[layer.params["weight"]] = gw.reshape((gw.shape[0],) + tuple(m.weight.shape))
            if "bias" in layer.params:
                out[layer.params["bias"]] = bf[sl].sum(1)
            yield out
    elif layer.kind == "batchnorm":
        yield from batchnorm_rows(layer, cols, chunk_elements)
    elif layer.kind == "module":
        rows = layer.grad_out.reshape((R,) + tuple(layer.grad_out.shape[2:]))
        p = {a: space.point[full].detach() for a, full in layer.params.items()}
        for res in _per_row_vjps(layer.module, p, Batch(layer.inputs, layer.kwargs), lambda sl: rows[sl], R, N,
                                 per_row, chunk_elements):
            yield {layer.params[a]: g for a, g in res.items()}
    else:
        yield from global_row_grads(space, layer.names, cols, chunk_elements)


def batchnorm_rows(layer: Layer, cols: Columns, chunk_elements: int = CHUNK_ELEMENTS
                   ) -> Iterator[Dict[str, torch.Tensor]]:
    r"""Per-row pseudo-gradients of a BatchNorm layer normalising with the batch's statistics, taken as constants.

    With :math:`\hat x = (x - \mu)/\sqrt{\sigma^2 + \epsilon}` (mean and biased variance over the
    batch and positions, as the layer computes them) the output is :math:`\gamma\hat x + \beta` per
    channel, so row :math:`r` has :math:`\sum_t b_{rt}\hat x_{nt}` for :math:`\gamma` and
    :math:`\sum_t b_{rt}` for :math:`\beta` (:math:`t` the positions).
    """
    m = layer.module
    x, b = layer.inputs[0], layer.grad_out
    dt = accumulation_dtype(x, b)   # half-precision rows under autocast: the sums in float32
    N, C = x.shape[0], x.shape[1]
    x = x.reshape(N, C, -1).to(dt)
    dims = (0, 2)
    xhat = (x - x.mean(dims, keepdim=True)) * torch.rsqrt(x.var(dims, unbiased=False, keepdim=True) + m.eps)
    R = cols.rows
    b = b.reshape(R, C, -1).to(dt)
    for sl in _chunks(R, C * x.shape[2], chunk_elements):
        n_idx = torch.arange(sl.start, sl.stop, device=x.device) % N
        out = {}
        if "weight" in layer.params:
            out[layer.params["weight"]] = (b[sl] * xhat[n_idx]).sum(2)
        if "bias" in layer.params:
            out[layer.params["bias"]] = b[sl].sum(2)
        yield out


def _per_row_vjps(module: torch.nn.Module, p: Dict[str, torch.Tensor], inputs: Batch,
                  rows: Callable[[slice], torch.Tensor], R: int, N: int, per_row: int,
                  chunk_elements: int) -> Iterator[Dict[str, torch.Tensor]]:
    r"""Chunks of :math:`J_n^T g_r` for rows ``r = j N + n`` (``rows(slice)`` gives their cotangents).

    By a vmapped per-example vjp; modules that ``vmap`` cannot batch (the fused
    kernels of ``nn.RNN``/``LSTM``/``GRU``, data-dependent control flow) get the
    same rows by a loop over examples (one forward and one vjp per row).
    ``p`` replaces some of ``module``'s parameters (the others stay the module's
    own, which require grad: the results are detached from that graph).  Inputs with
    a batch axis are cut per example; the others are passed whole.  The module is run
    again outside autocast: half-precision inputs recorded under autocast are promoted
    to the parameters' precision, the cotangents to the outputs'.
    """
    inputs = _promoted(inputs, p)
    per, constant = inputs.batched(N)

    def f_of(example):
        one_batch = inputs.join({k: x.unsqueeze(0) for k, x in example.items()}, constant)
        return lambda q: one_batch.call(module, q)

    def one(pp, example, g_row):
        z, vjp = torch.func.vjp(f_of(example), pp)
        return vjp(g_row.unsqueeze(0).to(z.dtype))[0]

    batched = True
    for sl in _chunks(R, per_row, chunk_elements):
        n_idx = torch.arange(sl.start, sl.stop, device=p[next(iter(p))].device) % N
        g = rows(sl)
        if batched:
            try:
                with math_attention():
                    res = torch.func.vmap(one, in_dims=(None, 0, 0))(p, {k: x[n_idx] for k, x in per.items()}, g)
                yield {n: t.detach() for n, t in res.items()}
                continue
            except (RuntimeError, NotImplementedError, ValueError) as err:
                logger.debug("per-example gradients of %s by a loop (vmap failed: %s)", type(module).__name__, err)
                batched = False
        yield _row_loop(f_of, p, per, n_idx, g)


def _promoted(inputs: Batch, p: Dict[str, torch.Tensor]) -> Batch:
    """Floating-point ``inputs`` in the dtype they and the parameters ``p`` promote to (integers untouched)."""
    dt = common_dtype(*p.values(), *inputs.tensors())
    return inputs.map(lambda x: x.to(dt) if x.is_floating_point() else x)


def _row_loop(f_of, p: Dict[str, torch.Tensor], per: Dict[Any, torch.Tensor], n_idx: torch.Tensor,
              g: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Per-row vjps without vmap: one forward per example in the chunk, one vjp per row."""
    out = {n: torch.empty((len(n_idx),) + tuple(t.shape), dtype=t.dtype, device=t.device) for n, t in p.items()}
    for n in torch.unique(n_idx).tolist():
        idx = (n_idx == n).nonzero().flatten()
        with torch.enable_grad():
            z, vjp = torch.func.vjp(f_of({k: x[n] for k, x in per.items()}), p)
            for i in idx.tolist():
                res = vjp(g[i].unsqueeze(0).to(z.dtype))[0]
                for name, t in res.items():
                    out[name][i] = t.detach()
    return out


def global_row_grads(space, names: List[str], cols: Columns, chunk_elements: int = CHUNK_ELEMENTS
                     ) -> Iterator[Dict[str, torch.Tensor]]:
    """Per-row pseudo-gradients of ``names`` by per-example vjps of the whole network (fallback)."""
    p = {n: space.point[n].detach() for n in names}
    yield from _per_row_vjps(space.model, p, space.batch, cols.row_block, cols.rows, space.batch_size,
                             sum(t.numel() for t in p.values()), chunk_elements)
