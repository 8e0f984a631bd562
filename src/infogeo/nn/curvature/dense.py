r"""The full curvature matrix :math:`\frac1N\sum_n J_n^T G_z J_n`, by ``torch.func.jacrev`` (small networks)."""
from __future__ import annotations

import torch

from ...linalg import NotPositiveDefiniteError
from .._params import Params
from .base import Curvature


class Dense(Curvature):
    """Dense matrix; ``solve`` by Cholesky of :math:`M + \\lambda I`."""

    def __init__(self, layout, M: torch.Tensor, point=None):
        super().__init__(layout, point)
        self.M = M
        self._chol = None

    @classmethod
    def build(cls, space, metric) -> "Dense":
        return cls(space.layout, metric.matrix(), space.point)

    def _mv(self, v):
        return self.layout.unflatten(self.M @ self.layout.flatten(v))

    def _solve(self, w, damping):
        if self._chol is None or self._chol[0] != damping:
            A = self.M + damping * torch.eye(self.M.shape[0], dtype=self.M.dtype, device=self.M.device)
            L, info = torch.linalg.cholesky_ex(A)
            if int(info) != 0:
                raise NotPositiveDefiniteError(f"the dense curvature is not positive definite with damping "
                                               f"{damping}; increase damping")
            self._chol = (damping, L)
        b = self.layout.flatten(w).unsqueeze(-1)
        return self.layout.unflatten(torch.cholesky_solve(b, self._chol[1]).squeeze(-1))

    def diagonal(self) -> Params:
        return self.layout.unflatten(torch.diagonal(self.M))

    def to_dense(self):
        return self.M

    def stats(self):
        return {"M": self.M}

    def with_stats(self, stats):
        return Dense(self.layout, stats["M"], self.point)

    def is_finite(self):
        return bool(torch.isfinite(self.M).all())

    def same_structure(self, other):
        return isinstance(other, Dense) and other.layout == self.layout

    def ema(self, new, decay):
        return Dense(self.layout, decay * self.M + (1 - decay) * new.M, self.point)

    def precompute(self):
        return self

    def minus_outer(self, g):
        gv = self.layout.flatten(g)
        return Dense(self.layout, self.M - torch.outer(gv, gv), self.point)
