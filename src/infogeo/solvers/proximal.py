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
from ..geometry.vectors import TangentVector
from .base import Iterate, Solver, Step, check_real


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
        Hessian, stopped when the subproblem's gradient norm is below
        :math:`10^{-12}\\max(1, \\|\\operatorname{grad} J(x_0)\\|)`: relative to the scale of the
        cost (an absolute tolerance could not be met by a cost in the millions, whose gradient
        rounding errors alone exceed it).
    """

    name = "ProximalPoint"

    def __init__(self, lam: float = 1.0, divergence: Optional[Union[Divergence, Callable]] = None,
                 inner: Optional[Solver] = None, **kwargs: Any):
        super().__init__(**kwargs)
        lam = check_real("lam", lam, positive=True)
        if inner is not None and not isinstance(inner, Solver):
            raise TypeError(f"inner must be a Solver, got {type(inner).__name__}")
        self.lam = float(lam)
        self.divergence = Divergence.from_function(divergence) if divergence is not None else SquaredEuclidean()
        self.inner = inner

    def _inner_solver(self, it: Iterate, k: int) -> Solver:
        if self.inner is not None:
            return self.inner
        from .trust_region import TrustRegion
        if k == 1:  # the scale of the gradients of this run: the first one
            self._gradient_scale = max(1.0, it.grad_norm)
        return TrustRegion(grad_tol=1e-12, grad_scale=self._gradient_scale, max_iter=200)

    def _step(self, manifold: Manifold, cost: Callable, it: Iterate, k: int) -> Step:
        anchor = it.x

        def prox_objective(u):
            return cost(u) + self.lam * self.divergence(u, anchor)

        # the subproblem's minimiser does not depend on the metric; the inner solver works in the manifold's
        res = self._inner_solver(it, k).minimize(manifold, prox_objective, anchor)
        if not res.success:
            return Step(anchor, nfev=res.nfev, failed=f"proximal subproblem not solved: {res.message}")
        moved = TangentVector(anchor, res.x - anchor, it.gradient.chart)
        return Step(res.x, step_size=float(B.to_numpy(manifold.metric.norm(moved))), nfev=res.nfev,
                    extra={"inner_iterations": res.nit})
