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
convolutions); the others (LayerNorm, Embedding, grouped convolutions, custom
modules), parameters taken through the whole network, and layers whose factor
would exceed ``max_factor_dim`` get their exact diagonal block instead, so a
network of any architecture has a K-FAC curvature (mixed representation).
"""
from __future__ import annotations

import warnings
from typing import Callable, List, Optional, Sequence

import torch

from . import _backprop as bp
from .blockwise import BlockCurvature
from .blocks import Block, KronBlock
from .diagonal import diag_blocks
from .layers.base import CHUNK_ELEMENTS


APPROXIMATIONS = ("expand", "reduce")


def position_mask(space) -> Optional[torch.Tensor]:
    r"""``(N, T)`` booleans: the output positions that carry a loss (``None`` when all do).

    Positions of weight zero (``ignore_index`` targets of a torch loss, class weight 0) add
    nothing to :math:`G`; :math:`A` leaves them out too, for layers with as many positions as
    the outputs (Eschenhagen et al. 2023 average :math:`A` over the positions of the loss).
    """
    w = getattr(space.output_metric, "weight", None)
    if not isinstance(w, torch.Tensor) or w.dim() < 1 or not bool((w == 0).any()):
        return None
    return (w != 0).reshape(w.shape[0], -1)


def kron_block(space, layer: bp.Layer, inverse: str = "eigen", approx: str = "expand",
               mask: Optional[torch.Tensor] = None) -> KronBlock:
    """The factors :math:`A, G` of one layer with Kronecker factors, from its inputs and output gradients."""
    G = layer.stat.div_(space.batch_size)
    layer.stat = None
    rule = layer.rule
    return KronBlock(layer.params.get("weight"), layer.params.get("bias"), tuple(layer.module.weight.shape),
                     rule.input_factor(layer, approx, mask), G, inverse, transposed=rule.transposed)


#: the largest side of a Kronecker factor kept by default (a float32 factor of this side is 256 MiB)
MAX_FACTOR_DIM = 8192
_TOO_LARGE: set = set()


def has_factors(layer: bp.Layer, max_factor_dim: int = MAX_FACTOR_DIM) -> bool:
    """Whether the layer gets Kronecker factors: its rule has them and both fit (sides <= ``max_factor_dim``).

    A vocabulary-sized layer (an output projection onto 50,257 tokens) would need a factor of
    :math:`50257^2` entries; it gets its exact diagonal block instead, and a warning says so once.
    """
    if not layer.rule.kronecker:
        return False
    out = layer.rule.out_features(layer.module)
    n_in = layer.module.weight.numel() // out + ("bias" in layer.params)
    if max(out, n_in) <= max_factor_dim:
        return True
    key = (layer.path, out, n_in)
    if key not in _TOO_LARGE:
        _TOO_LARGE.add(key)
        nbytes = max(out, n_in) ** 2 * layer.module.weight.element_size()
        warnings.warn(f"layer {layer.path!r}: a Kronecker factor of side {max(out, n_in)} would take "
                      f"{nbytes / 2 ** 30:.1f} GiB (max_factor_dim={max_factor_dim}); the layer gets its exact "
                      f"diagonal block instead", RuntimeWarning, stacklevel=5)
    return False


def kfac_reducer(approx: str = "expand", max_factor_dim: int = MAX_FACTOR_DIM):
    r"""Column sinks for :func:`~._backprop.capture`: layers with Kronecker factors keep only :math:`G`."""
    check_approx(approx)

    def reducer(layer: bp.Layer, cols: bp.Columns):
        if has_factors(layer, max_factor_dim):
            return layer.rule.gradient_sink(layer, approx == "reduce")
        return layer.rule.diagonal_sink(layer, cols)
    return reducer


class KFAC(BlockCurvature):
    r"""Kronecker-factored curvature, diagonal where a layer cannot be factored.

    Build with ``space.curvature("kfac", method=..., inverse="eigen" | "tikhonov",
    kfac_approx="expand" | "reduce")``.
    ``solve`` applies, per block, the exact inverse of :math:`G\otimes A + \lambda I`
    (``"eigen"``) or the factored-Tikhonov approximation
    :math:`(G + \tfrac{\sqrt\lambda}{\pi}I)^{-1}\otimes(A + \pi\sqrt\lambda I)^{-1}` (``"tikhonov"``),
    both from eigendecompositions of the factors (computed once, reused for any damping).
    """

    @classmethod
    def build(cls, space, factor_fn, chunk_elements: int = CHUNK_ELEMENTS, inverse: str = "eigen",
              kfac_approx: str = "expand", per_position: bool = True,
              max_factor_dim: int = MAX_FACTOR_DIM) -> "KFAC":
        if inverse not in KronBlock.INVERSES:
            raise ValueError(f"unknown K-FAC inverse {inverse!r}; expected one of {KronBlock.INVERSES}")
        mask = position_mask(space)
        blocks = factored_blocks(space, factor_fn, kfac_reducer(kfac_approx, max_factor_dim), per_position,
                                 chunk_elements, lambda layers, cols: [kron_block(space, l, inverse, kfac_approx, mask)
                                                                       for l in layers], max_factor_dim)
        return cls(space.layout, blocks, space.point)


def check_approx(kfac_approx: str) -> str:
    if kfac_approx not in APPROXIMATIONS:
        raise ValueError(f"unknown kfac_approx {kfac_approx!r}; expected one of {APPROXIMATIONS}")
    return kfac_approx


def factored_blocks(space, factor_fn, reducer, per_position: bool, chunk_elements: int,
                    make_blocks: Callable[[List[bp.Layer], bp.Columns], Sequence[Block]],
                    max_factor_dim: int = MAX_FACTOR_DIM) -> List[Block]:
    """One capture; ``make_blocks(layers, cols)`` for the layers with Kronecker factors, exact diagonals elsewhere."""
    cap = bp.capture(space, factor_fn, reducer, per_position)
    with bp.without_autocast():
        kron = [l for l in cap.layers if has_factors(l, max_factor_dim)]
        other = [l for l in cap.layers if not has_factors(l, max_factor_dim)]
        return list(make_blocks(kron, cap.cols)) + diag_blocks(space, other, cap.network, cap.cols, chunk_elements)
