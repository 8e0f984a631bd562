r"""Kronecker-factored blocks :math:`G \otimes A` (K-FAC, EKFAC, Shampoo): the factors and their products, and the
factored-damping inverse.

:class:`KronBlock` holds the factors (either may be diagonal, stored as a vector);
:class:`TikhonovKronBlock` applies Martens & Grosse's factored damping.  The solves in the Kronecker eigenbasis
(K-FAC's exact damped inverse, EKFAC's and Shampoo's scales) are :mod:`.eigenbasis`'s.  Blocks are linear
algebra: they know nothing of how their factors were estimated.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple, cast

import torch

from ...linalg import NotPositiveDefiniteError
from .._params import ParamLayout, held_product, working, working_dtype
from .blocks import Block, shifted


def _left(G: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """:math:`G X` for a factor ``G`` stored whole (2-D) or as its diagonal (1-D)."""
    G = G.to(X.dtype)   # a no-op unless the factor is kept in another precision (``factor_dtype``)
    return G @ X if G.dim() == 2 else G.unsqueeze(1) * X


def _right(X: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """:math:`X A` for a factor ``A`` stored whole (2-D) or as its diagonal (1-D)."""
    A = A.to(X.dtype)
    return X @ A if A.dim() == 2 else X * A


def _factor_diagonal(F: torch.Tensor) -> torch.Tensor:
    return torch.diagonal(F) if F.dim() == 2 else F


def _factor_dense(F: torch.Tensor) -> torch.Tensor:
    return F if F.dim() == 2 else torch.diag(F)


class KronBlock(Block):
    r"""A Kronecker-factored block :math:`G \otimes A` for a layer whose weight is a matrix (K-FAC's layout).

    The weight (reshaped to ``(out, in)``, or transposed when stored ``(in, out)``) and bias are
    concatenated to :math:`\bar W = [W\ b]`; :math:`(G \otimes A)\,\mathrm{vec}(\bar W) = \mathrm{vec}(G \bar W A)`
    (row-major vec).  Either factor may be diagonal, stored as a vector: the input factor of an
    Embedding (one-hot inputs: token frequencies) and the vocabulary side of an output projection
    too wide for a dense factor.

    This class holds the factors and their products; the damped inverse is its subclasses':
    :class:`ExactKronBlock` (the exact inverse of :math:`G\otimes A + \lambda I` in the Kronecker
    eigenbasis), :class:`TikhonovKronBlock` (Martens & Grosse's factored damping), and EKFAC's
    :class:`~.ekfac.EigenKronBlock` (the same eigenbasis with other scales).
    """

    kind = "kfac"
    #: under the communication-optimised placement the owner's factorisation is broadcast
    shares_factorisation = True

    def __init__(self, weight: Optional[str], bias: Optional[str], wshape: Tuple[int, ...], A: torch.Tensor,
                 G: torch.Tensor, transposed: bool = False):
        self.weight, self.bias, self.wshape = weight, bias, tuple(wshape)
        #: the weight is stored ``(in, out, ...)`` (Hugging Face ``Conv1D``, ``Embedding``, a transposed convolution):
        #: :math:`W` is the transpose of ``weight.reshape(in, -1)``
        self.transposed = bool(transposed)
        self.out = math.prod(self.wshape[1:]) if self.transposed else self.wshape[0]
        self.names = [n for n in (weight, bias) if n is not None]
        #: the factors; ``None`` for one held only as its factorisation (:meth:`factor`)
        self._factors: Dict[str, Optional[torch.Tensor]] = {"A": A, "G": G}
        #: the factors' shapes (a diagonal factor's has one entry), known also while one is held as its factorisation
        self.shapes: Dict[str, Tuple[int, ...]] = {"A": tuple(A.shape), "G": tuple(G.shape)}
        self._like = A.new_empty(0)   # the factors' dtype and device
        self._layout: Optional["KronBlock"] = None
        #: the input rows (positions) :math:`A` averages, where this block's statistics were just measured
        self.rows: Optional[int] = None

    @property
    def A(self) -> torch.Tensor:
        """The input factor (:meth:`factor`)."""
        return self.factor("A")

    @property
    def G(self) -> torch.Tensor:
        """The output-gradient factor (:meth:`factor`)."""
        return self.factor("G")

    def factor(self, name: str) -> torch.Tensor:
        """The factor ``name`` (``"A"`` or ``"G"``): the one held, or else rebuilt from the factorisation that
        replaced it (:meth:`rebuilt`; a product as large as the factor, made anew at each call)."""
        F = self._factors[name]
        return self.rebuilt(name) if F is None else F

    def rebuilt(self, name: str) -> torch.Tensor:
        """The factor ``name`` from its factorisation, for a block that let the factor go (none does here)."""
        raise RuntimeError(f"the factor {name} of {self.names} is not held")

    def reference(self) -> torch.Tensor:
        return self._like

    def stats(self):
        return {"A": self.A, "G": self.G}

    def stat_shapes(self):
        return dict(self.shapes)

    def stat_rows(self):
        # a block without a measurement (adopted from another rank's structure) has no rows of its own
        return {"A": float(self.rows or 0)}

    def count_rows(self, rows):
        self.rows = int(rows["A"])

    def with_stats(self, stats):
        return type(self)(self.weight, self.bias, self.wshape, stats["A"], stats["G"], self.transposed)

    def join(self, v):
        r""":math:`\bar W = [W\ b]`, ``(out, in [+ 1])``, of the components ``v``."""
        out = self.out
        parts = []
        if self.weight is not None:
            w = v[self.weight]
            parts.append(w.reshape(w.shape[0], -1).T if self.transposed else w.reshape(out, -1))
        if self.bias is not None:
            parts.append(v[self.bias].reshape(out, 1))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    def split(self, Wb):
        r"""The components ``{name: tensor}`` of :math:`\bar W = [W\ b]` (the inverse of :meth:`join`)."""
        out = {}
        if self.weight is not None:
            W = Wb[:, :Wb.shape[1] - (self.bias is not None)]
            out[self.weight] = (W.T.contiguous() if self.transposed else W).reshape(self.wshape)
        if self.bias is not None:
            out[self.bias] = Wb[:, -1]
        return out

    def layout_only(self) -> "KronBlock":
        """A block with this one's :meth:`join` and :meth:`split` and no factors (what a step rule keeps to lay
        out a step, without keeping the factors alive); made once per block."""
        if self._layout is None:
            self._layout = KronBlock(self.weight, self.bias, self.wshape, self._like, self._like, self.transposed)
        return self._layout

    def mv(self, v):
        return self.split(_right(_left(self.G, self.join(v)), self.A))

    def _inputs_times(self, a: torch.Tensor, M: Optional[torch.Tensor]) -> torch.Tensor:
        r""":math:`\bar a M` for input rows ``a`` (R, in) with the bias column :math:`\bar a = [a, 1]` implicit
        (``M`` whole, a diagonal vector, or ``None`` for the identity).  A whole ``M`` held narrower than ``a``
        (an eigenbasis held in bfloat16) multiplies as :func:`~infogeo.nn._params.held_product` does."""
        if M is not None and M.dim() == 2:
            if M.dtype != a.dtype and self.weight is not None:
                aM = held_product(a, M[:-1] if self.bias is not None else M, a.dtype)
                return aM if self.bias is None else aM + M[-1:].to(aM.dtype)
            if self.bias is not None and self.weight is not None:
                return torch.addmm(M[-1:], a, M[:-1])     # without concatenating the ones column
            if self.weight is not None:
                return a @ M
            return M.expand(a.shape[0], M.shape[1])
        parts = []
        if self.weight is not None:
            parts.append(a if M is None else a * M[:a.shape[1]])
        if self.bias is not None:
            parts.append(a.new_ones(a.shape[0], 1) if M is None else M[-1:].expand(a.shape[0], 1))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    def solve(self, v, damping):
        return self.split(self.solve_matrix(self.join(v), damping))

    def solve_matrix(self, V: torch.Tensor, damping: float) -> torch.Tensor:
        r"""The damped inverse applied to :math:`\bar V` as an ``(out, in [+ 1])`` matrix."""
        raise NotImplementedError

    def solve_rows(self, b: torch.Tensor, a: torch.Tensor, damping: float) -> Dict[str, torch.Tensor]:
        r"""The solve of the gradient :math:`\bar V = \sum_r b_r \bar a_r^T` from its rows ``b`` (R, out)
        (the layer's output gradients) and ``a`` (R, in) (its inputs, the bias column implicit)."""
        return self.split(self.solve_matrix(b.T @ self._inputs_times(a, None), damping))

    def diagonal(self):
        return self.split(torch.outer(_factor_diagonal(self.G), _factor_diagonal(self.A)))

    def flat_index(self, layout: ParamLayout) -> torch.Tensor:
        r"""Global flat index of each entry of :math:`\bar W` (row-major): weight columns, then the bias column."""
        out = self.out
        cols = []
        if self.weight is not None:
            off, n_in = layout.offsets[self.weight], layout.numels[self.weight] // out
            idx = torch.arange(out * n_in)
            # W[o, i] is entry (i, o) of an (in, out) weight
            cols.append(off + (idx.reshape(n_in, out).T if self.transposed else idx.reshape(out, n_in)))
        if self.bias is not None:
            cols.append(layout.offsets[self.bias] + torch.arange(out).reshape(out, 1))
        return torch.cat(cols, dim=1).reshape(-1).to(self._like.device)

    def dense(self, layout):
        return self.flat_index(layout), torch.kron(_factor_dense(self.G), _factor_dense(self.A))

    def layout_name(self) -> str:
        """``"G ⊗ A"`` with ``diag(·)`` for a diagonal factor (for logs and messages)."""
        side = lambda n: f"diag({n})" if len(self.shapes[n]) == 1 else n  # noqa: E731
        return f"{side('G')} ⊗ {side('A')}"

    # ------------------------------------------------------------ the distributed owner's factorisation
    def factorisation(self, damping: float) -> List[torch.Tensor]:
        """The tensors :meth:`solve` needs at ``damping`` (what a distributed owner broadcasts)."""
        raise NotImplementedError

    def adopt(self, tensors: Sequence[torch.Tensor], damping: float) -> None:
        """Take a factorisation computed elsewhere (the inverse of :meth:`factorisation`)."""
        raise NotImplementedError

    def factorisation_like(self) -> List[torch.Tensor]:
        """Empty tensors of the shapes and dtype of :meth:`factorisation` (receive buffers; the factors' working
        precision, float32 for factors kept in half precision)."""
        dtype = working_dtype(self._like.dtype)
        return [self._like.new_empty(shape, dtype=dtype) for shape in self.factorisation_shapes()]

    def factorisation_shapes(self) -> List[Tuple[int, ...]]:
        """The shapes of :meth:`factorisation`'s tensors, in its order."""
        raise NotImplementedError

    # ------------------------------------------------------------ between factorisations, and in checkpoints
    #: the names of :meth:`saved_factorisation`'s tensors
    FACTORISATION_KEYS: Tuple[str, ...] = ()

    @property
    def factorised(self) -> bool:
        """Whether the factorisation is computed (or adopted)."""
        raise NotImplementedError

    def saved_factorisation(self) -> Dict[str, torch.Tensor]:
        """The factorisation as named tensors (a checkpoint's: it may be older than the factors, see
        :meth:`share_factors`)."""
        raise NotImplementedError

    def adopt_saved(self, saved: Dict[str, torch.Tensor], dtype: Optional[torch.dtype] = None) -> None:
        """Take the factorisation of :meth:`saved_factorisation` (a checkpoint's; its matrices in ``dtype`` if
        given) instead of the factors' own."""
        raise NotImplementedError

    def share_factors(self, current: "KronBlock") -> None:
        """Refer to the factors of ``current`` (a later average of the same statistics) instead of this block's
        own, keeping this block's factorisation, which is what a solve reads: the optimizer's solver, between
        two factorisations, would otherwise hold a second copy of every factor.  (A damping other than the
        factorisation's then refactorises from ``current``'s factors.)"""
        if not self.factorised:
            raise RuntimeError("share_factors before the factors were factorised")
        if current.shapes != self.shapes:
            raise ValueError("share_factors: the factors' shapes differ")
        self._factors = {k: current.factor(k) for k in self._factors}


class TikhonovKronBlock(KronBlock):
    r"""K-FAC with the factored Tikhonov damping of Martens & Grosse (2015, Sec. 6.3).

    .. math:: (G\otimes A + \lambda I)^{-1} \approx
              (G + \tfrac{\sqrt\lambda}{\pi} I)^{-1}\otimes(A + \pi\sqrt\lambda I)^{-1},\qquad
              \pi = \sqrt{\frac{\operatorname{tr}A/\dim A}{\operatorname{tr}G/\dim G}},

    exact only at :math:`\lambda = 0`.  Being a Kronecker product itself, it is applied as
    :math:`G_\gamma^{-1}\bar V A_\gamma^{-1}` with the two damped factors inverted explicitly
    (Cholesky, once per damping; a diagonal factor by division): two products per solve and no
    eigendecomposition.
    """

    inverse = "tikhonov"

    def __init__(self, weight, bias, wshape, A, G, transposed=False):
        super().__init__(weight, bias, wshape, A, G, transposed)
        self._inv: Optional[Tuple[float, torch.Tensor, torch.Tensor]] = None  # (damping, G_inv, A_inv)

    def precompute(self, damping: Optional[float] = None):
        """The damped inverses at ``damping`` (nothing without one)."""
        return None if damping is None else self.damped_inverses(damping)

    def tikhonov_split(self, damping: float) -> Tuple[float, float]:
        r"""The factored damping :math:`(\gamma_G, \gamma_A) = (\sqrt\lambda/\pi, \pi\sqrt\lambda)`."""
        ta = float(working(_factor_diagonal(self.A)).mean())
        tg = float(working(_factor_diagonal(self.G)).mean())
        pi = math.sqrt(ta / tg) if ta > 0 and tg > 0 and math.isfinite(ta / tg) else 1.0
        r = math.sqrt(damping)
        return r / pi, r * pi

    def damped_inverses(self, damping: float) -> Tuple[torch.Tensor, torch.Tensor]:
        r""":math:`\big((G + \gamma_G I)^{-1}, (A + \gamma_A I)^{-1}\big)` of the factored damping (kept for one damping)."""
        if self._inv is None or self._inv[0] != damping:
            gg, ga = self.tikhonov_split(damping)
            self._inv = (damping, _spd_inverse(self.G, gg, self.names), _spd_inverse(self.A, ga, self.names))
        return self._inv[1], self._inv[2]

    def solve_matrix(self, V, damping):
        Gi, Ai = self.damped_inverses(damping)
        return _right(_left(Gi, V), Ai)

    def solve_rows(self, b, a, damping):
        r"""The factored inverse from the rows, :math:`(b\,G_\gamma^{-1})^T(\bar a A_\gamma^{-1})`: it saves
        :math:`\text{out}\cdot\text{in}\,(\text{out} + \text{in}) - R(\text{out}^2 + \text{in}^2 + \text{out}\cdot\text{in})`
        multiply-adds over :meth:`solve` (dense factors; the rows pay below that count)."""
        Gi, Ai = self.damped_inverses(damping)
        return self.split(_right(b, Gi).T @ self._inputs_times(a, Ai))

    def factorisation(self, damping):
        return list(self.damped_inverses(damping))

    def adopt(self, tensors, damping):
        self._inv = (damping, tensors[0], tensors[1])

    FACTORISATION_KEYS = ("G_inv", "A_inv", "damping")

    @property
    def factorised(self) -> bool:
        return self._inv is not None

    def saved_factorisation(self):
        damping, Gi, Ai = cast(Tuple[float, torch.Tensor, torch.Tensor], self._inv)
        return {"G_inv": Gi, "A_inv": Ai, "damping": torch.tensor(damping, dtype=torch.float64)}

    def adopt_saved(self, saved, dtype=None):
        self.adopt((saved["G_inv"].to(dtype), saved["A_inv"].to(dtype)), float(saved["damping"]))

    def factorisation_shapes(self):
        return [self.shapes["G"], self.shapes["A"]]


def _spd_inverse(M: torch.Tensor, shift: float, names) -> torch.Tensor:
    r""":math:`(M + sI)^{-1}` of a symmetric positive semi-definite factor, by Cholesky (a diagonal one by division;
    a half-precision factor in float32)."""
    M = working(M)
    if M.dim() == 1:
        d = M + shift
        if not bool((d > 0).all()):
            raise NotPositiveDefiniteError(f"a damped K-FAC factor of {names} is not positive definite; "
                                           "increase damping")
        return 1 / d
    work = shifted(M, shift)
    L, info = torch.linalg.cholesky_ex(work)
    if int(info) != 0:
        raise NotPositiveDefiniteError(f"a damped K-FAC factor of {names} is not positive definite; "
                                       "increase damping")
    return torch.cholesky_inverse(L, out=work)   # the shifted copy's memory holds the inverse
