r"""One forward pass, one backward pass per output column: the per-layer quantities all curvatures share.

For output columns :math:`s_{kn}` (square-root columns of :math:`G_z`, Monte Carlo
samples, or loss gradients), every curvature here is built from the
*pseudo-gradients* :math:`\mathcal D w_{kn} = J_n^T s_{kn}` (the rows of the
curvature's square root, Dangel et al. 2020, "BackPACK").
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

Outputs with middle axes are handled by :class:`Columns` (one row per position).
The column sinks live in :mod:`._reducers`, the per-row pseudo-gradients of
layers that need them in :mod:`._rows`.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
from torch.autograd.graph import get_gradient_edge

from .._layers import uses_batch_statistics

logger = logging.getLogger(__name__)

#: a forward pass the caller already ran with :func:`recording_hook` (the optimizer's hooks on the
#: user's own forward): ``(z, calls, output_grads)``; :func:`capture` then runs no forward and keeps the graph
_RECORDED: contextvars.ContextVar = contextvars.ContextVar("recorded_forward", default=None)


@contextlib.contextmanager
def recorded_forward(z: torch.Tensor, calls: Dict[str, list],
                     output_grads: Optional[Callable[[str], Optional[torch.Tensor]]] = None):
    """Within this block, :func:`capture` uses the outputs ``z`` and layer ``calls`` of a forward
    already run (its graph still alive) instead of a forward pass of its own.

    ``output_grads(path)``, when given, is each layer's output gradient for the single column
    (what the caller's own backward of that column delivered): no backward pass is run then.
    """
    token = _RECORDED.set((z, calls, output_grads))
    try:
        yield
    finally:
        _RECORDED.reset(token)


#: set by :func:`constant_batch_statistics`
_CONSTANT_STATISTICS: contextvars.ContextVar = contextvars.ContextVar("constant_batch_statistics", default=False)


@contextlib.contextmanager
def constant_batch_statistics():
    """Within this block, :func:`capture` accepts normalisation layers that use the batch's statistics
    (BatchNorm in training mode): those statistics count as constants, so each example has its own
    pseudo-gradients (the practice of K-FAC optimizers) instead of the per-example curvature being refused."""
    token = _CONSTANT_STATISTICS.set(True)
    try:
        yield
    finally:
        _CONSTANT_STATISTICS.reset(token)


@contextlib.contextmanager
def without_autocast():
    """Autocast off for the statistics' own arithmetic (the caller's forward pass keeps it).

    Inside an autocast region a product of float32 tensors would run in half precision:
    the Gram matrices and squared sums are formed in the dtype their inputs promote to instead.
    """
    with contextlib.ExitStack() as stack:
        for device in ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",):
            stack.enter_context(torch.autocast(device, enabled=False))
        yield


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
    kind: str = "global"                   # 'linear' | 'conv' | 'batchnorm' | 'module' | 'global'
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
    if uses_batch_statistics(m) and len(args) == 1 and not kwargs and args[0].dim() >= 2:
        return "batchnorm"   # only reached under constant_batch_statistics()
    conv = next((c for c in _CONVS if isinstance(m, c)), None)
    if (conv is not None and type(m).forward is conv.forward and m.groups == 1 and len(args) == 1 and not kwargs
            and args[0].dim() == 2 + len(m.kernel_size)):
        return "conv"   # a Linear over the input patches
    return "module"


_CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)


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
    samples at each position the cross-position terms vanish in expectation,
    so Monte Carlo estimates stay unbiased for the per-position definitions.

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
    if not _CONSTANT_STATISTICS.get():
        space.check_per_example()
    layers = find_layers(space)
    recorded = _RECORDED.get()
    given = None
    if recorded is not None:
        z, calls, given = recorded
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
    with without_autocast():
        return _backpropagate(space, z, layers, calls, factor_fn, reducer, per_position, given, recorded is not None)


def _backpropagate(space, z: torch.Tensor, layers: List[Layer], calls: Dict[str, list], factor_fn: Callable,
                   reducer: Optional[Callable], per_position: Union[bool, Callable], given: Optional[Callable],
                   keep_graph: bool) -> Tuple[torch.Tensor, "Columns", List[Layer]]:
    """:func:`capture` after its forward pass: classify the layers, back-propagate the columns."""
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
    calls.clear()
    if callable(per_position):
        per_position = per_position(layers)
    cols = Columns(factor_fn(z.detach()), bool(per_position))
    if live:
        sinks = [reducer(l, cols) if reducer is not None else None for l in live]

        def deliver(j: int, grads) -> None:
            for l, sink, g in zip(live, sinks, grads):
                if g is None:
                    g = torch.zeros(l.output_shape, dtype=z.dtype, device=z.device)
                if sink is not None:
                    sink(j, g)
                    continue
                if l.grad_out is None:
                    l.grad_out = torch.empty((cols.count,) + tuple(g.shape), dtype=g.dtype, device=g.device)
                l.grad_out[j] = g

        if given is not None:
            if cols.count != 1:
                raise ValueError(f"output gradients of one backward serve one column, not {cols.count}")
            deliver(0, [given(l.path) for l in live])
        else:
            outs = [l.output for l in live]
            # one column at a time: a batched backward (is_grads_batched) measured slower on CPU
            J = cols.count
            for j in range(J):
                with torch.enable_grad():  # the last pass frees the graph (saved activations) as it goes,
                    # unless the graph is the user's own (recorded forward), still needed by their backward
                    grads = torch.autograd.grad(z, outs, cols[j], retain_graph=keep_graph or j < J - 1,
                                                allow_unused=True)
                deliver(j, grads)
                del grads
            del outs
        for l in live:
            l.output = None  # drop the graph
    return z.detach(), cols, layers
