r"""K-FAC: a Kronecker-factored block :math:`G_\ell \otimes A_\ell` per Linear and convolution layer.

Martens & Grosse (2015) for dense layers, Grosse & Martens (2016) for
convolutions, and for layers applied at :math:`T` positions with shared weights
(sequence models, the patches of a convolution) the two flavours of
Eschenhagen et al. (2023), "Kronecker-Factored Approximate Curvature for Modern
Neural Network Architectures".  With (bias-augmented) layer inputs
:math:`\bar a_{nt}` and the layer's output gradients :math:`b_{jnt}` at its
position :math:`t` for the rows :math:`j` of the exact curvature (one per
output position and square-root column of the output metric, see
:class:`~._backprop.Columns`; Monte Carlo: one per sample),

* ``kfac_approx="expand"`` (default) treats positions like examples:

  .. math:: A = \frac1{NT}\sum_{n,t}\bar a_{nt}\bar a_{nt}^T,\qquad
            G = \frac1N\sum_{j,n,t} b_{jnt} b_{jnt}^T;

* ``kfac_approx="reduce"`` aggregates over positions first:

  .. math:: A = \frac1N\sum_n \hat a_n\hat a_n^T,\ \hat a_n = \frac1T\sum_t\bar a_{nt},\qquad
            G = \frac1N\sum_{j,n} \Big(\sum_t b_{jnt}\Big)\Big(\sum_t b_{jnt}\Big)^T.

Expand is exact for deep linear networks applied position-wise with a
per-position Euclidean loss; reduce is exact when the positions are summed
before such a loss (Eschenhagen et al., 2023, Sec. 3); both are exact for a
single Linear layer under the Euclidean output metric.  Because the rows are
per output position, the Monte Carlo factor (one backward pass per sample) is
unbiased for the exact one on any network.  (Back-propagating each square-root
column at all output positions at once, as curvlinops does, adds
cross-position terms when layers mix positions, e.g. attention; on
position-wise networks both agree.)  Which layers have Kronecker factors is
said by their rule (:mod:`.layers`: Linear, Hugging Face ``Conv1D``,
convolutions and transposed convolutions (whose bias gets a Kronecker block of its
own, the exact :math:`G_b\otimes[1]`), Embedding with a diagonal input factor); the
others (LayerNorm, grouped convolutions, custom modules) and parameters taken through the whole
network get their exact diagonal block instead, so a network of any
architecture has a K-FAC curvature (mixed representation).  A factor side
above ``max_factor_dim``, or whose dense factor would exceed ``max_factor_bytes``, is kept as its
diagonal (:func:`factor_layout`).
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable, List, Optional, Sequence, Tuple, cast

import torch

from . import _backprop as bp
from .blockwise import BlockCurvature
from .blocks import Block
from .kron import KronBlock
from .diagonal import diag_blocks, zero_block
from ._reducers import accumulation_dtype
from .layers.base import CHUNK_ELEMENTS


APPROXIMATIONS = ("expand", "reduce")


def position_mask(space) -> Optional[torch.Tensor]:
    r"""``(N, T)`` booleans: the output positions that carry a loss (``None`` when all do).

    Positions of weight zero (``ignore_index`` targets of a torch loss, class weight 0) add
    nothing to :math:`G` through the layers that act on each position alone; :math:`A` leaves them out
    too, for layers with as many positions as the outputs (Eschenhagen et al. 2023 average :math:`A` over
    the positions of the loss), unless they reach the loss through the layer (:func:`kron_blocks`: before
    an attention, an ignored position's keys and values feed the others, and its gradient there is not zero).
    """
    w = getattr(space.output_metric, "weight", None)
    if not isinstance(w, torch.Tensor) or w.dim() < 1 or not bool((w == 0).any()):
        return None
    return (w != 0).reshape(w.shape[0], -1)


#: ``(G diagonal, A diagonal)``: which of a layer's Kronecker factors are kept as their diagonal
Layout = Tuple[bool, bool]


def kron_blocks(space, layer: bp.Layer, cls: type, layout: Layout, approx: str = "expand",
                mask: Optional[torch.Tensor] = None) -> List[KronBlock]:
    r"""The factors :math:`A, G` of one layer with Kronecker factors, from its inputs and output gradients,
    as a block of class ``cls``; a bias kept out of :math:`\bar W` (``rule.separate_bias``) gets a second block
    :math:`G_b\otimes[1]`, its exact second moment (weight first)."""
    N = space.batch_size
    rule = layer.rule
    weight = cast(torch.Tensor, layer.module.weight)
    bias = layer.params.get("bias")
    own = bias is not None and rule.separate_bias
    blocks = []
    reached = layer.reached
    if reached is not None and rule.rows_are_positions and reached.numel() > N:
        # a layer whose rows are its input's positions: those with no gradient here leave A as they leave G, and
        # only those (padding behind an attention mask; after the last attention, all but the positions a read-out
        # takes; positions the loss ignores), whatever the outputs' positions are: an encoder's are not its
        # decoder's, whose ignored labels said nothing of the encoder's padding.  Where every position reaches
        # the loss, A is the mean over all of them
        mask = None if bool(reached.all()) else reached.reshape(N, -1)
    elif mask is not None and reached is not None and reached.numel() == mask.numel():
        # positions the loss ignores still count where they reach it through this layer (attention mixes the
        # positions: the keys and values of an ignored position feed the others); only positions with no
        # gradient here leave A, as they leave G
        mask = mask | reached.reshape(mask.shape)
    if "weight" in layer.params or not own:
        A, rows = rule.input_factor(layer, approx, mask, diagonal=layout[1])
        blocks.append(cls(layer.params.get("weight"), None if own else bias, tuple(weight.shape), A,
                          layer.stat.div_(N), transposed=rule.transposed))
        blocks[-1].rows = rows
    if own:
        Gb = layer.bias_stat.div_(N)
        blocks.append(cls(None, bias, (Gb.shape[0],), Gb.new_ones(1, 1), Gb))
    layer.stat = layer.bias_stat = layer.reached = None
    return blocks


#: the largest side of a dense Kronecker factor kept by default (a float32 factor of this side is 256 MiB)
MAX_FACTOR_DIM = 8192
#: the most bytes one dense Kronecker factor may take by default (a float32 factor of side 16384, float64 11585):
#: a guard when ``max_factor_dim`` is raised (a 50,257-wide side would take 10.1 GB in float32)
MAX_FACTOR_BYTES = 1 << 30
_SAID: set = set()


def check_factor_limits(max_factor_dim: Any, max_factor_bytes: Any) -> Tuple[int, int]:
    """The two limits on a dense factor as integers, or a ``ValueError`` naming the one that cannot be used."""
    for name, v in (("max_factor_dim", max_factor_dim), ("max_factor_bytes", max_factor_bytes)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v >= 1) or v != int(v):
            raise ValueError(f"{name} must be a positive whole number (a factor side in entries, or bytes), "
                             f"got {v!r}")
    return int(max_factor_dim), int(max_factor_bytes)


def dense_side(n: int, itemsize: int, max_factor_dim: int = MAX_FACTOR_DIM,
               max_factor_bytes: int = MAX_FACTOR_BYTES) -> bool:
    r"""Whether a factor of side ``n`` is kept dense: :math:`n \le` ``max_factor_dim`` and its :math:`n^2`
    entries of ``itemsize`` bytes fit in ``max_factor_bytes``."""
    return n <= max_factor_dim and n * n * itemsize <= max_factor_bytes


def factor_layout(layer: bp.Layer, max_factor_dim: int = MAX_FACTOR_DIM, approx: str = "expand",
                  max_factor_bytes: int = MAX_FACTOR_BYTES) -> Optional[Layout]:
    r"""Which Kronecker factors the layer gets: ``(G diagonal, A diagonal)``, or ``None`` (its exact diagonal block).

    A factor is dense while its side is at most ``max_factor_dim`` and its dense storage, in the precision
    it is formed in (the parameters', at least float32), at most ``max_factor_bytes`` (:func:`dense_side`).
    A vocabulary-sized side (an output projection onto 50,257 tokens would need a :math:`50257^2` factor,
    10.1 GB in float32) keeps only the diagonal of its factor, the other side staying dense; a warning says
    so once, with the bytes the dense factor would have taken and those of the layout taken.
    An Embedding's input factor is diagonal by nature (one-hot inputs: the token frequencies), except
    under ``"reduce"`` (the mean of a sequence's one-hot vectors is not one-hot), where it gets its exact
    diagonal block.  A layer with both sides too wide gets its exact diagonal block.
    """
    rule = layer.rule
    if not rule.kronecker:
        return None
    diag_inputs = getattr(rule, "diagonal_inputs", False)
    if diag_inputs and approx == "reduce":
        return None
    weight = cast(torch.Tensor, layer.module.weight)
    out = rule.out_features(layer.module)
    n_in = weight.numel() // out + rule.bias_column(layer)
    size = torch.empty((), dtype=accumulation_dtype(weight)).element_size()
    wide_g = not dense_side(out, size, max_factor_dim, max_factor_bytes)
    wide_a = not diag_inputs and not dense_side(n_in, size, max_factor_dim, max_factor_bytes)
    if not (wide_g or wide_a):
        return (False, diag_inputs)
    key = (layer.path, out, n_in, max_factor_dim, max_factor_bytes)
    limits = f"max_factor_dim={max_factor_dim}, max_factor_bytes={max_factor_bytes:,}"
    if (wide_g and wide_a) or (wide_g and diag_inputs):
        if key not in _SAID:
            _SAID.add(key)
            warnings.warn(f"layer {layer.path!r}: both sides of its Kronecker factors ({out} and {n_in}) exceed "
                          f"{limits} or are diagonal; the layer gets its exact diagonal block instead",
                          RuntimeWarning, stacklevel=5)
        return None
    if key not in _SAID:
        _SAID.add(key)
        wide, narrow = (out, n_in) if wide_g else (n_in, out)
        layout = f"diag(G) ({out}) ⊗ A ({n_in}×{n_in})" if wide_g else f"G ({out}×{out}) ⊗ diag(A) ({n_in})"
        warnings.warn(f"layer {layer.path!r}: a dense Kronecker factor of its {'output' if wide_g else 'input'} "
                      f"side {wide} would take {wide ** 2 * size:,} bytes ({_size(wide ** 2 * size)}; {limits}); "
                      f"its factors are {layout} instead, {_size((wide + narrow ** 2) * size)}",
                      RuntimeWarning, stacklevel=5)
    return (wide_g, wide_a)


def _size(nbytes: int) -> str:
    unit = next(u for u in ("GiB", "MiB", "KiB", "B") if nbytes >= 2 ** (10 * ("B", "KiB", "MiB", "GiB").index(u))
                or u == "B")
    return f"{nbytes / 2 ** (10 * ('B', 'KiB', 'MiB', 'GiB').index(unit)):.1f} {unit}"


def kfac_reducer(approx: str = "expand", max_factor_dim: int = MAX_FACTOR_DIM,
                 max_factor_bytes: int = MAX_FACTOR_BYTES, factors_only: bool = False, reached: bool = False):
    r"""Column sinks for :func:`~._backprop.capture`: layers with Kronecker factors keep only :math:`G` (and, with
    ``reached``, the rows that reach the loss: :func:`kron_blocks`); the others their diagonal's statistics
    (``factors_only``: nothing)."""
    check_approx(approx)

    def reducer(layer: bp.Layer, cols: bp.Columns):
        layout = factor_layout(layer, max_factor_dim, approx, max_factor_bytes)
        if layout is not None:
            return layer.rule.gradient_sink(layer, approx == "reduce", diagonal=layout[0], reached=reached)
        return _discard if factors_only else layer.rule.diagonal_sink(layer, cols)
    return reducer


def _discard(j: int, g: torch.Tensor) -> None:
    """A column sink that keeps nothing."""


class KFAC(BlockCurvature):
    r"""Kronecker-factored curvature, diagonal where a layer cannot be factored.

    Build with ``space.curvature("kfac", method=..., inverse="eigen" | "tikhonov",
    kfac_approx="expand" | "reduce")``.  The ``inverse`` selects the blocks' class (the kinds table,
    :mod:`.kinds`): :class:`~.eigenbasis.ExactKronBlock`, the exact inverse of :math:`G\otimes A + \lambda I`
    in the Kronecker eigenbasis (``"eigen"``), or :class:`~.kron.TikhonovKronBlock`, the factored-Tikhonov
    approximation :math:`(G + \tfrac{\sqrt\lambda}{\pi}I)^{-1}\otimes(A + \pi\sqrt\lambda I)^{-1}` (``"tikhonov"``).
    ``factors_only=True`` leaves the blocks without Kronecker factors zero, their statistics not gathered (a step
    rule that uses the factors' eigenbases alone, :class:`~infogeo.nn.NaturalGradient`'s ``"eigen-adam"``, where
    those parameters take Adam's step: their exact diagonal costs per-example products, through the whole
    network for a parameter used outside its layer).
    """

    @classmethod
    def build(cls, space, factor_fn, chunk_elements: int = CHUNK_ELEMENTS, inverse: str = "eigen",
              kfac_approx: str = "expand", per_position: bool = True,
              max_factor_dim: int = MAX_FACTOR_DIM, max_factor_bytes: int = MAX_FACTOR_BYTES,
              factors_only: bool = False) -> "KFAC":
        from .kinds import KINDS
        block_cls = KINDS["kfac"].inverse(inverse)
        mask = position_mask(space)
        limits = check_factor_limits(max_factor_dim, max_factor_bytes)

        def make_blocks(layers, layouts, cols):
            return [b for l, lay in zip(layers, layouts)
                    for b in kron_blocks(space, l, block_cls, lay, kfac_approx, mask)]
        blocks = factored_blocks(space, factor_fn, kfac_reducer(kfac_approx, *limits, bool(factors_only), mask is not None),
                                 per_position, chunk_elements, make_blocks, limits, kfac_approx, bool(factors_only))
        return cls(space.layout, blocks, space.point)


def check_approx(kfac_approx: str) -> str:
    if kfac_approx not in APPROXIMATIONS:
        raise ValueError(f"unknown kfac_approx {kfac_approx!r}; expected one of {APPROXIMATIONS}")
    return kfac_approx


def factored_blocks(space, factor_fn, reducer, per_position: bool, chunk_elements: int,
                    make_blocks: Callable[[List[bp.Layer], List[Layout], bp.Columns], Sequence[Block]],
                    limits: Tuple[int, int] = (MAX_FACTOR_DIM, MAX_FACTOR_BYTES),
                    approx: str = "expand", factors_only: bool = False) -> List[Block]:
    """One capture; ``make_blocks(layers, layouts, cols)`` for the layers with Kronecker factors, exact diagonals
    elsewhere (``limits``: ``(max_factor_dim, max_factor_bytes)``; ``factors_only``: zero ones, nothing computed)."""
    cap = bp.capture(space, factor_fn, reducer, per_position)
    with bp.without_autocast():
        layouts = [factor_layout(l, limits[0], approx, limits[1]) for l in cap.layers]
        kron = [(l, lay) for l, lay in zip(cap.layers, layouts) if lay is not None]
        other = [l for l, lay in zip(cap.layers, layouts) if lay is None]
        blocks = list(make_blocks([l for l, _ in kron], [lay for _, lay in kron], cap.cols)) if kron else []
        if factors_only:
            for l in other:
                l.stat = l.grad_out = None
                l.inputs = ()
            return blocks + zero_block(space, [n for l in other for n in l.names] + cap.network_names + cap.unused)
        return blocks + diag_blocks(space, other, cap.network, cap.cols, chunk_elements, cap.unused)
