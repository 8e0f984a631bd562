r"""Damped Newton: second-order model of the cost plus a metric proximity term.

.. math:: x_{k+1} = x_k - \alpha\,(H + \lambda G)^{-1} \nabla J(x_k)

(Martens 2010; Martens 2020).  With :math:`G = I` this is the classical damped
(Levenberg) Newton step; with a Fisher or pullback :math:`G` the damping is
measured in the geometry of the problem.  :math:`H` is the Hessian of the cost
in the manifold's chart, from autodiff.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .. import backend as B
from ..backend import tree as _tree
from ..geometry.manifold import Manifold
from ..geometry.metric import DENSE_MAX_DIM
from ..geometry.points import check_flag
from ..geometry.vectors import TangentVector
from ..linalg import NotPositiveDefiniteError, conjugate_gradient
from .base import Iterate, Solver, Step, check_real


class DampedNewton(Solver):
    r"""Damped Newton steps :math:`-(H + \lambda G)^{-1} dJ`, with :math:`\lambda` adapted (Levenberg–Marquardt).

    Parameters
    ----------
    damping_newton : float
        :math:`\lambda \ge 0`, the weight of the metric :math:`G` (the proximity term); with
        ``adapt_damping`` the first value of an adapted one.
    step_size : float
        :math:`\alpha`.
    adapt_damping : bool
        Adapt :math:`\lambda` to the ratio :math:`\rho` of the actual to the predicted decrease
        :math:`-(dJ(s) + \tfrac12 s^T H s)` (Levenberg 1944; Marquardt 1963; the update of Moré 1978 in the
        form of Nielsen): a step with :math:`\rho > 10^{-4}` is taken and
        :math:`\lambda \leftarrow \lambda\max(\tfrac13, 1 - (2\rho - 1)^3)`; otherwise it is
        rejected and :math:`\lambda` grows by a factor that doubles at each rejection in a row (also when
        :math:`H + \lambda G` is not positive definite).  Near a minimum :math:`\lambda \to 0` and the
        steps become Newton's, far from it they shorten towards the metric's gradient steps.
        ``False``: :math:`\lambda` fixed, every step taken.
    matrix_free : bool
        Solve with conjugate gradient on Hessian- and metric-vector products instead of
        dense matrices (used automatically above a few thousand dimensions).
    """

    name = "DampedNewton"

    def __init__(self, damping_newton: float = 1.0, step_size: float = 1.0, *, adapt_damping: bool = True,
                 matrix_free: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        check_flag("adapt_damping", adapt_damping), check_flag("matrix_free", matrix_free)
        self.lam = check_real("damping_newton", damping_newton)
        self.step_size = check_real("step_size", step_size, positive=True)
        self.adapt, self.matrix_free = adapt_damping, matrix_free

    def _setup(self, manifold: Manifold, cost: Callable, x: Any) -> None:
        self._lam, self._grow = self.lam, 2.0

    def _direction(self, manifold: Manifold, cost: Callable, it: Iterate, lam: float):
        """``(direction, Hessian-vector product)`` of the system with damping ``lam``; None if not positive definite."""
        x, df = it.x, it.differential.components
        metric = manifold.metric
        if self.matrix_free or manifold.dim > DENSE_MAX_DIM or not metric.dense_at(x):
            def op(v):  # trees: array components or {name: tensor} dicts
                return _tree.tree_map(lambda h, g: h + lam * g, B.hvp(cost, x, v), metric.mv(x, v))
            try:
                return conjugate_gradient(op, _tree.tree_map(lambda t: -t, df)), lambda v: B.hvp(cost, x, v)
            except NotPositiveDefiniteError:
                return None, None
        H = B.hessian(cost, x)
        A = H + lam * metric.matrix(x)
        if not np.linalg.eigvalsh(B.to_numpy(0.5 * (A + B.transpose(A)))).min() > 0:
            return None, None
        return B.solve(A, -df), lambda v: B.matmul(H, v)

    def _step(self, manifold: Manifold, cost: Callable, it: Iterate, k: int) -> Step:
        x, metric = it.x, manifold.metric
        lam = self._lam
        direction, hess = self._direction(manifold, cost, it, lam)
        if direction is None:
            if not self.adapt:
                return Step(x, failed="H + lambda G is not positive definite at this point; increase damping_newton")
            return self._reject(x, "H + lambda G is not positive definite")
        s = _tree.tree_map(lambda t: self.step_size * t, direction)
        v = TangentVector(x, s, it.gradient.chart)
        x_new = manifold.retract(x, v)
        step_norm = float(B.to_numpy(metric.norm(v)))
        if not self.adapt:
            return Step(x_new, step_size=step_norm, extra={"damping": lam})
        slope = float(B.to_numpy(_tree.tree_vdot(it.differential.components, s)))
        predicted = -(slope + 0.5 * float(B.to_numpy(_tree.tree_vdot(s, hess(s)))))
        f_new = self._safe_cost(manifold, cost, x_new)
        actual = it.fun - f_new
        # a decrease below the rounding of f is judged by its sign (as the trust region does)
        rho = actual / predicted if predicted > 1e-15 * max(1.0, abs(it.fun)) else (1.0 if actual >= 0 else -1.0)
        if not (rho > 1e-4 and math.isfinite(f_new)):
            return self._reject(x, "no decrease")
        self._lam, self._grow = lam * max(1 / 3, 1 - (2 * rho - 1) ** 3), 2.0
        return Step(x_new, step_size=step_norm, nfev=1, extra={"damping": lam, "rho": rho})

    def _reject(self, x: Any, why: str) -> Step:
        """Keep ``x`` and raise the damping by a factor that doubles at each rejection in a row."""
        self._lam = max(self._lam, 1e-10) * self._grow
        self._grow *= 2.0
        if self._lam > 1e20:
            return Step(x, failed=f"{why} even with damping {self._lam:.3g} (the gradient may be inaccurate)")
        return Step(x, nfev=1, accepted=False, extra={"damping": self._lam})
