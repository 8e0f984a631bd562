r"""Kronecker blocks solved in the eigenbasis :math:`U_G\otimes U_A` of their factors: K-FAC's exact damped
inverse (:class:`ExactKronBlock`), and the basis EKFAC's :class:`~.ekfac.EigenKronBlock` and Shampoo's blocks
scale in their own ways (:class:`EigenbasisKronBlock`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from ...linalg import NotPositiveDefiniteError
from .._params import ParamLayout, held_dtype, held_product, working, working_dtype
from .factor_eigh import factor_eigh, null_dim
from .kron import KronBlock

__all__ = ["EigenbasisKronBlock", "ExactKronBlock"]


def _factor_eig(F: torch.Tensor, canonical: bool = True) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``(λ, U)`` of a factor; a diagonal factor is its own eigenvalues, with ``U = None`` (the identity)."""
    if F.dim() == 1:
        return working(F).clamp_min(0), None
    lam, U = factor_eigh(F, canonical)
    return lam.clamp_min(0), U


class EigenbasisKronBlock(KronBlock):
    r"""A Kronecker block solved in the Kronecker eigenbasis :math:`Q = U_G\otimes U_A` of its factors
    (:math:`A = U_A\Lambda_A U_A^T`, :math:`G = U_G\Lambda_G U_G^T`, computed once):

    .. math:: (C + \lambda I)^{-1}\mathrm{vec}(V)
              = \mathrm{vec}\big(U_G\,[(U_G^T V U_A) \oslash \text{scales}(\lambda)]\,U_A^T\big),

    for a block :math:`C` diagonal in :math:`Q` with the damped eigenvalues :meth:`scales`, ``(out, in [+ 1])``.
    The scales are the subclass's: K-FAC's exact inverse (:class:`ExactKronBlock`) or EKFAC's measured ones.
    A diagonal factor's eigenbasis is the identity (nothing to rotate on that side).
    """

    def __init__(self, weight, bias, wshape, A, G, transposed=False):
        super().__init__(weight, bias, wshape, A, G, transposed)
        self._eig: Optional[Tuple[Any, ...]] = None
        self._null: Optional[Tuple[Any, int, int]] = None   # (the factorisation, k_A, k_G)
        #: (damping, source) whose damped scales were found positive; the scales themselves are recomputed
        #: per solve (one outer product) rather than kept, a copy as large as the weight
        self._checked: Optional[Tuple[float, Any]] = None
        #: whether the dense factors are let go once factorised (:meth:`hold_factorised`)
        self._factorised_only = False
        #: the dtype the eigenvectors are held in (:meth:`hold_factorised`; ``None``: the one they are computed in)
        self._basis_dtype: Union[None, str, torch.dtype] = None

    #: the names of :meth:`factorisation`'s tensors (a checkpoint's keys)
    FACTORISATION_KEYS = ("lambda_A", "U_A", "lambda_G", "U_G")
    #: whether the factors' null spaces get the canonical basis (:mod:`.factor_eigh`): the scales of a subclass
    #: that measures them per direction (EKFAC's) depend on it
    canonical_null = True

    @property
    def factorised(self) -> bool:
        return self._eig is not None

    def saved_factorisation(self) -> Dict[str, torch.Tensor]:
        # in the working dtype (exact from a narrower held basis), as checkpoints have always taken them
        work = working_dtype(self._like.dtype)
        return dict(zip(self.FACTORISATION_KEYS, (t.to(work) for t in self.factorisation(0.0))))

    def adopt_saved(self, saved: Dict[str, torch.Tensor], dtype: Optional[torch.dtype] = None) -> None:
        self.adopt(tuple(saved[k].to(dtype) for k in self.FACTORISATION_KEYS), 0.0)

    def eig(self):
        r"""``(λ_A, U_A, λ_G, U_G)``: eigendecompositions of the factors (computed once; ``U = None`` for a
        diagonal factor), the eigenvectors as held (:meth:`hold_factorised`'s ``basis_dtype``)."""
        if self._eig is None:
            self._hold(_factor_eig(self.A, self.canonical_null) + _factor_eig(self.G, self.canonical_null))
        return self._eig

    def _hold(self, eig: Tuple[Any, ...]) -> None:
        """Keep a factorisation, its eigenvectors in the held dtype, and let the dense factors go if so asked."""
        def held(i: int, t: Any) -> Any:
            if t is None:
                return t
            bd = None if i % 2 == 0 else held_dtype(self._basis_dtype, eig[i - 1].dtype)
            if bd is not None:
                return t.to(bd)
            # a view into a larger buffer (a broadcast's, distributed.broadcast_from) would keep all of it alive
            return t if t.untyped_storage().nbytes() == t.numel() * t.element_size() else t.clone()
        self._eig = tuple(held(i, t) for i, t in enumerate(eig))
        self._let_go()

    def working_eig(self):
        r""":meth:`eig` with the eigenvectors in the eigenvalues' (working) dtype, for arithmetic."""
        la, Ua, lg, Ug = self.eig()
        return la, None if Ua is None else Ua.to(la.dtype), lg, None if Ug is None else Ug.to(lg.dtype)

    @property
    def working_dtype(self) -> torch.dtype:
        """The dtype the factorisation is computed (and used) in."""
        return self.eig()[0].dtype

    # ------------------------------------------------------------ a factor held as its factorisation
    #: whether a factor can be let go once factorised and rebuilt as :math:`U\Lambda U^T` (K-FAC's exact inverse;
    #: not where the factorisation is not the factor's own, as EKFAC's scales and Shampoo's roots are)
    holds_factorised = False

    def hold_factorised(self, basis_dtype: Union[None, str, torch.dtype] = None) -> None:
        r"""From now on, hold each dense factor only as its factorisation :math:`F = U\Lambda U^T` once that is
        computed: for a schedule that reads the factors next where it factorises them anew (statistics every
        ``k`` factorisations), keeping both would hold every factor twice between two factorisations.  The
        factor is rebuilt where a statistic is needed (:meth:`rebuilt`: the next average, a checkpoint); the
        products (:meth:`mv`, :meth:`diagonal`, :meth:`dense`) come from the factorisation.  ``basis_dtype``: the
        eigenvectors held in that dtype where it is narrower (``torch.bfloat16``: half the bytes of float32;
        ``"auto"``: :func:`~infogeo.nn._params.held_dtype`), and used in the eigenvalues' dtype; ``None``: as
        computed."""
        if not self.holds_factorised:
            raise TypeError(f"a {type(self).__name__} cannot hold its factors as their factorisation")
        self._factorised_only = True
        self._basis_dtype = basis_dtype
        if self._eig is not None:
            self._hold(self._eig)

    def _let_go(self) -> None:
        if self._factorised_only:
            for k in self._factors:
                if len(self.shapes[k]) == 2:
                    self._factors[k] = None

    def rebuilt(self, name: str) -> torch.Tensor:
        r""":math:`U\operatorname{diag}(\lambda)U^T` of the factor ``name`` (its eigenvalues clamped at 0, as
        the solves use them), in the factor's dtype."""
        if self._eig is None:
            return super().rebuilt(name)
        la, Ua, lg, Ug = self.working_eig()
        lam, U = (la, Ua) if name == "A" else (lg, Ug)
        return ((U * lam) @ U.T).to(self._like.dtype)

    def null_dims(self) -> Tuple[int, int]:
        """``(k_A, k_G)``: the dimensions of the factors' null spaces, the first columns of ``U_A`` and ``U_G``
        (:func:`~.factor_eigh.null_dim`; 0 for a diagonal factor, whose basis is the coordinates)."""
        la, Ua, lg, Ug = self.eig()
        if self._null is None or self._null[0] is not self._eig:
            self._null = (self._eig, null_dim(la) if Ua is not None else 0, null_dim(lg) if Ug is not None else 0)
        return self._null[1], self._null[2]

    def basis(self):
        """``(U_A, U_G)``, the eigenvectors of the factors as held (``None``: a diagonal factor's identity)."""
        _, Ua, _, Ug = self.eig()
        return Ua, Ug

    def _working_basis(self):
        _, Ua, _, Ug = self.working_eig()
        return Ua, Ug

    def rotate(self, V: torch.Tensor) -> torch.Tensor:
        r""":math:`U_G^T V U_A`."""
        Ua, Ug = self._working_basis()
        V = V if Ug is None else Ug.T @ V
        return V if Ua is None else V @ Ua

    def unrotate(self, V: torch.Tensor) -> torch.Tensor:
        r""":math:`U_G V U_A^T`."""
        Ua, Ug = self._working_basis()
        V = V if Ug is None else Ug @ V
        return V if Ua is None else V @ Ua.T

    def precompute(self, damping: Optional[float] = None):
        return self.eig()

    # ------------------------------------------------------------ a block Q diag(s) Q^T (EKFAC's, Shampoo's)
    def mv_scaled(self, v, s: torch.Tensor):
        r""":math:`Q\,\operatorname{diag}(s)\,Q^Tv` for scales ``s`` ``(out, in [+ 1])`` in this eigenbasis."""
        return self.split(self.unrotate(self.rotate(self.join(v)) * s))

    def diagonal_scaled(self, s: torch.Tensor):
        r"""The diagonal of :math:`Q\,\operatorname{diag}(s)\,Q^T`: :math:`(U_G^{\odot2})\,s\,(U_A^{\odot2})^T`."""
        Ua, Ug = self._working_basis()
        d = s if Ug is None else Ug.square() @ s
        return self.split(d if Ua is None else d @ Ua.square().T)

    def dense_scaled(self, layout: ParamLayout, s: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        r"""``(idx, M)`` of :math:`Q\,\operatorname{diag}(s)\,Q^T` (see :meth:`Block.dense`)."""
        Ua, Ug = self._working_basis()
        eye = lambda n: torch.eye(n, dtype=s.dtype, device=s.device)  # noqa: E731
        Q = torch.kron(eye(self.shapes["G"][0]) if Ug is None else Ug.contiguous(),
                       eye(self.shapes["A"][0]) if Ua is None else Ua.contiguous())
        return self.flat_index(layout), (Q * s.reshape(-1)) @ Q.T

    def scales(self, damping: float) -> torch.Tensor:
        """The damped eigenvalues of the block in its eigenbasis, ``(out, in [+ 1])``."""
        raise NotImplementedError

    def _scales_of(self) -> Any:
        """What :meth:`scales` is computed from (the damped scales are kept while it stays the same object)."""
        return self.eig()

    def _damped_scales(self, damping: float) -> torch.Tensor:
        """:meth:`scales`, checked positive once per damping and source (the check waits for the device)."""
        src = self._scales_of()
        den = self.scales(damping)
        if self._checked is None or self._checked[0] != damping or self._checked[1] is not src:
            if not bool((den > 0).all()):
                raise NotPositiveDefiniteError(f"the {self.kind.upper()} block of {self.names} is singular; "
                                               "pass damping > 0")
            self._checked = (damping, src)
        return den

    def _eigen_solve(self, rotated: torch.Tensor, damping: float) -> Dict[str, torch.Tensor]:
        r""":math:`U_G\,[\tilde V \oslash \text{scales}]\,U_A^T` for a gradient already rotated, :math:`\tilde V = U_G^T\bar VU_A`."""
        return self.split(self.unrotate(rotated / self._damped_scales(damping)))

    def solve(self, v, damping):
        return self._eigen_solve(self.rotate(self.join(v)), damping)

    def solve_matrix(self, V, damping):
        return self.join(self._eigen_solve(self.rotate(V), damping))

    def rotate_rows(self, b: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        r""":math:`U_G^T\bar VU_A` of the gradient :math:`\bar V = b^T\bar a` from its rows, :math:`(bU_G)^T(\bar aU_A)`:
        :math:`R(\text{out}^2+\text{in}^2+\text{out}\cdot\text{in})` multiply-adds instead of
        :math:`\text{out}\cdot\text{in}\,(\text{out}+\text{in})`.  A basis held in bfloat16 multiplies as
        :func:`~infogeo.nn._params.held_product` does, the result in the working dtype."""
        Ua, Ug = self.basis()
        work = self.working_dtype
        bt = b.to(work) if Ug is None else held_product(b, Ug, work)
        return held_product(bt.T, self._inputs_times(a.to(work), Ua), work).to(work)

    def solve_rows(self, b, a, damping):
        r"""The gradient rotated from its rows (:meth:`rotate_rows`), then scaled and rotated back."""
        return self._eigen_solve(self.rotate_rows(b, a), damping)

    def _factorisation_dtypes(self) -> List[torch.dtype]:
        """The dtypes of :meth:`factorisation`'s tensors on every rank: the eigenvalues in the working dtype, the
        bases as held (:meth:`hold_factorised`, which every rank calls alike)."""
        work = working_dtype(self._like.dtype)
        basis = held_dtype(self._basis_dtype, work) or work
        return [work, basis, work, basis]

    def factorisation(self, damping):
        # as held: a narrower basis (bfloat16) is broadcast in half the bytes and adopted exactly; a diagonal
        # factor's basis (None) travels as an empty placeholder
        return [self._like.new_empty(0, dtype=d) if t is None else t
                for t, d in zip(self.eig(), self._factorisation_dtypes())]

    def factorisation_like(self):
        return [self._like.new_empty(shape, dtype=d)
                for shape, d in zip(self.factorisation_shapes(), self._factorisation_dtypes())]

    def adopt(self, tensors, damping):
        la, Ua, lg, Ug = tensors
        self._hold((la, Ua if len(self.shapes["A"]) == 2 else None, lg, Ug if len(self.shapes["G"]) == 2 else None))

    def factorisation_shapes(self):
        def side(shape: Tuple[int, ...]) -> List[Tuple[int, ...]]:   # eigenvalues; the basis (a diagonal's: empty)
            return [(shape[0],), shape if len(shape) == 2 else (0,)]
        return side(self.shapes["A"]) + side(self.shapes["G"])


class ExactKronBlock(EigenbasisKronBlock):
    r"""K-FAC with the exact damped inverse: the damping added to the Kronecker eigenvalues,
    :math:`(G\otimes A+\lambda I)^{-1} = Q\,(\Lambda_G\otimes\Lambda_A + \lambda I)^{-1}Q^T`
    (scales :math:`\lambda_G\lambda_A^T + \lambda`)."""

    inverse = "eigen"
    #: the damping is the scale of every null direction: any basis of the null space gives the same inverse
    canonical_null = False
    holds_factorised = True

    def scales(self, damping):
        return self._products() + damping

    def _products(self) -> torch.Tensor:
        r""":math:`\lambda_G\lambda_A^T`, the block's eigenvalues (undamped)."""
        la, _, lg, _ = self.eig()
        return lg.unsqueeze(1) * la.unsqueeze(0)

    def _held(self) -> bool:
        return all(F is not None for F in self._factors.values())

    # a block holding its factors as their factorisation multiplies through it (the factors are U Λ U^T)
    def mv(self, v):
        return super().mv(v) if self._held() else self.mv_scaled(v, self._products())

    def diagonal(self):
        return super().diagonal() if self._held() else self.diagonal_scaled(self._products())

    def dense(self, layout):
        return super().dense(layout) if self._held() else self.dense_scaled(layout, self._products())
