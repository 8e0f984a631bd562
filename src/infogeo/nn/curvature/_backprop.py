r"""One forward pass, one backward pass per output column: the per-layer quantities all curvatures share.

For output columns :math:`s_{kn}` (square-root columns of :math:`G_z`, Monte Carlo
samples, or loss gradients), every curvature here is built from the
*pseudo-gradients* :math:`\mathcal D w_{kn} = J_n^T s_{kn}` (seed 000, Sec. 5.2).
They are never formed for the whole network.  Instead:

1. one forward pass records, for each layer (module owning trainable
   parameters), its input :math:`a_n` and output (temporary forward hooks,
   removed before returning; the model's parameters are not touched);
2. the :math:`K` columns are back-propagated one after the other through the
   retained graph, giving each layer's output gradients :math:`b_{kn}`; a
   curvature may consume each column as it arrives (a running sum of
   :math:`b_{kn}^2` or of :math:`b_k^T b_k`), so that only one column's gradients
   are alive at a time (as curvlinops does for K-FAC) instead of a
   :math:`(K, N, \ldots)` stack per layer;
3. each curvature combines :math:`a` and :math:`b` per layer: for a Linear layer
   the pseudo-gradient of the weight is :math:`b_{kn} a_n^T`, so its squared
   entries sum to :math:`\sum_{k} b_{kn}^2 (a_n^2)^T` without any per-example
   gradient in memory (the trick backpack uses).

Layers that need genuinely per-example gradients (sequence dimensions, Conv2d,
LayerNorm, Embedding, any other module) get them in bounded-memory chunks: by
einsum for Linear/Conv2d, by ``torch.func.vmap`` of the layer's own vjp for other
modules.  Parameters whose module is called more than once, not called, or
returns non-tensors fall back to per-example vjps of the whole network.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch.autograd.graph import get_gradient_edge
from torch.func import functional_call

logger = logging.getLogger(__name__)

#: default number of per-example gradient elements materialised at once
CHUNK_ELEMENTS = 1 << 24

#: a forward pass the caller already ran with :func:`record_calls` (the optimizer's hooks on the
#: user's own forward): ``(z, calls)``; :func:`capture` then runs no forward and keeps the graph
_RECORDED: contextvars.ContextVar = contextvars.ContextVar("recorded_forward", default=None)


@contextlib.contextmanager
def recorded_forward(z: torch.Tensor, calls: Dict[str, list]):
    """Within this block, :func:`capture` uses the outputs ``z`` and layer ``calls`` of a forward
    already run (its graph still alive) instead of a forward pass of its own."""
    token = _RECORDED.set((z, calls))
    try:
        yield
    finally:
        _RECORDED.reset(token)


def recording_hook(calls: Dict[str, list], path: str) -> Callable:
    """A forward hook (``with_kwargs=True``) appending the call of layer ``path`` to ``calls[path]``."""
    def hook(module, args, kwargs, output):
        calls[path].append(_Call.record(args, kwargs, output))
    return hook


@dataclass
class Layer:
    """A module that owns trainable parameters, with what one forward/backward pass recorded."""

    path: str
    module: torch.nn.Module
    params: Dict[str, str]                 # attribute name -> full parameter name
    kind: str = "global"                   # 'linear' | 'conv2d' | 'module' | 'global'
    inputs: Tuple[torch.Tensor, ...] = ()  # detached positional inputs (batch axis first)
    kwargs: Dict[str, Any] = field(default_factory=dict)
    grad_out: Optional[torch.Tensor] = None  # (K, N, ...) output gradients
    output: Any = None                       # autograd edge of the output, during capture
    output_shape: Optional[torch.Size] = None
    stat: Optional[torch.Tensor] = None      # what a reducer accumulated over the columns
    stat_unsquared: bool = False             # square_sum: ``stat`` still holds the single column b

    @property
    def names(self) -> List[str]:
        return list(self.params.values())

    @property
    def numel(self) -> int:
        return sum(p.numel() for p in (getattr(self.module, a) for a in self.params))


def find_layers(space) -> List[Layer]:
    """Group the space's parameters by the module that owns them directly."""
    mods = dict(space.model.named_modules())
    groups: Dict[str, Dict[str, str]] = {}
    for name in space.names:
        path, _, attr = name.rpartition(".")
        groups.setdefault(path, {})[attr] = name
    return [Layer(path, mods[path], params) for path, params in groups.items()]


@dataclass
class _Call:
    """One forward call of a layer, recorded without keeping its output alive.

    The output is held only through a weak reference and its autograd edge:
    gradients are taken with respect to the edge, so the pre-activations that
    autograd itself does not save are freed before the backward passes.
    """

    args: tuple
    kwargs: dict
    edge: Any = None                   # torch.autograd.graph.GradientEdge of the output
    shape: Optional[torch.Size] = None
    version: Optional[int] = None
    ref: Optional[weakref.ref] = None

    @classmethod
    def record(cls, args, kwargs, output) -> "_Call":
        if not (isinstance(output, torch.Tensor) and output.requires_grad):
            return cls(args, kwargs)
        return cls(args, kwargs, get_gradient_edge(output), output.shape, output._version, weakref.ref(output))

    def modified_in_place(self) -> bool:
        out = self.ref() if self.ref is not None else None
        return out is not None and out._version != self.version


def _classify(layer: Layer, calls: List[_Call], N: int) -> str:
    if len(calls) != 1:
        return "global"
    c = calls[0]
    args, kwargs = c.args, c.kwargs
    if c.edge is None or c.modified_in_place() or len(c.shape) == 0 or c.shape[0] != N:
        return "global"  # unusual output, or modified in place after the layer (e.g. ReLU(inplace=True))
    if not args or not all(isinstance(a, torch.Tensor) and a.dim() and a.shape[0] == N for a in args):
        return "global"
    if any(isinstance(v, torch.Tensor) for v in kwargs.values()):
        return "global"
    m = layer.module
    if isinstance(m, torch.nn.Linear) and len(args) == 1 and not kwargs and args[0].is_floating_point():
        return "linear"
    if (isinstance(m, torch.nn.Conv2d) and type(m).forward is torch.nn.Conv2d.forward and m.groups == 1
            and m.padding_mode == "zeros" and not isinstance(m.padding, str) and len(args) == 1
            and args[0].dim() == 4):
        return "conv2d"
    return "module"


def capture(space, factor_fn: Callable[[torch.Tensor], torch.Tensor],
            reducer: Optional[Callable[[Layer], Optional[Callable[[torch.Tensor], None]]]] = None,
            ) -> Tuple[torch.Tensor, torch.Tensor, List[Layer]]:
    """Forward once with hooks, then back-propagate the columns ``S = factor_fn(z)`` to every layer output.

    The ``K`` columns go back one at a time through the retained graph, so no
    ``(K, N, ...)`` gradient of the whole network is ever held.  ``reducer(layer)``
    may return a callable that consumes one column's output gradient ``(N, ...)``
    of that layer (and accumulates what the curvature needs); layers without one
    keep all columns in ``layer.grad_out``, shape ``(K, N, ...)``.

    Returns ``(z, S, layers)``; ``S`` has shape ``(K,) + z.shape``.
    """
    space.check_per_example()
    layers = find_layers(space)
    recorded = _RECORDED.get()
    if recorded is not None:
        z, calls = recorded
        calls = {l.path: calls.get(l.path, []) for l in layers}
    else:
        calls = {l.path: [] for l in layers}
        handles = [l.module.register_forward_hook(recording_hook(calls, l.path), with_kwargs=True)
                   for l in layers]
        try:
            params = {n: space.point[n].detach().requires_grad_(True) for n in space.names}
            with torch.enable_grad():
                z = space.function(params)
        finally:
            for h in handles:
                h.remove()
    space.output_metric.check(z)
    S = factor_fn(z.detach())
    K = S.shape[0]
    N = space.batch_size
    live = []
    for l in layers:
        l.kind = _classify(l, calls[l.path], N)
        if l.kind != "global":
            c = calls[l.path][0]
            l.inputs = tuple(a.detach() for a in c.args)
            l.kwargs = dict(c.kwargs)
            l.output, l.output_shape = c.edge, c.shape
            live.append(l)
        else:
            logger.debug("layer %r: per-example fallback through the whole network (%d calls)",
                         l.path, len(calls[l.path]))
    del calls
    if live:
        sinks = [reducer(l) if reducer is not None else None for l in live]
        outs = [l.output for l in live]
        for k in range(K):
            with torch.enable_grad():
                grads = torch.autograd.grad(z, outs, S[k], retain_graph=recorded is not None or k < K - 1,
                                            allow_unused=True)
            for l, sink, g in zip(live, sinks, grads):
                if g is None:
                    g = torch.zeros(l.output_shape, dtype=z.dtype, device=z.device)
                if sink is not None:
                    sink(g)
                    continue
                if l.grad_out is None:
                    l.grad_out = torch.empty((K,) + tuple(g.shape), dtype=g.dtype, device=g.device)
                l.grad_out[k] = g
            del grads
        del outs
        for l in live:
            l.output = None  # drop the graph
    return z.detach(), S, layers


# ----------------------------------------------------------- reducers
#: column-block width of :func:`gram`
GRAM_BLOCK = 256


def gram(a: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    r""":math:`a^T a` for ``a`` of shape ``(R, n)``, computing only the upper block triangle.

    The result is symmetric, so for ``n`` above :data:`GRAM_BLOCK` the columns are cut
    into equal blocks and each off-diagonal block product is done once and mirrored
    (about half the flops of one ``a.T @ a``, a BLAS ``syrk``; the smaller products
    also stay in cache).  ``out`` (``(n, n)``, may be a view) receives the result.
    """
    n = a.shape[1]
    nb = -(-n // GRAM_BLOCK)
    if nb <= 1:
        if out is None:
            return a.T @ a
        out.copy_(a.T @ a)
        return out
    bs = -(-n // nb)
    if out is None:
        out = a.new_empty(n, n)
    for i in range(0, n, bs):
        ai = a[:, i:i + bs]
        for j in range(i, n, bs):
            blk = torch.mm(ai.T, a[:, j:j + bs])
            out[i:i + bs, j:j + bs] = blk
            if j != i:
                out[j:j + bs, i:i + bs] = blk.T
    return out

def square_sum(layer: Layer) -> Callable[[torch.Tensor], None]:
    r"""Sink accumulating :math:`\sum_k b_k^{\odot 2}` (shape of the layer output) into ``layer.stat``."""
    def sink(g):
        if layer.stat is None:
            # kept by reference, squared when a second column arrives or when read:
            # with one column (one Monte Carlo sample) no squared copy coexists with
            # the other layers' gradients, which is what sets the peak memory
            layer.stat, layer.stat_unsquared = g, True
        else:
            if layer.stat_unsquared:
                layer.stat, layer.stat_unsquared = layer.stat.square(), False
            layer.stat.addcmul_(g, g)
    return sink


def squared_stat(layer: Layer) -> torch.Tensor:
    r""":math:`\sum_k b_k^{\odot 2}` as accumulated by :func:`square_sum`."""
    return layer.stat.square() if layer.stat_unsquared else layer.stat


def gram_sum(layer: Layer) -> Callable[[torch.Tensor], None]:
    r"""Sink accumulating :math:`\sum_{k,n,t} b_{knt} b_{knt}^T` (output channels) into ``layer.stat``.

    For Linear the channel axis is last, for Conv2d it is axis 1 (positions after it).
    """
    def sink(g):
        if layer.kind == "conv2d":
            gm = g.flatten(2)                                   # (N, C, L)
            gg = torch.tensordot(gm, gm, dims=([0, 2], [0, 2]))
            layer.stat = gg if layer.stat is None else layer.stat.add_(gg)
            return
        gm = g.reshape(-1, g.shape[-1])
        layer.stat = gram(gm) if layer.stat is None else layer.stat.add_(gram(gm))
    return sink


# ----------------------------------------------------------- per-layer data
def linear_inputs(layer: Layer) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """``(a, b, T)``: inputs ``(N, T, in)``, output gradients ``(K, N, T, out)``, positions ``T`` per example."""
    a = layer.inputs[0]
    N = a.shape[0]
    a = a.reshape(N, -1, a.shape[-1])
    b = layer.grad_out
    b = b.reshape(b.shape[0], N, -1, b.shape[-1])
    return a, b, a.shape[1]


def conv_patches(layer: Layer) -> torch.Tensor:
    """The input patches of a Conv2d layer, ``(N, L, C_in*kh*kw)`` (the layer is a Linear over them)."""
    m = layer.module
    a = F.unfold(layer.inputs[0], m.kernel_size, dilation=m.dilation, padding=m.padding, stride=m.stride)
    return a.transpose(1, 2)


def conv_inputs(layer: Layer) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """Conv2d as a Linear over patches: ``(N, L, C_in*kh*kw)`` and ``(K, N, L, C_out)``."""
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


def row_grads(layer: Layer, space, S: torch.Tensor, chunk_elements: int = CHUNK_ELEMENTS
              ) -> Iterator[Dict[str, torch.Tensor]]:
    r"""Per-row pseudo-gradients :math:`J_n^T s_{kn}` of this layer's parameters, in chunks of rows.

    Rows are ordered ``r = k * N + n``; each chunk is a dict full name -> ``(R, *shape)``.
    """
    N = space.batch_size
    K = S.shape[0]
    R = K * N
    per_row = layer.numel
    if layer.kind in ("linear", "conv2d"):
        a, b, _ = layer_ab(layer)
        m = layer.module
        bf = b.reshape(R, b.shape[2], b.shape[3])
        for sl in _chunks(R, per_row, chunk_elements):
            n_idx = torch.arange(sl.start, sl.stop, device=a.device) % N
            out = {}
            if "weight" in layer.params:
                gw = torch.einsum("rto,rti->roi", bf[sl], a[n_idx])
                out[layer.params["weight"]] = gw.reshape((gw.shape[0],) + tuple(m.weight.shape))
            if "bias" in layer.params:
                out[layer.params["bias"]] = bf[sl].sum(1)
            yield out
    elif layer.kind == "module":
        rows = layer.grad_out.reshape((R,) + tuple(layer.grad_out.shape[2:]))
        p = {a: space.point[full].detach() for a, full in layer.params.items()}
        for res in _per_row_vjps(layer.module, p, layer.inputs, layer.kwargs, rows, N, per_row, chunk_elements):
            yield {layer.params[a]: g for a, g in res.items()}
    else:
        yield from global_row_grads(space, layer.names, S, chunk_elements)


def _per_row_vjps(module: torch.nn.Module, p: Dict[str, torch.Tensor], inputs: Tuple[torch.Tensor, ...],
                  kwargs: Dict[str, Any], rows: torch.Tensor, N: int, per_row: int, chunk_elements: int
                  ) -> Iterator[Dict[str, torch.Tensor]]:
    r"""Chunks of :math:`J_n^T g_r` for row ``r = k N + n`` of ``rows``, by a vmapped per-example vjp.

    ``p`` replaces some of ``module``'s parameters (the others stay the module's
    own, which require grad: the results are detached from that graph).
    """
    def one(pp, args_row, g_row):
        f = lambda q: functional_call(module, q, tuple(x.unsqueeze(0) for x in args_row), kwargs,  # noqa: E731
                                      strict=False)
        return torch.func.vjp(f, pp)[1](g_row.unsqueeze(0))[0]

    for sl in _chunks(rows.shape[0], per_row, chunk_elements):
        n_idx = torch.arange(sl.start, sl.stop, device=rows.device) % N
        res = torch.func.vmap(one, in_dims=(None, 0, 0))(p, tuple(x[n_idx] for x in inputs), rows[sl])
        yield {n: g.detach() for n, g in res.items()}


def global_row_grads(space, names: List[str], S: torch.Tensor, chunk_elements: int = CHUNK_ELEMENTS
                     ) -> Iterator[Dict[str, torch.Tensor]]:
    """Per-row pseudo-gradients of ``names`` by per-example vjps of the whole network (fallback)."""
    p = {n: space.point[n].detach() for n in names}
    rows = S.reshape((-1,) + tuple(S.shape[2:]))
    yield from _per_row_vjps(space.model, p, space.args, {}, rows, space.batch_size,
                             sum(t.numel() for t in p.values()), chunk_elements)
