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
position-wise networks both agree.)  Layers K-FAC cannot factor (LayerNorm,
Embedding, grouped convolutions, custom modules) get their exact
diagonal block instead, so a network of any architecture has a K-FAC
curvature (mixed representation).
"""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import torch

from . import _backprop as bp, _reducers as red, _rows as rows
from .base import BlockCurvature
from .blocks import Block, KronBlock
from .diagonal import diag_blocks


APPROXIMATIONS = ("expand", "reduce")


def kron_inputs(layer: bp.Layer, approx: str = "expand") -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The rows whose second moment is :math:`A` (before the bias column), ``(N T, in)`` or ``(N, in)``, and
    the permutation to the weight's column order (``None`` when they are in it already).

    A convolution's patches come kernel-offset major (:func:`~._rows.kernel_major_patches`, the fast copy);
    the small factor is permuted instead of the large patch matrix.
    """
    if layer.kind == "linear":
        a, order = layer.inputs[0], None
        a = a.reshape(a.shape[0], -1, a.shape[-1])          # (N, T, in), a view
    else:
        a = rows.kernel_major_patches(layer)                # (N, L, prod(kernel) C_in)
        order = rows.weight_order(layer.module, a.device)
    if approx == "reduce":
        return a.mean(1), order
    return a.reshape(-1, a.shape[-1]), order


def input_factor(layer: bp.Layer, approx: str = "expand") -> torch.Tensor:
    r""":math:`A`, the second moment of the bias-augmented inputs (see the module docstring)."""
    a, order = kron_inputs(layer, approx)
    a = a.to(red.accumulation_dtype(a))
    R, n_in = a.shape
    if "weight" in layer.params and "bias" in layer.params:
        # A of the bias-augmented input [a, 1], filled blockwise instead of concatenating a copy of a
        A = torch.empty(n_in + 1, n_in + 1, dtype=a.dtype, device=a.device)
        red.gram(a, out=A[:n_in, :n_in])
        s = a.sum(0)
        A[:n_in, n_in] = s
        A[n_in, :n_in] = s
        A[n_in, n_in] = R
        if order is not None:
            order = torch.cat([order, order.new_tensor([n_in])])
    elif "weight" in layer.params:
        A = red.gram(a)
    else:
        return torch.ones(1, 1, dtype=a.dtype, device=a.device)
    if order is not None:
        A = A[order][:, order]
    return A.div_(R)


def kron_block(space, layer: bp.Layer, inverse: str = "eigen", approx: str = "expand") -> KronBlock:
    """The factors :math:`A, G` of one Linear or convolution layer from its recorded inputs and output gradients."""
    G = layer.stat.div_(space.batch_size)
    layer.stat = None
    return KronBlock(layer.params.get("weight"), layer.params.get("bias"), tuple(layer.module.weight.shape),
                     input_factor(layer, approx), G, inverse)


def is_factored(layer: bp.Layer) -> bool:
    return layer.kind in ("linear", "conv")


def kfac_reducer(approx: str = "expand"):
    r"""Column sinks for :func:`~._backprop.capture`: factorable layers keep only the gradient factor."""
    check_approx(approx)
    def reducer(layer: bp.Layer, cols: bp.Columns):
        return red.gram_sum(layer, cols, reduce_positions=approx == "reduce") if is_factored(layer) else None
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
    def build(cls, space, factor_fn, chunk_elements: int = rows.CHUNK_ELEMENTS, inverse: str = "eigen",
              kfac_approx: str = "expand", per_position: bool = True) -> "KFAC":
        if inverse not in KronBlock.INVERSES:
            raise ValueError(f"unknown K-FAC inverse {inverse!r}; expected one of {KronBlock.INVERSES}")
        blocks = factored_blocks(space, factor_fn, kfac_reducer(kfac_approx), per_position, chunk_elements,
                                 lambda layer, cols: kron_block(space, layer, inverse, kfac_approx))
        return cls(space.layout, blocks, space.point)


def check_approx(kfac_approx: str) -> str:
    if kfac_approx not in APPROXIMATIONS:
        raise ValueError(f"unknown kfac_approx {kfac_approx!r}; expected one of {APPROXIMATIONS}")
    return kfac_approx


def factored_blocks(space, factor_fn, reducer, per_position: bool, chunk_elements: int,
                    make_block: Callable[[bp.Layer, bp.Columns], Block]) -> List[Block]:
    """One capture; ``make_block(layer, cols)`` for layers with Kronecker factors, exact diagonals elsewhere."""
    _, cols, layers = bp.capture(space, factor_fn, reducer, per_position)
    blocks: List[Block] = []
    other: List[bp.Layer] = []
    with bp.without_autocast():
        for layer in layers:
            if is_factored(layer):
                blocks.append(make_block(layer, cols))
            else:
                other.append(layer)
        return blocks + diag_blocks(space, other, cols, chunk_elements)
