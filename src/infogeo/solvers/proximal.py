r"""The proximal point method (Rockafellar 1976).

.. math:: x_{k+1} = \arg\min_u \big[J(u) + \lambda\, \rho(u, x_k)\big]

With :math:`\rho = \tfrac12\|u - w\|^2` this is *implicit* gradient descent,
:math:`x_{k+1} = x_k - \lambda^{-1}\nabla J(x_{k+1})`; with a
pulled-back output dissimilarity :math:`\rho(f(u), f(w))` it is implicit
gradient descent on the outputs.  Each inner problem is solved by any solver.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

from .. import backend as B
from ..divergences import Divergence, SquaredEuclidean
from ..geometry.manifold import Manifold
from .base import Iterate, Solver, Step


class ProximalPoint(Solver):
    """Proximal point iterations with dissimilarity ``rho`` and weight ``lam``.

    Parameters
    ----------
    lam : float
        :math:`\\lambda > 0`: large values take small, gradient-descent-like steps.
    divergence : Divergence or callable, optional
        :math:`\\rho(u, w)`; defaults to :class:`~infogeo.divergences.SquaredEuclidean`.
    inner : Solver, optional
        Solves each proximal subproblem; defaults to a :class:`TrustRegion` with the exact
        Hessian and tight tolerances.
    """

    name = "ProximalPoint"

    def __init__(self, lam: float = 1.0, divergence: Optional[Union[Divergence, Callable]] = None,
                 inner: Optional[Solver] = None, **kwargs: Any):
        super().__init__(**kwargs)
        if not lam > 0:
            raise ValueError(f"lam must be > 0, got {lam}")
        self.lam = float(lam)
        self.divergence = Divergence.from_function(divergence) if divergence is not None else SquaredEuclidean()
        if inner is None:
            from .trust_region import TrustRegion
            inner = TrustRegion(grad_tol=1e-12, max_iter=200)
        self.inner = inner

    def _step(self, manifold: Manifold, cost: Callable, it: Iterate, k: int) -> Step:
        anchor = it.x

        def prox_objective(u):
            return cost(u) + self.lam * self.divergence(u, anchor)

        # the subproblem lives on the same points with the Euclidean chart geometry
        res = self.inner.minimize(manifold, prox_objective, anchor)
        if not res.success:
            return Step(anchor, nfev=res.nfev, failed=f"proximal subproblem not solved: {res.message}")
        moved = res.x - anchor
        return Step(res.x, step_size=float(B.to_numpy(B.norm(moved))), nfev=res.nfev,
                    extra={"inner_iterations": res.nit})
