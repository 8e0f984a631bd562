r"""The blocks that block-structured curvatures are made of: diagonal, dense and Kronecker-factored.

Each :class:`Block` covers some parameters and offers ``mv``, ``solve(v, damping)``,
``diagonal`` and ``dense(layout)``; its statistics are tensors (``stats`` /
``with_stats``) so that curvatures can be averaged and checkpointed.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ...linalg import NotPositiveDefiniteError
from .._params import ParamLayout, Params


class Block:
    """A curvature block over some parameters; subclasses hold their statistics as tensors."""

    names: List[str]
    kind = "block"

    def stats(self) -> Dict[str, torch.Tensor]:
        raise NotImplementedError

    def with_stats(self, stats: Dict[str, torch.Tensor]) -> "Block":
        raise NotImplementedError

    def stat_shapes(self) -> Dict[str, Tuple[int, ...]]:
        """The shapes of :meth:`stats`."""
        return {k: tuple(t.shape) for k, t in self.stats().items()}

    def mv(self, v: Params) -> Params:
        raise NotImplementedError

    def solve(self, v: Params, damping: float) -> Params:
        raise NotImplementedError

    def diagonal(self) -> Params:
        raise NotImplementedError

    def dense(self, layout: ParamLayout) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(idx, M)``: global flat indices of this block and its dense matrix."""
        raise NotImplementedError

    def precompute(self, damping: Optional[float] = None) -> None:
        """Factorise now (eigendecompositions, damped inverses, ...), so that later solves are cheap."""

    def _indices(self, layout: ParamLayout, names: Sequence[str], device) -> torch.Tensor:
        return torch.cat([torch.arange(layout.offsets[n], layout.offsets[n] + layout.numels[n], device=device)
                          for n in names])


class DiagBlock(Block):
    r"""A diagonal block :math:`\operatorname{diag}(d)`."""

    kind = "diag"

    def __init__(self, diag: Params):
        self.names = list(diag)
        self.d = diag

    def stats(self):
        return dict(self.d)

    def with_stats(self, stats):
        return DiagBlock({n: stats[n] for n in self.names})

    def mv(self, v):
        return {n: self.d[n] * v[n] for n in self.names}

    def solve(self, v, damping):
        out = {}
        for n in self.names:
            den = self.d[n] + damping
            if not bool((den > 0).all()):
                raise NotPositiveDefiniteError(f"the diagonal curvature of {n!r} has zero or negative entries; "
                                               "pass damping > 0")
            out[n] = v[n] / den
        return out

    def diagonal(self):
        return dict(self.d)

    def dense(self, layout):
        d = torch.cat([self.d[n].reshape(-1) for n in self.names])
        return self._indices(layout, self.names, d.device), torch.diag(d)

    def minus_outer(self, g):
        return DiagBlock({n: self.d[n] - g[n] ** 2 for n in self.names})


class DenseBlock(Block):
    """A dense block over the concatenated (row-major) parameters ``names``."""

    kind = "dense"

    def __init__(self, names: Sequence[str], shapes: Sequence[Tuple[int, ...]], M: torch.Tensor):
        self.names = list(names)
        self.sub = ParamLayout(self.names, shapes)
        self.M = M
        self._chol: Dict[float, torch.Tensor] = {}

    def stats(self):
        return {"M": self.M}

    def with_stats(self, stats):
        return DenseBlock(self.names, [self.sub.shapes[n] for n in self.names], stats["M"])

    def mv(self, v):
        return self.sub.unflatten(self.M @ self.sub.flatten(v))

    def _cholesky(self, damping):
        L = self._chol.get(damping)
        if L is None:
            A = self.M + damping * torch.eye(self.M.shape[0], dtype=self.M.dtype, device=self.M.device)
            L, info = torch.linalg.cholesky_ex(A)
            if int(info) != 0:
                raise NotPositiveDefiniteError(f"the dense curvature block of {self.names} is not positive "
                                               f"definite with damping {damping}; increase damping")
            self._chol = {damping: L}  # keep one factorisation (the current damping)
        return L

    def solve(self, v, damping):
        L = self._cholesky(damping)
        return self.sub.unflatten(torch.cholesky_solve(self.sub.flatten(v).unsqueeze(-1), L).squeeze(-1))

    def diagonal(self):
        return self.sub.unflatten(torch.diagonal(self.M))

    def dense(self, layout):
        return self._indices(layout, self.names, self.M.device), self.M

    def minus_outer(self, g):
        gv = self.sub.flatten(g)
        return DenseBlock(self.names, [self.sub.shapes[n] for n in self.names], self.M - torch.outer(gv, gv))


class KronBlock(Block):
    r"""A Kronecker-factored block :math:`G \otimes A` for a Linear or convolution layer (K-FAC).

    The weight (reshaped to ``(out, in)``) and bias are concatenated to
    :math:`\bar W = [W\ b]`; :math:`(G \otimes A)\,\mathrm{vec}(\bar W) = \mathrm{vec}(G \bar W A)`
    (row-major vec), and the damped inverse is exact through the eigendecompositions
    :math:`G = U_G\Lambda_G U_G^T`, :math:`A = U_A\Lambda_A U_A^T`:

    .. math:: (G\otimes A + \lambda I)^{-1}\mathrm{vec}(V)
              = \mathrm{vec}\big(U_G\,[(U_G^T V U_A) \oslash (\lambda_G\lambda_A^T + \lambda)]\,U_A^T\big)

    (``inverse="eigen"``, the default: damping added to the Kronecker eigenvalues).
    ``inverse="tikhonov"`` is the factored Tikhonov damping of Martens & Grosse (2015,
    Sec. 6.3): :math:`(G + \tfrac{\sqrt\lambda}{\pi} I)^{-1}\otimes(A + \pi\sqrt\lambda I)^{-1}` with
    :math:`\pi = \sqrt{(\operatorname{tr}A/\dim A)\,/\,(\operatorname{tr}G/\dim G)}`, an approximation
    of the damped block that is exact only at :math:`\lambda = 0`.  Being a Kronecker product
    itself, it is applied as :math:`G_\gamma^{-1}\bar V A_\gamma^{-1}` with the two damped factors
    inverted explicitly (Cholesky, once per damping): two products per solve instead of four,
    and no eigendecomposition.
    """

    INVERSES = ("eigen", "tikhonov")

    kind = "kfac"
    #: under the communication-optimised placement the owner's factorisation is broadcast
    shares_factorisation = True

    def __init__(self, weight: Optional[str], bias: Optional[str], wshape: Tuple[int, ...], A: torch.Tensor,
                 G: torch.Tensor, inverse: str = "eigen", transposed: bool = False):
        if inverse not in self.INVERSES:
            raise ValueError(f"unknown K-FAC inverse {inverse!r}; expected one of {self.INVERSES}")
        self.weight, self.bias, self.wshape = weight, bias, tuple(wshape)
        #: the weight is stored ``(in, out)`` (Hugging Face ``Conv1D``): :math:`W` is its transpose
        self.transposed = bool(transposed)
        self.out = self.wshape[1] if self.transposed else self.wshape[0]
        self.names = [n for n in (weight, bias) if n is not None]
        self.A, self.G = A, G
        self.inverse = inverse
        self._eig: Optional[Tuple[torch.Tensor, ...]] = None
        self._inv: Optional[Tuple[float, torch.Tensor, torch.Tensor]] = None  # (damping, G_inv, A_inv)

    def stats(self):
        return {"A": self.A, "G": self.G}

    def with_stats(self, stats):
        return KronBlock(self.weight, self.bias, self.wshape, stats["A"], stats["G"], self.inverse, self.transposed)

    def _join(self, v):
        r""":math:`\bar W = [W\ b]`, ``(out, in [+ 1])``, of the components ``v``."""
        out = self.out
        parts = []
        if self.weight is not None:
            w = v[self.weight]
            parts.append(w.T if self.transposed else w.reshape(out, -1))
        if self.bias is not None:
            parts.append(v[self.bias].reshape(out, 1))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    def _split(self, Wb):
        out = {}
        if self.weight is not None:
            W = Wb[:, :Wb.shape[1] - (self.bias is not None)]
            out[self.weight] = W.T.contiguous() if self.transposed else W.reshape(self.wshape)
        if self.bias is not None:
            out[self.bias] = Wb[:, -1]
        return out

    def mv(self, v):
        return self._split(self.G @ self._join(v) @ self.A)

    def eig(self):
        r"""``(λ_A, U_A, λ_G, U_G)``: eigendecompositions of the factors (computed once)."""
        if self._eig is None:
            la, Ua = torch.linalg.eigh(self.A)
            lg, Ug = torch.linalg.eigh(self.G)
            self._eig = (la.clamp_min(0), Ua, lg.clamp_min(0), Ug)
        return self._eig

    def precompute(self, damping: Optional[float] = None):
        """Factorise: the eigendecompositions (``"eigen"``), or the damped inverses at ``damping`` (``"tikhonov"``)."""
        if self.inverse == "eigen":
            return self.eig()
        return None if damping is None else self.damped_inverses(damping)

    def tikhonov_split(self, damping: float) -> Tuple[float, float]:
        r"""The factored damping :math:`(\gamma_G, \gamma_A) = (\sqrt\lambda/\pi, \pi\sqrt\lambda)`."""
        ta = float(torch.diagonal(self.A).mean())
        tg = float(torch.diagonal(self.G).mean())
        pi = math.sqrt(ta / tg) if ta > 0 and tg > 0 and math.isfinite(ta / tg) else 1.0
        r = math.sqrt(damping)
        return r / pi, r * pi

    def damped_inverses(self, damping: float) -> Tuple[torch.Tensor, torch.Tensor]:
        r""":math:`\big((G + \gamma_G I)^{-1}, (A + \gamma_A I)^{-1}\big)` of the factored damping (kept for one damping)."""
        if self._inv is None or self._inv[0] != damping:
            gg, ga = self.tikhonov_split(damping)
            self._inv = (damping, _spd_inverse(self.G, gg, self.names), _spd_inverse(self.A, ga, self.names))
        return self._inv[1], self._inv[2]

    def factorisation(self, damping: float) -> List[torch.Tensor]:
        """The tensors :meth:`solve` needs at ``damping`` (what a distributed owner broadcasts)."""
        return list(self.damped_inverses(damping) if self.inverse == "tikhonov" else self.eig())

    def adopt(self, tensors: Sequence[torch.Tensor], damping: float) -> None:
        """Take a factorisation computed elsewhere (the inverse of :meth:`factorisation`)."""
        if self.inverse == "tikhonov":
            self._inv = (damping, tensors[0], tensors[1])
        else:
            self._eig = tuple(tensors)

    def factorisation_like(self) -> List[torch.Tensor]:
        """Empty tensors of the shapes and dtypes of :meth:`factorisation` (receive buffers)."""
        A, G = self.A, self.G
        if self.inverse == "tikhonov":
            return [torch.empty_like(G), torch.empty_like(A)]
        return [A.new_empty(A.shape[0]), torch.empty_like(A), G.new_empty(G.shape[0]), torch.empty_like(G)]

    def scales(self, damping: float) -> torch.Tensor:
        r"""The damped eigenvalues of the block in its Kronecker eigenbasis, ``(out, in [+ 1])``:
        :math:`\lambda_G\lambda_A^T + \lambda` (K-FAC with the exact damped inverse)."""
        la, _, lg, _ = self.eig()
        return lg.unsqueeze(1) * la.unsqueeze(0) + damping

    def _eigen_solve(self, rotated: torch.Tensor, damping: float) -> Dict[str, torch.Tensor]:
        r""":math:`U_G\,[\tilde V \oslash \text{scales}]\,U_A^T` for a gradient already rotated, :math:`\tilde V = U_G^T\bar VU_A`."""
        _, Ua, _, Ug = self.eig()
        den = self.scales(damping)
        if not bool((den > 0).all()):
            raise NotPositiveDefiniteError(f"the {self.kind.upper()} block of {self.names} is singular; "
                                           "pass damping > 0")
        return self._split(Ug @ (rotated / den) @ Ua.T)

    def solve(self, v, damping):
        if self.inverse == "tikhonov":
            Gi, Ai = self.damped_inverses(damping)
            return self._split(Gi @ self._join(v) @ Ai)
        _, Ua, _, Ug = self.eig()
        return self._eigen_solve(Ug.T @ self._join(v) @ Ua, damping)

    def _inputs_times(self, a: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
        r""":math:`\bar a M` for input rows ``a`` (R, in) with the bias column :math:`\bar a = [a, 1]` implicit."""
        if self.bias is not None and self.weight is not None:
            return torch.addmm(M[-1:], a, M[:-1])     # without concatenating the ones column
        if self.weight is not None:
            return a @ M
        return M.expand(a.shape[0], M.shape[1])

    def solve_rows(self, b: torch.Tensor, a: torch.Tensor, damping: float) -> Dict[str, torch.Tensor]:
        r"""The solve of the gradient :math:`\bar V = \sum_r b_r \bar a_r^T` from its rows.

        ``b`` (R, out) are the layer's output gradients and ``a`` (R, in) its inputs (the bias
        column of :math:`\bar a_r = [a_r, 1]` is implicit).  The factored inverse is
        :math:`(b\,G_\gamma^{-1})^T(\bar a A_\gamma^{-1})`; in the eigenbasis the gradient is rotated as
        :math:`(bU_G)^T(\bar aU_A)` before its scaling and rotation back.  Either saves
        :math:`\text{out}\cdot\text{in}\,(\text{out} + \text{in}) - R(\text{out}^2 + \text{in}^2 + \text{out}\cdot\text{in})`
        multiply-adds over :meth:`solve`: the rows pay below that count.
        """
        if self.inverse == "tikhonov":
            Gi, Ai = self.damped_inverses(damping)
            return self._split((b @ Gi).T @ self._inputs_times(a, Ai))
        _, Ua, _, Ug = self.eig()
        return self._eigen_solve((b @ Ug).T @ self._inputs_times(a, Ua), damping)

    def diagonal(self):
        return self._split(torch.outer(torch.diagonal(self.G), torch.diagonal(self.A)))

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
        return torch.cat(cols, dim=1).reshape(-1).to(self.A.device)

    def dense(self, layout):
        return self.flat_index(layout), torch.kron(self.G, self.A)


def _spd_inverse(M: torch.Tensor, shift: float, names) -> torch.Tensor:
    r""":math:`(M + sI)^{-1}` of a symmetric positive semi-definite factor, by Cholesky."""
    L, info = torch.linalg.cholesky_ex(M + shift * torch.eye(M.shape[0], dtype=M.dtype, device=M.device))
    if int(info) != 0:
        raise NotPositiveDefiniteError(f"a damped K-FAC factor of {names} is not positive definite; "
                                       "increase damping")
    return torch.cholesky_inverse(L)
