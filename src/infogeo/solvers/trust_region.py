r"""Trust-region method with the trust region measured by the metric.

Each step approximately solves (Conn, Gould & Toint 2000; Martens 2020, with :math:`\rho` replaced by
its quadratic model :math:`\tfrac12 s^T G s`)

.. math:: \min_s\; J(x) + dJ_x(s) + \tfrac12 s^T H s
          \quad\text{s.t.}\quad \tfrac12 s^T G(x) s \le \eta,

by truncated conjugate gradient (Steihaug–Toint) in the :math:`G`-inner
product, then accepts or rejects the step by the ratio of actual to predicted
decrease and adapts :math:`\eta`.  ``hessian="exact"`` uses the chart Hessian
of the cost (Hessian-vector products); ``hessian="metric"`` uses :math:`H = G`
(a Gauss-Newton / natural-gradient model, i.e. Levenberg–Marquardt-like steps).
"""
from __future__ import annotations

import math
from typing import Any, Callable

from .. import backend as B
from ..backend import tree as _tree
from ..geometry.manifold import Manifold
from ..geometry.vectors import TangentVector
from .base import Iterate, Solver, Step, check_choice, check_real


def _f(a) -> float:
    return float(B.to_numpy(a))


def truncated_cg(hess: Callable, metric_mv: Callable, metric_solve: Callable, df: Any, radius: float,
                 *, kappa: float = 0.1, theta: float = 1.0, max_iter: int = 1000):
    r"""Steihaug–Toint CG for :math:`\min_s df(s) + \tfrac12 s^T H s`, :math:`\|s\|_G \le \Delta`.

    Works with covector components: residuals :math:`r = df + Hs` are covectors,
    :math:`z = G^{-1} r` their gradients, so norms are metric norms.

    Returns ``(s, model_decrease, hit_boundary, iterations)``.
    """
    s = _tree.tree_map(lambda t: t * 0, df)
    r = df
    z = metric_solve(r)
    rz = _f(_tree.tree_vdot(r, z))
    r0 = math.sqrt(max(rz, 0.0))
    d = _tree.tree_map(lambda t: -t, z)
    s_Gs, s_Gd, d_Gd = 0.0, 0.0, rz
    model = 0.0  # m(s) - m(0)

    for j in range(1, max_iter + 1):
        Hd = hess(d)
        dHd = _f(_tree.tree_vdot(d, Hd))
        alpha = rz / dHd if dHd > 0 else math.inf
        new_sGs = s_Gs + 2 * alpha * s_Gd + alpha * alpha * d_Gd if math.isfinite(alpha) else math.inf
        if dHd <= 0 or new_sGs >= radius ** 2:
            # the line s + tau d meets the boundary at tau_- <= 0 <= tau_+; the model changes along it by
            # -tau rz + tau^2/2 dHd (r.d = -rz in CG).  Past the boundary with positive curvature tau_+ is the
            # better end; with negative curvature either may be (Nocedal & Wright 2006, Alg. 7.2: the lower)
            root = math.sqrt(max(s_Gd * s_Gd + d_Gd * (radius ** 2 - s_Gs), 0.0))
            taus = [(-s_Gd + root) / d_Gd] + ([(-s_Gd - root) / d_Gd] if dHd <= 0 else [])
            tau = min(taus, key=lambda t: -t * rz + 0.5 * t * t * dHd)
            model += -tau * rz + 0.5 * tau * tau * dHd
            return _tree.tree_map(lambda a, b: a + tau * b, s, d), -model, True, j
        s = _tree.tree_map(lambda a, b: a + alpha * b, s, d)
        model += -alpha * rz + 0.5 * alpha * alpha * dHd
        r = _tree.tree_map(lambda a, b: a + alpha * b, r, Hd)
        z = metric_solve(r)
        rz_new = _f(_tree.tree_vdot(r, z))
        s_Gs = new_sGs
        if math.sqrt(max(rz_new, 0.0)) <= r0 * min(r0 ** theta, kappa):
            return s, -model, False, j
        beta = rz_new / rz
        s_Gd = beta * (s_Gd + alpha * d_Gd)
        d = _tree.tree_map(lambda a, b: -a + beta * b, z, d)
        d_Gd = rz_new + beta * beta * d_Gd
        rz = rz_new
    return s, -model, False, max_iter


class TrustRegion(Solver):
    """Riemannian trust-region method (truncated CG subproblem, metric trust region).

    Parameters
    ----------
    eta : float
        Initial trust-region size :math:`\\eta` in the constraint :math:`\\tfrac12 s^T G s \\le \\eta`.
    eta_max : float
        Largest allowed :math:`\\eta`.
    hessian : {"exact", "metric"}
        Model Hessian: the cost's Hessian (autodiff Hessian-vector products) or the metric.
    accept_ratio : float
        Accept a step when actual/predicted decrease exceeds this (0.1 by default).
    """

    name = "TrustRegion"

    def __init__(self, eta: float = 0.5, eta_max: float = 1e6, *, hessian: str = "exact",
                 accept_ratio: float = 0.1, **kwargs: Any):
        super().__init__(**kwargs)
        check_choice("hessian", hessian, ("exact", "metric"))
        eta, eta_max = check_real("eta", eta, positive=True), check_real("eta_max", eta_max, positive=True)
        if not eta <= eta_max:
            raise ValueError(f"need 0 < eta <= eta_max, got eta={eta}, eta_max={eta_max}")
        if not 0 <= check_real("accept_ratio", accept_ratio) < 0.25:
            raise ValueError(f"accept_ratio must be in [0, 0.25), got {accept_ratio}")
        self.eta0, self.eta_max, self.hessian, self.accept_ratio = eta, eta_max, hessian, accept_ratio

    def _setup(self, manifold, cost, x):
        self._radius = math.sqrt(2 * self.eta0)

    def _step(self, manifold: Manifold, cost: Callable, it: Iterate, k: int) -> Step:
        x, metric = it.x, manifold.metric
        if self.hessian == "exact":
            def hess(v):
                return B.hvp(cost, x, v)
        else:
            def hess(v):
                return metric.mv(x, v)
        s, predicted, boundary, inner = truncated_cg(
            hess, lambda v: metric.mv(x, v), lambda r: metric.solve(x, r, self.damping),
            it.differential.components, self._radius)
        v = TangentVector(x, s, it.gradient.chart)
        x_new = manifold.retract(x, v)
        f_new = self._safe_cost(manifold, cost, x_new)
        actual = it.fun - f_new
        # ratio test; tiny predicted decreases are judged on the sign of the actual one
        if predicted <= 1e-15 * max(1.0, abs(it.fun)):
            rho = 1.0 if actual >= -1e-15 * max(1.0, abs(it.fun)) else -1.0
        else:
            rho = actual / predicted
        step_norm = math.sqrt(max(_f(_tree.tree_vdot(s, metric.mv(x, s))), 0.0))
        if rho < 0.25:
            self._radius = 0.25 * self._radius
        elif rho > 0.75 and boundary:
            self._radius = min(2 * self._radius, math.sqrt(2 * self.eta_max))
        extra = {"eta": 0.5 * self._radius ** 2, "rho": rho, "inner_iterations": inner}
        if rho > self.accept_ratio and math.isfinite(f_new):
            return Step(x_new, step_size=step_norm, nfev=1, extra=extra)
        if self._radius < 1e-14:
            return Step(x, nfev=1, failed="trust region collapsed (no step decreases the cost)")
        return Step(x, step_size=0.0, nfev=1, accepted=False, extra=extra)
