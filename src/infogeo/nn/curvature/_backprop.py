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
import logging
import math
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch.autograd.graph import get_gradient_edge
from torch.func import functional_call

logger = logging.getLogger(__name__)

#: default number of per-example gradient elements materialised at once
CHUNK_ELEMENTS = 1 << 24


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


class Columns:
    r"""The output columns back-propagated by :func:`capture`: ``count`` tensors shaped like the outputs.

    ``S`` (shape ``(K, N, *middle, C)``) holds the factor columns :math:`s_{kn}`
    of the output metric (square-root columns, samples, or loss gradients).
    The curvature of outputs with middle axes is a sum over *positions*
    :math:`t` (``G = 1/N sum_n sum_t J_nt^T H_nt J_nt``), so with
    ``per_position`` every column is split into ``T = prod(middle)`` columns,
    column ``j = k T + t`` being :math:`s_{k}` at position :math:`t` and zero
    elsewhere: the pseudo-gradient of a row is then :math:`J_{nt}^T s_{knt}`
    (the gradient of one position's scalar :math:`\langle s_{knt}, z_{nt}\rangle`,
    which for shared weights collects that position's contributions from
    every place the weights are used), and sums of squared rows are exact.
    Without ``per_position`` the column is :math:`s_k` at all positions at
    once (one backward pass instead of ``T``): for independent zero-mean
    samples at each position the cross-position terms vanish in expectation
    (Monte Carlo), and K-FAC's gradient factor is defined this way.

    Rows are ordered ``r = j N + n`` (column ``j``, example ``n``).
    """

    def __init__(self, S: torch.Tensor, per_position: bool = True):
        self.S = S
        self.K, self.N, self.C = S.shape[0], S.shape[1], S.shape[-1]
        self.T = math.prod(S.shape[2:-1]) if per_position else 1
        self.count = self.K * self.T
        self.rows = self.count * self.N

    def __getitem__(self, j: int) -> torch.Tensor:
        """Column ``j``, shape ``(N, *middle, C)``."""
        k, t = divmod(j, self.T)
        if self.T == 1:
            return self.S[k]
        flat = self.S[k].reshape(self.N, self.T, self.C)
        col = torch.zeros_like(flat)
        col[:, t] = flat[:, t]
        return col.reshape(self.S.shape[1:])

    def row_block(self, sl: slice) -> torch.Tensor:
        """Rows ``sl`` (each one example's outputs cotangent), shape ``(len, *middle, C)``."""
        r = torch.arange(sl.start, sl.stop, device=self.S.device)
        j, n = r // self.N, r % self.N
        base = self.S[j // self.T, n]
        if self.T == 1:
            return base
        flat = base.reshape(len(r), self.T, self.C)
        mask = torch.nn.functional.one_hot(j % self.T, self.T).to(flat.dtype).unsqueeze(-1)
        return (flat * mask).reshape(base.shape)

    def group_ends(self, j: int) -> bool:
        """Whether column ``j`` is the last position of its factor column ``k``."""
        return (j + 1) % self.T == 0


def capture(space, factor_fn: Callable[[torch.Tensor], torch.Tensor],
            reducer: Optional[Callable[[Layer, "Columns"], Optional[Callable[[int, torch.Tensor], None]]]] = None,
            per_position: Union[bool, Callable[[List[Layer]], bool]] = True
            ) -> Tuple[torch.Tensor, Columns, List[Layer]]:
    """Forward once with hooks, then back-propagate the :class:`Columns` of ``factor_fn(z)`` to every layer output.

    The columns go back one at a time through the retained graph, so no
    ``(K, N, ...)`` gradient of the whole network is ever held.  ``reducer(layer, cols)``
    may return a callable ``sink(j, g)`` that consumes column ``j``'s output gradient
    ``(N, ...)`` of that layer (and accumulates what the curvature needs); layers
    without one keep all columns in ``layer.grad_out``, shape ``(count, N, ...)``.

    ``per_position`` may be a function of the classified layers (see :class:`Columns`).
    Returns ``(z, columns, layers)``.
    """
    space.check_per_example()
    layers = find_layers(space)
    calls: Dict[str, list] = {l.path: [] for l in layers}

    def make_hook(path):
        def hook(module, args, kwargs, output):
            calls[path].append(_Call.record(args, kwargs, output))
        return hook

    handles = [l.module.register_forward_hook(make_hook(l.path), with_kwargs=True) for l in layers]
    try:
        params = {n: space.point[n].detach().requires_grad_(True) for n in space.names}
        with torch.enable_grad():
            z = space.function(params)
    finally:
        for h in handles:
            h.remove()
    space.output_metric.check(z)
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
    if callable(per_position):
        per_position = per_position(layers)
    cols = Columns(factor_fn(z.detach()), bool(per_position))
    if live:
        sinks = [reducer(l, cols) if reducer is not None else None for l in live]
        outs = [l.output for l in live]
        J = cols.count
        for j in range(J):
            with torch.enable_grad():
                grads = torch.autograd.grad(z, outs, cols[j], retain_graph=j < J - 1, allow_unused=True)
            for l, sink, g in zip(live, sinks, grads):
                if g is None:
                    g = torch.zeros(l.output_shape, dtype=z.dtype, device=z.device)
                if sink is not None:
                    sink(j, g)
                    continue
                if l.grad_out is None:
                    l.grad_out = torch.empty((J,) + tuple(g.shape), dtype=g.dtype, device=g.device)
                l.grad_out[j] = g
            del grads
        del outs
        for l in live:
            l.output = None  # drop the graph
    return z.detach(), cols, layers


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

def square_sum(layer: Layer, cols: Optional[Columns] = None) -> Callable[[int, torch.Tensor], None]:
    r"""Sink accumulating :math:`\sum_j b_j^{\odot 2}` (shape of the layer output) into ``layer.stat``."""
    def sink(j, g):
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
    r""":math:`\sum_j b_j^{\odot 2}` as accumulated by :func:`square_sum`."""
    return layer.stat.square() if layer.stat_unsquared else layer.stat


def channels_last(layer: Layer, g: torch.Tensor) -> torch.Tensor:
    """Output gradient ``(N, ..., out)`` with the channel axis last (Conv2d has it at axis 1)."""
    return g.flatten(2).transpose(1, 2) if layer.kind == "conv2d" else g


def gram_sum(layer: Layer, cols: Columns, reduce_positions: bool = False) -> Callable[[int, torch.Tensor], None]:
    r"""Sink accumulating K-FAC's :math:`\sum_{k,n,t} b_{knt} b_{knt}^T` (output channels) into ``layer.stat``.

    :math:`b_{k}` is the layer's output gradient for the whole factor column
    :math:`s_k` (all positions at once): per-position columns of one group are
    summed first.  ``reduce_positions`` sums :math:`b_{knt}` over the layer's
    positions :math:`t` before the outer product (K-FAC-reduce).
    """
    acc: Dict[str, torch.Tensor] = {}

    def sink(j, g):
        acc["b"] = g if "b" not in acc else acc["b"].add_(g)
        if not cols.group_ends(j):
            return
        b = channels_last(layer, acc.pop("b"))
        b = b.reshape(b.shape[0], -1, b.shape[-1])
        b = b.sum(1) if reduce_positions else b.reshape(-1, b.shape[-1])
        layer.stat = gram(b) if layer.stat is None else layer.stat.add_(gram(b))
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


def row_grads(layer: Layer, space, cols: Columns, chunk_elements: int = CHUNK_ELEMENTS
              ) -> Iterator[Dict[str, torch.Tensor]]:
    r"""Per-row pseudo-gradients :math:`J_n^T s_{jn}` of this layer's parameters, in chunks of rows.

    Rows are ordered ``r = j * N + n``; each chunk is a dict full name -> ``(R, *shape)``.
    """
    N = space.batch_size
    R = cols.rows
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
        for res in _per_row_vjps(layer.module, p, layer.inputs, layer.kwargs, lambda sl: rows[sl], R, N,
                                 per_row, chunk_elements):
            yield {layer.params[a]: g for a, g in res.items()}
    else:
        yield from global_row_grads(space, layer.names, cols, chunk_elements)


def math_attention():
    """Scaled dot-product attention by its composite (math) kernel, which ``vmap`` batches and
    differentiates in every mode; the fused CPU/GPU kernels have neither a batching rule nor forward AD."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # older torch
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.MATH])


def _per_row_vjps(module: torch.nn.Module, p: Dict[str, torch.Tensor], inputs: Tuple[torch.Tensor, ...],
                  kwargs: Dict[str, Any], rows: Callable[[slice], torch.Tensor], R: int, N: int, per_row: int,
                  chunk_elements: int) -> Iterator[Dict[str, torch.Tensor]]:
    r"""Chunks of :math:`J_n^T g_r` for rows ``r = j N + n`` (``rows(slice)`` gives their cotangents).

    By a vmapped per-example vjp; modules that ``vmap`` cannot batch (the fused
    kernels of ``nn.RNN``/``LSTM``/``GRU``, data-dependent control flow) get the
    same rows by a loop over examples (one forward and one vjp per row).
    ``p`` replaces some of ``module``'s parameters (the others stay the module's
    own, which require grad: the results are detached from that graph).
    """
    def f_of(args_row):
        return lambda q: functional_call(module, q, tuple(x.unsqueeze(0) for x in args_row), kwargs, strict=False)

    def one(pp, args_row, g_row):
        return torch.func.vjp(f_of(args_row), pp)[1](g_row.unsqueeze(0))[0]

    batched = True
    for sl in _chunks(R, per_row, chunk_elements):
        n_idx = torch.arange(sl.start, sl.stop, device=p[next(iter(p))].device) % N
        g = rows(sl)
        if batched:
            try:
                with math_attention():
                    res = torch.func.vmap(one, in_dims=(None, 0, 0))(p, tuple(x[n_idx] for x in inputs), g)
                yield {n: t.detach() for n, t in res.items()}
                continue
            except (RuntimeError, NotImplementedError, ValueError) as err:
                logger.debug("per-example gradients of %s by a loop (vmap failed: %s)", type(module).__name__, err)
                batched = False
        yield _row_loop(f_of, p, inputs, n_idx, g)


def _row_loop(f_of, p: Dict[str, torch.Tensor], inputs: Tuple[torch.Tensor, ...], n_idx: torch.Tensor,
              g: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Per-row vjps without vmap: one forward per example in the chunk, one vjp per row."""
    out = {n: torch.empty((len(n_idx),) + tuple(t.shape), dtype=t.dtype, device=t.device) for n, t in p.items()}
    for n in torch.unique(n_idx).tolist():
        idx = (n_idx == n).nonzero().flatten()
        with torch.enable_grad():
            _, vjp = torch.func.vjp(f_of(tuple(x[n] for x in inputs)), p)
            for i in idx.tolist():
                res = vjp(g[i].unsqueeze(0))[0]
                for name, t in res.items():
                    out[name][i] = t.detach()
    return out


def global_row_grads(space, names: List[str], cols: Columns, chunk_elements: int = CHUNK_ELEMENTS
                     ) -> Iterator[Dict[str, torch.Tensor]]:
    """Per-row pseudo-gradients of ``names`` by per-example vjps of the whole network (fallback)."""
    p = {n: space.point[n].detach() for n in names}
    yield from _per_row_vjps(space.model, p, space.args, {}, cols.row_block, cols.rows, space.batch_size,
                             sum(t.numel() for t in p.values()), chunk_elements)
