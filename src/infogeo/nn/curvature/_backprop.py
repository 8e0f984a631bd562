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
Which modules are layers and what their calls recorded is in :mod:`.recorded`; the column sinks in :mod:`._reducers`; what each layer type contributes
(its pseudo-gradients, diagonal, Kronecker factors) in its rule, :mod:`.layers`.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import math
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional

import torch

from .recorded import Layer, classify, find_layers, owners, recording_hook
from .uses import ForeignUses

logger = logging.getLogger(__name__)

#: a forward pass the caller already ran with :func:`recording_hook` (the optimizer's hooks on the
#: user's own forward): ``(z, calls, output_grads)``; :func:`capture` then runs no forward and keeps the graph
_RECORDED: contextvars.ContextVar = contextvars.ContextVar("recorded_forward", default=None)


@contextlib.contextmanager
def recorded_forward(z: torch.Tensor, calls: Dict[str, list],
                     output_grads: Optional[Callable[[str], Optional[torch.Tensor]]] = None,
                     foreign: Iterable[str] = (), before_columns: Optional[Callable[[], None]] = None):
    """Within this block, :func:`capture` uses the outputs ``z`` and layer ``calls`` of a forward
    already run (its graph still alive) instead of a forward pass of its own.

    ``output_grads(path)``, when given, is each layer's output gradient for the single column
    (what the caller's own backward of that column delivered): no backward pass is run then.
    ``foreign`` names the parameters that forward used outside their modules (:class:`.uses.ForeignUses`).
    ``before_columns()`` is called once the columns are ready to go back through the graph, before any of
    them does (whether or not a layer needs them), and may raise to stop there: the ranks of a model sharded
    with ``fully_shard`` agree there, as that backward runs FSDP2's collectives.
    """
    token = _RECORDED.set((z, calls, output_grads, tuple(foreign) or tuple(getattr(calls, "foreign", ())),
                           before_columns))
    try:
        yield
    finally:
        _RECORDED.reset(token)


def recorded_outputs() -> Optional[torch.Tensor]:
    """The outputs :math:`z` of the forward :func:`recorded_forward` stands for (``None`` outside it): a
    :class:`~infogeo.nn.space.ParameterSpace` built inside takes its output shape from them, as a model sharded
    with ``fully_shard`` (FSDP2) cannot run on its sharded parameters there."""
    recorded = _RECORDED.get()
    return None if recorded is None else recorded[0]


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



@dataclass
class Capture:
    """What :func:`capture` leaves: the outputs, the columns, the layers a rule takes (with their recorded
    inputs and output gradients or sink statistics), and the parameters that go through the whole network."""

    z: torch.Tensor
    cols: "Columns"
    layers: List[Layer]
    network: List[List[str]]    # groups: each fallen-back layer's parameters, each shared parameter
    unused: List[str] = field(default_factory=list)   # parameters of layers the forward did not call

    @property
    def network_names(self) -> List[str]:
        return [n for group in self.network for n in group]


def capture(space, factor_fn: Callable[[torch.Tensor], torch.Tensor],
            reducer: Optional[Callable[[Layer, "Columns"], Optional[Callable[[int, torch.Tensor], None]]]] = None,
            per_position: bool = True) -> Capture:
    """Forward once with hooks, then back-propagate the :class:`Columns` of ``factor_fn(z)`` to every layer output.

    The columns go back one at a time through the retained graph, so no
    ``(K, N, ...)`` gradient of the whole network is ever held.  ``reducer(layer, cols)``
    may return a callable ``sink(j, g)`` that consumes column ``j``'s output gradient
    ``(N, ...)`` of that layer (and accumulates what the curvature needs); layers
    without one keep all columns in ``layer.grad_out``, shape ``(count, N, ...)``.
    """
    if not _CONSTANT_STATISTICS.get():
        space.check_per_example()
    layers, shared = find_layers(space.model, space.names)
    recorded = _RECORDED.get()
    given, ready = None, None
    if recorded is not None:
        z, calls, given, foreign, ready = recorded
        calls = {l.path: calls.get(l.path, []) for l in layers}
    else:
        calls = {l.path: [] for l in layers}
        handles = [l.module.register_forward_hook(recording_hook(calls, l.path), with_kwargs=True)
                   for l in layers]
        try:
            params = {n: space.point[n].detach().requires_grad_(True) for n in space.names}
            watch = ForeignUses(params, owners(space.model, space.names))
            with torch.enable_grad(), watch:
                z = space.function(params)
            foreign = watch.foreign
        finally:
            for h in handles:
                h.remove()
    with without_autocast():
        return _backpropagate(space, z, layers, shared, set(foreign), calls, factor_fn, reducer, per_position,
                              given, recorded is not None, ready)


def _backpropagate(space, z: torch.Tensor, layers: List[Layer], shared: List[str], foreign: set,
                   calls: Dict[str, list], factor_fn: Callable, reducer: Optional[Callable], per_position: bool,
                   given: Optional[Callable], keep_graph: bool, ready: Optional[Callable] = None) -> Capture:
    """:func:`capture` after its forward pass: classify the layers, back-propagate the columns."""
    confirm = getattr(space, "confirm_outputs", None)
    if confirm is not None:   # a ParameterSpace: its metric bound to outputs of this shape (a kept probe's?)
        confirm(z)
    space.output_metric.check(z)
    N = space.batch_size
    live: List[Layer] = []
    network = [[n] for n in shared]
    unused: List[str] = []
    for l in layers:
        if not calls[l.path] and not foreign & set(l.names):   # not reached: zero curvature, no pass needed
            l.rule = None
            unused += l.names
            continue
        l.rule = None if foreign & set(l.names) else classify(l, calls[l.path], N)
        if l.rule is not None:
            c = calls[l.path][0]
            l.inputs = tuple(a.detach() for a in c.args)
            l.kwargs = dict(c.kwargs)
            l.output, l.output_shape = (c.edges if c.multi else c.edge), c.shape
            l.values = c.values
            live.append(l)
        else:
            # one group per module holding the parameters directly (an adopted child's apart from its parent's)
            groups: Dict[str, List[str]] = {}
            for attr, name in l.params.items():
                groups.setdefault(attr.rpartition(".")[0], []).append(name)
            network += groups.values()
            logger.debug("layer %r: per-example route through the whole network (%d calls%s)", l.path,
                         len(calls[l.path]), ", a parameter used outside it" if foreign & set(l.names) else "")
    calls.clear()
    # a layer its rule reads as sub-layers (attention's projections) is replaced by them for the curvatures
    parts = {id(l): [Layer(f"{l.path}.{p.name}", p.module, p.params, rule=p.rule, inputs=p.inputs,
                           output_shape=p.output_shape) for p in ps]
             for l in live for ps in [l.rule.parts(l, space)] if ps is not None}
    readers = [r for l in live for r in parts.get(id(l), [l])]
    cols = Columns(factor_fn(z.detach()), bool(per_position))
    sinks = {id(r): reducer(r, cols) if reducer is not None else None for r in readers}
    if given is None and ready is not None:
        ready()
    if live:

        def give(r: Layer, j: int, g: torch.Tensor) -> None:
            sink = sinks[id(r)]
            if sink is not None:
                sink(j, g)
                return
            if r.grad_out is None:
                r.grad_out = torch.empty((cols.count,) + tuple(g.shape), dtype=g.dtype, device=g.device)
            r.grad_out[j] = g

        def deliver(j: int, grads) -> None:
            for l, g in zip(live, grads):
                first = g[0] if isinstance(g, (tuple, list)) else g
                if first is None:
                    first = torch.zeros(l.output_shape, dtype=z.dtype, device=z.device)
                    g = (first, *g[1:]) if isinstance(g, (tuple, list)) else first
                if id(l) not in parts:
                    give(l, j, first)
                    continue
                for r, gr in zip(parts[id(l)], l.rule.part_gradients(l, g)):
                    give(r, j, gr)

        if given is not None:
            if cols.count != 1:
                raise ValueError(f"output gradients of one backward serve one column, not {cols.count}")
            deliver(0, [given(l.path) for l in live])
        else:
            # one flat list of output edges (a tuple output has one per entry with a gradient)
            outs: list = []
            spans: list = []
            for l in live:
                if not isinstance(l.output, list):
                    spans.append(len(outs))
                    outs.append(l.output)
                    continue
                span = []
                for e in l.output:   # a tuple output: one index per entry, None where it has no gradient
                    span.append(None if e is None else len(outs))
                    if e is not None:
                        outs.append(e)
                spans.append(span)
            # one column at a time: a batched backward (is_grads_batched) measured slower on CPU
            J = cols.count
            for j in range(J):
                with torch.enable_grad():  # the last pass frees the graph (saved activations) as it goes,
                    # unless the graph is the user's own (recorded forward), still needed by their backward
                    flat = torch.autograd.grad(z, outs, cols[j], retain_graph=keep_graph or j < J - 1,
                                               allow_unused=True)
                deliver(j, [flat[s] if isinstance(s, int) else tuple(None if i is None else flat[i] for i in s)
                            for s in spans])
                del flat
            del outs
        for l in live:
            l.output = None  # drop the graph
            if id(l) in parts:
                l.rule.release(l)
    return Capture(z.detach(), cols, readers, network, unused)
