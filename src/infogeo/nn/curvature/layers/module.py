r"""Any other module called once per forward: per-example vector-Jacobian products of the module itself.

By ``torch.func.vmap`` of the module's own vjp per example, or a loop over examples where vmap
cannot batch the module (the fused kernels of ``nn.RNN``/``LSTM``/``GRU``, data-dependent control
flow), with autograd's vjp where ``torch.func`` cannot run it at all (a recurrent layer on a
``PackedSequence``).  Exact for any module whose examples do not interact (LayerNorm, Embedding, attention,
recurrent layers, grouped convolutions, a user's own module).
"""
from __future__ import annotations

import logging
import warnings
from typing import Any, Callable, Dict, Iterator

import torch

from ....geometry.linearization import composite_attention as math_attention
from ...batch import Batch
from .._reducers import common_dtype
from .base import CHUNK_ELEMENTS, LayerRule, Rows, chunks

logger = logging.getLogger(__name__)


class ModuleRule(LayerRule):
    """The generic rule: any module, by per-example vjps of the module (last in the registry)."""

    name = "module"
    reads_parameters = True
    description = ("any other module called once (LayerNorm, cross-attention, RNN/LSTM/GRU, grouped or depthwise "
                   "convolutions, your own): exact per-example vjps of the module, diagonal blocks")

    def matches(self, module, args, kwargs) -> bool:
        return True

    def rows(self, layer, space, cols, chunk_elements: int = CHUNK_ELEMENTS) -> Rows:
        R, N = cols.rows, space.batch_size
        rows = layer.grad_out.reshape((R,) + tuple(layer.grad_out.shape[2:]))
        p = self.parameter_values(layer, space)
        module = layer.module
        for res in per_row_vjps(lambda batch, q: batch.call(module, q), p, Batch(layer.inputs, layer.kwargs),
                                lambda sl: rows[sl], R, N, layer.numel, chunk_elements):
            yield {layer.params[a]: g for a, g in res.items()}


def per_row_vjps(call: Callable[[Batch, Dict[str, torch.Tensor]], Any], p: Dict[str, torch.Tensor], inputs: Batch,
                 rows: Callable[[slice], torch.Tensor], R: int, N: int, per_row: int,
                 chunk_elements: int) -> Iterator[Dict[str, torch.Tensor]]:
    r"""Chunks of :math:`J_n^T g_r` for rows ``r = j N + n`` (``rows(slice)`` gives their cotangents).

    ``call(batch, q)`` evaluates the function (a module, or the whole network with its ``output_fn``)
    on a batch with the values ``q`` for the parameters ``p``; other parameters stay the module's own
    (which require grad: the results are detached from that graph).  By a vmapped per-example vjp,
    or by a loop over examples where vmap fails.  Inputs with a batch axis are cut per example; the
    others are passed whole.  The function is run again outside autocast: half-precision inputs
    recorded under autocast are promoted to the parameters' precision, the cotangents to the outputs'.
    """
    inputs = _promoted(inputs, p)
    per, constant = inputs.batched(N)

    def f_of(example):
        one_batch = inputs.join({k: x.unsqueeze(0) for k, x in example.items()}, constant)
        return lambda q: call(one_batch, q)

    def one(pp, example, g_row):
        z, vjp = torch.func.vjp(f_of(example), pp)
        return vjp(g_row.unsqueeze(0).to(z.dtype))[0]

    batched = True
    for sl in chunks(R, per_row, chunk_elements):
        n_idx = torch.arange(sl.start, sl.stop, device=p[next(iter(p))].device) % N
        g = rows(sl)
        if batched:
            try:
                # grad enabled, as in the loop: under no_grad some kernels (a float32 LSTM's) take an inference
                # path without the backward the vjp needs
                with torch.enable_grad(), math_attention(), warnings.catch_warnings():
                    # an operator without a batching rule is looped by torch, with a warning the user cannot act on
                    warnings.filterwarnings("ignore", message="There is a performance drop")
                    res = torch.func.vmap(one, in_dims=(None, 0, 0))(p, {k: x[n_idx] for k, x in per.items()}, g)
                yield {n: t.detach() for n, t in res.items()}
                continue
            except (RuntimeError, NotImplementedError, ValueError, TypeError, AttributeError) as err:
                logger.debug("per-example gradients by a loop (vmap failed: %s)", err)
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
        with torch.enable_grad(), math_attention():   # the fused kernels refuse a mask that requires grad
            f = f_of({k: x[n] for k, x in per.items()})
            try:
                z, vjp = torch.func.vjp(f, p)[:2]
            except RuntimeError as err:   # what torch.func cannot run (an LSTM on a PackedSequence): autograd's vjp
                logger.debug("per-example gradients by autograd (torch.func failed: %s)", err)
                z, vjp = _autograd_vjp(f, p, err)
            for i in idx.tolist():
                res = vjp(g[i].unsqueeze(0).to(z.dtype))[0]
                for name, t in res.items():
                    out[name][i] = t.detach()
    return out


def _autograd_vjp(f: Callable[[Dict[str, torch.Tensor]], Any], p: Dict[str, torch.Tensor], err: Exception):
    """``(z, vjp)`` as ``torch.func.vjp(f, p)`` gives them, by autograd on detached copies of ``p`` (one graph, kept
    for every row's vjp); ``err`` is raised again where ``f`` does not give one tensor."""
    leaves = {k: t.detach().requires_grad_(True) for k, t in p.items()}
    z = f(leaves)
    if not isinstance(z, torch.Tensor):
        raise err

    def vjp(g: torch.Tensor):
        grads = torch.autograd.grad(z, list(leaves.values()), grad_outputs=g, retain_graph=True, allow_unused=True)
        return ({k: torch.zeros_like(t) if d is None else d for (k, t), d in zip(leaves.items(), grads)},)
    return z, vjp
