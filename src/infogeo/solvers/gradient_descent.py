r"""Riemannian gradient descent; natural gradient is the same solver under a Fisher metric.

.. math:: x_{k+1} = R_{x_k}\big(-\alpha_k\, \operatorname{grad} f(x_k)\big),
          \qquad \operatorname{grad} f = (df)^\sharp = G^{-1} df,

with :math:`R` the retraction or the exponential map.  Under the Euclidean
metric this is plain gradient descent; under a Fisher metric it is natural
gradient; under a pulled-back Euclidean metric it is Gauss-Newton (Nocedal & Wright 2006;
Martens 2020).

Without a given step size the step is the Barzilai–Borwein one (Barzilai & Borwein 1988),
:math:`\alpha_k = \|s\|^2_x / (df_k - df_{k-1})(s)` with :math:`s` the previous step, an
inverse Rayleigh quotient of the Hessian along :math:`s` taken in the metric, safeguarded by a
nonmonotone Armijo search (Grippo, Lampariello & Lucidi 1986; Raydan 1997): a trial is
accepted when it decreases enough below the *largest* of the last few costs, so the long steps
that make the method fast on ill-conditioned problems are not cut back at every iteration.
"""
from __future__ import annotations

import math
import numbers
import warnings
from collections import deque
from typing import Any, Callable, Optional

from .. import backend as B
from ..backend import tree as _tree
from ..geometry.manifold import Manifold
from ..geometry.metric import Metric
from .base import Iterate, Solver, Step, check_choice, check_count
from .step_rules import StepSize, armijo, step_at


class GradientDescent(Solver):
    """Riemannian gradient descent.

    Parameters
    ----------
    step_size : float or callable, optional
        A constant :math:`\\alpha`, or a schedule ``k -> alpha_k`` (k from 1), e.g.
        :class:`~infogeo.solvers.InverseTime`.  With a line search it is the first trial step
        of each iteration.  Left out, the first trial is the Barzilai–Borwein step
        :math:`\\langle s, s\\rangle_x / (df_k - df_{k-1})(s)` (:math:`s` the previous step;
        :math:`\\alpha = 1` at the first iteration and wherever the curvature along
        :math:`s` is not positive), safeguarded by the nonmonotone search.
    update : {"retraction", "exp"}
        Move along the manifold's retraction or along geodesics.
    line_search : {"auto", None, "armijo", "nonmonotone"}
        ``"armijo"``: backtracking on the manifold until sufficient decrease
        :math:`f(R_x(-\\alpha g)) \\le f(x) - c_1 \\alpha \\|g\\|_x^2`;
        ``"nonmonotone"``: the same with :math:`f(x)` replaced by the largest of the last
        ``memory`` costs (Grippo, Lampariello & Lucidi 1986); ``None``: the step size as given.
        ``"auto"`` (default) is ``"nonmonotone"`` when no ``step_size`` is given and ``None``
        when one is.
    armijo_c1, armijo_shrink : float
        Sufficient-decrease constant and backtracking factor, both in (0, 1).
    memory : int
        How many recent costs the nonmonotone search compares with (10; 1 is plain Armijo).
    metric : Metric, optional
        Descend under this metric instead of the manifold's own:
        ``GradientDescent(step_size, metric=G).minimize(M, f, x0)`` is
        ``GradientDescent(step_size).minimize(M.with_metric(G), f, x0)`` (natural gradient under a
        Fisher metric, Gauss-Newton under a pulled-back Euclidean one).  A statistical manifold's
        own metric is already its Fisher metric.
    **kwargs
        Stopping rules and reporting, see :class:`~infogeo.solvers.base.Solver`.
    """

    name = "GradientDescent"

    def __init__(self, step_size: Optional[StepSize] = None, *, update: str = "retraction",
                 line_search: Optional[str] = "auto", armijo_c1: float = 1e-4, armijo_shrink: float = 0.5,
                 memory: int = 10, metric: Optional[Metric] = None, **kwargs: Any):
        super().__init__(**kwargs)
        check_choice("update", update, ("retraction", "exp"))
        check_choice("line_search", line_search, ("auto", None, "armijo", "nonmonotone"))
        for label, val in (("armijo_c1", armijo_c1), ("armijo_shrink", armijo_shrink)):
            if isinstance(val, bool) or not isinstance(val, numbers.Real) or not 0 < val < 1:
                raise ValueError(f"{label} must be a number in (0, 1), got {val!r}")
        if not 1 <= check_count("memory", memory) <= 1_000_000:
            raise ValueError(f"memory must be an integer in [1, 1e6], got {memory!r}")
        if metric is not None and not isinstance(metric, Metric):
            raise TypeError(f"metric must be a Metric, got {type(metric).__name__}")
        if line_search == "auto":
            line_search = "nonmonotone" if step_size is None else None
        if step_size is not None and not callable(step_size):
            step_at(step_size, 1)  # validate early
        self.step_size, self.update, self.line_search = step_size, update, line_search
        self.armijo_c1, self.armijo_shrink, self.memory = armijo_c1, armijo_shrink, int(memory)
        self.metric = metric

    def minimize(self, manifold: Manifold, cost, x0, **kwargs):
        if self.metric is not None:
            manifold = manifold.with_metric(self.metric)
        return super().minimize(manifold, cost, x0, **kwargs)

    def _geodesic_errors(self) -> tuple:
        """The errors of an ``exp`` step whose geodesic cannot be followed (the ODE's ``GeodesicError``) or whose end
        point is not a valid point (a closed form's ``ValueError``: a variance of 0 or below); none for
        retractions."""
        if self.update != "exp":
            return ()
        from ..geometry.geodesics import GeodesicError  # on demand: it loads scipy.integrate
        return (GeodesicError, ValueError)

    def _move(self, manifold: Manifold, x: Any, v):
        return manifold.exp(x, v) if self.update == "exp" else manifold.retract(x, v)

    def _setup(self, manifold: Manifold, cost: Callable, x: Any) -> None:
        self._recent = deque(maxlen=self.memory if self.line_search == "nonmonotone" else 1)
        self._previous = None  # (differential components, step components, <s, s>) of the last step

    def _barzilai_borwein(self, it: Iterate) -> float:
        """:math:`\\langle s, s\\rangle / (df_k - df_{k-1})(s)`, or 1 without a previous step or positive curvature."""
        if self._previous is None:
            return 1.0
        df_old, s, ss = self._previous
        curvature = float(B.to_numpy(_tree.tree_vdot(it.differential.components, s))) - \
            float(B.to_numpy(_tree.tree_vdot(df_old, s)))
        if not (curvature > 0 and math.isfinite(curvature)):
            return 1.0
        return min(max(ss / curvature, 1e-20), 1e20)

    def _step(self, manifold: Manifold, cost: Callable, it: Iterate, k: int) -> Step:
        alpha = self._barzilai_borwein(it) if self.step_size is None else step_at(self.step_size, k)
        direction = -it.gradient
        geodesic_errors = self._geodesic_errors()
        if self.line_search is None:
            try:
                return Step(self._move(manifold, it.x, alpha * direction), step_size=alpha * it.grad_norm)
            except geodesic_errors as exc:
                return Step(it.x, failed=f"the geodesic step could not be followed ({exc}); use a smaller "
                                         "step size or line_search='armijo'")

        def phi(a: float) -> float:
            try:
                return self._safe_cost(manifold, cost, self._move(manifold, it.x, a * direction))
            except (ValueError, ArithmeticError) + geodesic_errors:  # a trial point that cannot be reached
                return float("inf")

        self._recent.append(it.fun)
        alpha, _, evals = armijo(phi, max(self._recent), -it.grad_norm * it.grad_norm, alpha,
                                 shrink=self.armijo_shrink, c1=self.armijo_c1)
        if alpha == 0.0:
            return Step(it.x, nfev=evals, failed="line search found no decrease (the gradient may be "
                                                  "inaccurate or the point is already optimal to precision)")
        s = _tree.tree_map(lambda t: alpha * t, direction.components)
        self._previous = (it.differential.components, s, (alpha * it.grad_norm) * (alpha * it.grad_norm))
        return Step(self._move(manifold, it.x, alpha * direction), step_size=alpha * it.grad_norm,
                    nfev=evals, extra={"alpha": alpha})


class NaturalGradient(GradientDescent):
    """Deprecated alias: ``GradientDescent(step_size, metric=metric)``.

    Natural gradient is gradient descent under a Fisher metric, so it has no solver of its
    own; the name now belongs to the torch optimizer :class:`infogeo.nn.NaturalGradient`.
    """

    def __init__(self, metric: Optional[Metric] = None, step_size: Optional[StepSize] = None, **kwargs: Any):
        warnings.warn("infogeo.solvers.NaturalGradient is deprecated: use infogeo.solvers.GradientDescent("
                      "step_size, metric=...) (natural gradient is gradient descent under the Fisher metric; "
                      "infogeo.nn.NaturalGradient is the torch optimizer)", DeprecationWarning, stacklevel=2)
        super().__init__(step_size, metric=metric, **kwargs)
