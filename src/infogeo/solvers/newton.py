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
from ..geometry.vectors import TangentVector
from ..linalg import NotPositiveDefiniteError, conjugate_gradient
from .base import Iterate, Solver, Step


class DampedNewton(Solver):
    r"""Damped Newton steps :math:`-(H + \lambda G)^{-1} dJ`.

    Parameters
    ----------
    damping_newton : float
        :math:`\lambda \ge 0`, the weight of the metric :math:`G` (the proximity term).
    step_size : float
        :math:`\alpha`.
    matrix_free : bool
        Solve with conjugate gradient on Hessian- and metric-vector products instead of
        dense matrices (used automatically above a few thousand dimensions).
    """

    name = "DampedNewton"

    def __init__(self, damping_newton: float = 1.0, step_size: float = 1.0, *, matrix_free: bool = False,
                 **kwargs: Any):
        super().__init__(**kwargs)
        if not 0 <= damping_newton < math.inf:
            raise ValueError(f"damping_newton must be >= 0 and finite, got {damping_newton}")
        if not 0 < step_size < math.inf:
            raise ValueError(f"step_size must be positive and finite, got {step_size}")
        self.lam, self.step_size, self.matrix_free = float(damping_newton), float(step_size), matrix_free

    def _step(self, manifold: Manifold, cost: Callable, it: Iterate, k: int) -> Step:
        x, df = it.x, it.differential.components
        metric = manifold.metric
        if self.matrix_free or manifold.dim > DENSE_MAX_DIM or not metric.has_matrix:
            def op(v):  # trees: array components or {name: tensor} dicts
                return _tree.tree_map(lambda h, g: h + self.lam * g, B.hvp(cost, x, v), metric.mv(x, v))
            try:
                direction = conjugate_gradient(op, _tree.tree_map(lambda t: -t, df))
            except NotPositiveDefiniteError as exc:
                return Step(x, failed=f"H + lambda G is not positive definite ({exc}); increase damping_newton")
        else:
            A = B.hessian(cost, x) + self.lam * metric.matrix(x)
            if np.linalg.eigvalsh(B.to_numpy(0.5 * (A + B.transpose(A)))).min() <= 0:
                return Step(x, failed="H + lambda G is not positive definite at this point; increase damping_newton")
            direction = B.solve(A, -df)
        v = TangentVector(x, _tree.tree_map(lambda t: self.step_size * t, direction), it.gradient.chart)
        return Step(manifold.retract(x, v), step_size=float(B.to_numpy(metric.norm(v))))
