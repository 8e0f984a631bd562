r"""What a curvature needs to know about one layer type: the :class:`LayerRule` protocol.

Every curvature of :mod:`infogeo.nn.curvature` is built from the *pseudo-gradients*
:math:`\mathcal D w_r = J_r^T s_r` of each layer's parameters, one per row :math:`r`
(a factor column at one example and, per position, one output position; see
:class:`~.._backprop.Columns`).  A forward pass records each layer's inputs and a
backward pass per column its output gradients :math:`b_r`; a *rule* turns those
into what each curvature asks for:

* :meth:`LayerRule.rows` — the per-row pseudo-gradients (diagonal, block, EKFAC);
* :meth:`LayerRule.diagonal` — the exact diagonal without forming them, where a closed
  form exists (with :meth:`LayerRule.diagonal_sink` keeping only what it needs of each column);
* for layers with Kronecker factors (:class:`AffineRule`: a Linear map :math:`\bar W\bar a` of
  some view of the input, shared over positions) the rows of :math:`A` and :math:`G` and
  the layout of the weight (K-FAC, EKFAC; Martens & Grosse 2015, Grosse & Martens 2016,
  Eschenhagen et al. 2023).

The rules are tried in the order of :data:`~infogeo.nn.curvature.layers.RULES`; the first whose
:meth:`LayerRule.matches` accepts the layer's (single) call is used.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch

from .._reducers import accumulation_dtype, gram, square_sum, squared_product, squared_stat

Rows = Iterator[Dict[str, torch.Tensor]]
Sink = Callable[[int, torch.Tensor], None]

#: default number of per-example gradient elements materialised at once
CHUNK_ELEMENTS = 1 << 24


def chunks(R: int, per_row: int, chunk_elements: int) -> Iterator[slice]:
    """Slices of ``R`` rows holding about ``chunk_elements`` elements each (``per_row`` per row)."""
    step = max(1, chunk_elements // max(per_row, 1))
    for s in range(0, R, step):
        yield slice(s, min(R, s + step))


def attribute(module: Any, path: str) -> Any:
    """``module``'s attribute ``path`` (dotted: an adopted child's parameter, ``out_proj.weight``)."""
    return functools.reduce(getattr, path.split("."), module)


class Part(NamedTuple):
    """One sub-layer a rule splits its layer into (:meth:`LayerRule.parts`), read by a rule of its own."""

    name: str                       # appended to the layer's path
    module: Any                     # has the attributes named by ``params``
    params: Dict[str, str]          # attribute -> full parameter name
    rule: "LayerRule"
    inputs: Tuple[torch.Tensor, ...]
    output_shape: Tuple[int, ...]


def _beyond_rounding(rows: torch.Tensor) -> torch.Tensor:
    """Whether each row of one column's output gradients is more than rounding: its largest entry above the
    dtype's epsilon (at most float32's) times the column's largest.  A gradient that is zero in exact arithmetic
    can come out as 1e-21 (the query of a first token under causal attention, which attends to itself alone):
    an exact test kept or left out such a position by where the padding put it."""
    mag = rows.abs().amax(-1)
    eps = min(torch.finfo(rows.dtype).eps, torch.finfo(torch.float32).eps)
    return mag > eps * mag.amax()


class LayerRule:
    """How one layer type feeds the curvatures (module docstring).  Subclass and :func:`register` it.

    A rule is stateless: everything recorded lives on the :class:`~.._backprop.Layer` it is given
    (``layer.module``, ``layer.params`` attribute -> full name, ``layer.inputs``, ``layer.kwargs``,
    ``layer.grad_out`` of shape ``(columns, N, ...)``, and ``layer.stat`` for column sinks); a copy
    :meth:`bind`-ed to one call may hold that call's geometry.
    """

    #: short name shown in support tables and logs
    name: str = "rule"
    #: one line for the documentation's support table
    description: str = ""
    #: whether the layer has Kronecker factors (K-FAC and EKFAC blocks)
    kronecker: bool = False
    #: whether the rule takes a call returning a tuple (the gradients of all its tensors reach :meth:`part_gradients`)
    tuple_outputs: bool = False
    #: whether the rule reads tensors among the call's keyword arguments (otherwise such a call goes through the
    #: whole network)
    tensor_kwargs: bool = False
    #: whether the rule reads the parameters' values (not only the recorded inputs and output gradients): under
    #: FSDP2 the optimizer's hooks then copy them as the call used them (``layer.values``), unsharded
    reads_parameters: bool = False

    def adopts(self, module: torch.nn.Module) -> Sequence[str]:
        """Child modules of ``module`` whose parameters belong to ``module``'s layer: its forward uses them without
        calling the child (``nn.MultiheadAttention``'s ``out_proj``)."""
        return ()

    def parts(self, layer, space) -> Optional[List[Part]]:
        """The sub-layers this layer is read as (``None``: itself).  Their output gradients come from
        :meth:`part_gradients`; the curvatures see only the parts."""
        return None

    def part_gradients(self, layer, g: Any) -> List[torch.Tensor]:
        """One column's output gradients of the :meth:`parts`, in their order, from the layer's own ``g``."""
        raise NotImplementedError

    def release(self, layer) -> None:
        """Drop what :meth:`parts` kept for :meth:`part_gradients` (after the last column)."""

    @staticmethod
    def parameter_values(layer, space) -> Dict[str, torch.Tensor]:
        """``attribute -> value`` of the layer's parameters as its recorded call used them (``layer.values``, copied
        by the hooks where FSDP2 shards them again after the forward), else the point's, detached."""
        given = layer.values or {}
        return {a: (given[a] if a in given else space.point[full]).detach() for a, full in layer.params.items()}

    def matches(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> bool:
        """Whether this rule handles a call ``module(*args, **kwargs)`` (inputs batch-first)."""
        raise NotImplementedError

    def rows(self, layer, space, cols, chunk_elements: int = CHUNK_ELEMENTS) -> Rows:
        r"""Chunks of per-row pseudo-gradients ``{full name: (R, *shape)}``, rows ``r = j N + n``."""
        raise NotImplementedError

    def diagonal_sink(self, layer, cols) -> Optional[Sink]:
        """A column sink keeping what :meth:`diagonal` needs (``None``: keep every column)."""
        return None

    def diagonal(self, layer, N: int) -> Optional[Dict[str, torch.Tensor]]:
        r"""The exact diagonal :math:`\frac1N\sum_r \mathcal Dw_r^{\odot 2}` in closed form, or ``None``
        (then it is summed from :meth:`rows`)."""
        return None

    def bind(self, module: torch.nn.Module, args: tuple) -> "LayerRule":
        """The rule for one call ``module(*args)`` it :meth:`matches` (default: itself).  A rule whose reading of the
        output gradients depends on the call's geometry returns a copy holding it (a transposed convolution)."""
        return self

    def __repr__(self) -> str:
        return f"<layer rule {self.name!r}>"


class AffineRule(LayerRule):
    r"""A layer that is :math:`z_t = \bar W \bar a_t` at each of its positions :math:`t`, for some view
    :math:`a_t` of its input (a Linear layer: the input itself; a convolution: its patches).

    :math:`\bar W = [W\ b]` is the weight as an ``(out, in)`` matrix (see :meth:`weight_matrix`)
    with the bias as an extra column.  Subclasses give the input rows, the output-gradient rows
    and the weight's layout; the pseudo-gradients, the closed-form diagonal and the Kronecker
    factors follow here.
    """

    kronecker = True
    #: whether the weight is stored as ``(in, out, ...)``: :math:`W` is the transpose of ``weight.reshape(in, -1)``
    transposed = False
    #: whether a bias has a Kronecker block of its own, :math:`G_b\otimes[1]` with :math:`G_b` the exact second
    #: moment of its pseudo-gradients :meth:`bias_gradient`, instead of a column of :math:`\bar W` (a bias whose
    #: gradient is not the sum of the output-gradient rows: a transposed convolution's)
    separate_bias = False
    #: whether the rows of :math:`A` are the input's own last axis (Linear, Hugging Face ``Conv1D``): the
    #: optimizer's row route applies
    rows_are_inputs = False
    #: whether the rows of :math:`A` are the input's positions, one each (Linear and ``Conv1D`` on ``(N, ..., in)``,
    #: Embedding): a position with no gradient at the layer (padding) leaves :math:`A` (:func:`~..kfac.kron_blocks`)
    rows_are_positions = False

    def out_features(self, module: Any) -> int:
        w = module.weight
        return w.numel() // w.shape[0] if self.transposed else w.shape[0]

    def bias_column(self, layer) -> bool:
        r"""Whether the layer's bias is the last column of :math:`\bar W` (it has one, not in a block of its own)."""
        return "bias" in layer.params and not self.separate_bias

    def bias_gradient(self, g: torch.Tensor) -> torch.Tensor:
        """One column's bias pseudo-gradients ``(N, bias)`` (a :attr:`separate_bias` rule's; otherwise the
        summed output rows)."""
        return self.summed_outputs(g)

    def inputs(self, layer) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """``(a, order)``: input rows ``(N, T, in)`` and the permutation of their last axis to the column order
        of :math:`W` (``None``: already in it)."""
        raise NotImplementedError

    def ordered_inputs(self, layer) -> torch.Tensor:
        """Input rows ``(N, T, in)`` in the column order of :math:`W`."""
        a, order = self.inputs(layer)
        return a if order is None else a[..., order]

    def outputs(self, g: torch.Tensor) -> torch.Tensor:
        """One column's output gradient ``(N, ...)`` as rows ``(N, T, out)``."""
        raise NotImplementedError

    def position_rows(self, g: torch.Tensor) -> torch.Tensor:
        """One column's output gradient as rows ``(N T, out)`` (for :math:`G`; any layout the product takes)."""
        b = self.outputs(g)
        return b.reshape(-1, b.shape[-1])

    def single_position(self, layer) -> bool:
        """Whether the layer has one position per example (its diagonal then has a closed form)."""
        return False

    def summed_outputs(self, g: torch.Tensor) -> torch.Tensor:
        """One column's output gradient summed over the positions, ``(N, out)`` (K-FAC-reduce)."""
        return self.outputs(g).sum(1)

    def weight_matrix(self, module: Any, w: torch.Tensor) -> torch.Tensor:
        """A weight-shaped tensor ``w`` (leading axes allowed) as ``(..., out, in)``."""
        lead = w.shape[:w.dim() - module.weight.dim()]
        if self.transposed:
            return w.reshape(lead + (module.weight.shape[0], -1)).transpose(-1, -2)
        return w.reshape(lead + (module.weight.shape[0], -1))

    def weight_from_matrix(self, module: Any, M: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`weight_matrix`."""
        if self.transposed:
            M = M.transpose(-1, -2)
        return M.reshape(M.shape[:-2] + tuple(module.weight.shape))

    # ------------------------------------------------------------ pseudo-gradients
    def rows(self, layer, space, cols, chunk_elements: int = CHUNK_ELEMENTS) -> Rows:
        a = self.ordered_inputs(layer)
        b = layer.grad_out
        N, R = a.shape[0], cols.rows
        bf = torch.stack([self.outputs(b[j]) for j in range(b.shape[0])]).reshape(R, a.shape[1], -1)
        dt = accumulation_dtype(a, bf)   # autocast: half output gradients; the rows in float32
        a, bf = a.to(dt), bf.to(dt)
        m = layer.module
        own = None
        if "bias" in layer.params and self.separate_bias:
            own = torch.stack([self.bias_gradient(b[j]) for j in range(b.shape[0])]).reshape(R, -1).to(dt)
        for sl in chunks(R, layer.numel, chunk_elements):
            n_idx = torch.arange(sl.start, sl.stop, device=a.device) % N
            out = {}
            if "weight" in layer.params:
                gw = torch.einsum("rto,rti->roi", bf[sl], a[n_idx])
                out[layer.params["weight"]] = self.weight_from_matrix(m, gw)
            if "bias" in layer.params:
                out[layer.params["bias"]] = bf[sl].sum(1) if own is None else own[sl]
            yield out

    def closed_diagonal(self, layer) -> bool:
        r"""Whether :meth:`diagonal` has its closed form (one position; a bias, if any, a column of :math:`\bar W`)."""
        return self.single_position(layer) and not ("bias" in layer.params and self.separate_bias)

    def diagonal_sink(self, layer, cols) -> Optional[Sink]:
        return square_sum(layer) if self.closed_diagonal(layer) else None

    def diagonal(self, layer, N: int) -> Optional[Dict[str, torch.Tensor]]:
        r"""One position per example: :math:`(\mathcal D W_{r})_{oi}^2 = b_{ro}^2 a_{ri}^2`, so the diagonal is
        :math:`\frac1N\sum_n(\sum_k b_{kn}^{\odot 2})(a_n^{\odot 2})^T`, one product and no per-example gradient."""
        if not self.closed_diagonal(layer):
            return None
        # the sum over columns k first, O(N out): accumulated during the backward passes when possible
        b2 = squared_stat(layer) if layer.stat is not None else \
            torch.stack([self.outputs(g) for g in layer.grad_out]).square().sum(0)
        b2 = b2.reshape(b2.shape[0], -1)
        layer.stat = layer.grad_out = None   # released before the (out, in) result is allocated
        a = self.ordered_inputs(layer).reshape(b2.shape[0], -1)
        d = {}
        if "weight" in layer.params:
            d[layer.params["weight"]] = self.weight_from_matrix(layer.module, squared_product(b2, a).div_(N))
        if "bias" in layer.params:
            d[layer.params["bias"]] = b2.sum(0).div_(N)
        return d

    # ------------------------------------------------------------ Kronecker factors
    def factor_inputs(self, layer, approx: str = "expand",
                      mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        r"""The rows whose second moment is :math:`A` (before the bias column) and the permutation to the
        column order of :math:`W`.

        ``"expand"``: every position is a row, ``(N T, in)``; ``"reduce"``: the mean over positions,
        ``(N, in)``.  ``mask`` (``(N, T)``, boolean) keeps the positions that carry a loss.
        """
        a, order = self.inputs(layer)
        if mask is not None and mask.shape == a.shape[:2]:
            if approx == "reduce":   # an example none of whose positions carries a loss is no row (as in expand)
                w = mask.to(a.dtype).unsqueeze(-1)
                kept = mask.any(1)
                return ((a * w).sum(1) / w.sum(1).clamp_min(1))[kept], order
            return a[mask], order
        if approx == "reduce":
            return a.mean(1), order
        return a.reshape(-1, a.shape[-1]), order

    def input_factor(self, layer, approx: str = "expand", mask: Optional[torch.Tensor] = None,
                     diagonal: bool = False) -> Tuple[torch.Tensor, int]:
        r"""``(A, R)``: :math:`A`, the second moment of the :math:`R` bias-augmented input rows
        (:meth:`factor_inputs`); with ``diagonal``, only its diagonal (a vector: a side too wide for a dense
        factor)."""
        a, order = self.factor_inputs(layer, approx, mask)
        a = a.to(accumulation_dtype(a))
        R, n_in = a.shape
        bias = self.bias_column(layer)
        if order is not None and bias:
            order = torch.cat([order, order.new_tensor([n_in])])
        if diagonal:
            parts = ([a.square().sum(0)] if "weight" in layer.params else []) + \
                ([a.new_full((1,), float(R))] if bias else [])
            A = torch.cat(parts) if len(parts) > 1 else parts[0]
            return (A if order is None else A[order]).div_(max(R, 1)), R
        if "weight" in layer.params and bias:
            # A of the bias-augmented input [a, 1], filled blockwise instead of concatenating a copy of a
            A = torch.empty(n_in + 1, n_in + 1, dtype=a.dtype, device=a.device)
            gram(a, out=A[:n_in, :n_in])
            s = a.sum(0)
            A[:n_in, n_in] = s
            A[n_in, :n_in] = s
            A[n_in, n_in] = R
        elif "weight" in layer.params:
            A = gram(a)
        else:
            return torch.ones(1, 1, dtype=a.dtype, device=a.device), R
        if order is not None:
            A = A[order][:, order]
        return A.div_(max(R, 1)), R

    def gradient_sink(self, layer, reduce_positions: bool = False, diagonal: bool = False,
                      reached: bool = False) -> Sink:
        r"""Column sink accumulating :math:`\sum_{j,n,t} b_{jnt} b_{jnt}^T` into ``layer.stat`` (K-FAC's :math:`G`;
        with ``reduce_positions``, of :math:`\sum_t b_{jnt}`; with ``diagonal``, only its diagonal), and for a
        :attr:`separate_bias` the second moment of the bias pseudo-gradients into ``layer.bias_stat``; with
        ``reached`` (a loss that ignores positions), and for a layer whose rows are its inputs' positions (a Linear
        on a sequence, whose padding may never reach the loss), the rows with a gradient above rounding in any
        column (:func:`_beyond_rounding`) into ``layer.reached``."""
        track = not reduce_positions and (reached or self.rows_are_positions)
        own = "bias" in layer.params and self.separate_bias

        def moment(b, acc):
            if diagonal:
                b = b.to(accumulation_dtype(b))
                return b.square().sum(0) if acc is None else acc.add_(b.square().sum(0))
            return gram(b) if acc is None else acc.add_(gram(b))

        def sink(j, g):
            rows = self.summed_outputs(g) if reduce_positions else self.position_rows(g)
            layer.stat = moment(rows, layer.stat)
            if track and (reached or rows.shape[0] > g.shape[0]):   # the rows through which the layer reaches the loss
                nonzero = _beyond_rounding(rows)
                layer.reached = nonzero if layer.reached is None else layer.reached.logical_or_(nonzero)
            if own:
                layer.bias_stat = moment(self.bias_gradient(g), layer.bias_stat)
        return sink
