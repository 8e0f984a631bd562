r"""Step sizes: constant, schedules, and Armijo backtracking on the manifold."""
from __future__ import annotations

import math
import numbers
from typing import Callable, Union

from ..geometry.points import check_real


class InverseTime:
    r"""The schedule :math:`\alpha_k = c / (k + k_0)` (k counts from 1).

    With :math:`c = 1, k_0 = 0` this is the :math:`1/k` schedule under which
    online natural-gradient MLE equals the running maximum-likelihood estimate.
    """

    def __init__(self, c: float = 1.0, k0: float = 0.0):
        c = check_real("c", c, positive=True)
        if isinstance(k0, bool) or not isinstance(k0, numbers.Real):
            raise TypeError(f"k0 must be a real number, got {type(k0).__name__} {k0!r}")
        if not -1 < k0 < math.inf:  # alpha_k = c / (k + k0) must stay positive and finite from k = 1 on
            raise ValueError(f"k0 must be > -1 and finite, got {k0}")
        self.c, self.k0 = float(c), float(k0)

    def __call__(self, k: int) -> float:
        return self.c / (k + self.k0)

    def __repr__(self) -> str:
        return f"InverseTime(c={self.c}, k0={self.k0})"


StepSize = Union[float, Callable[[int], float]]


def step_at(step_size: StepSize, k: int) -> float:
    """The step size of iteration ``k`` (1-based) for a constant or a schedule."""
    value = step_size(k) if callable(step_size) else step_size
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(f"step size must be a positive number or a schedule k -> number, got "
                        f"{type(value).__name__} {value!r}")
    try:
        alpha = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"step size must be a positive number or a schedule k -> number, got "
                        f"{type(value).__name__} {value!r}") from None
    if not (alpha > 0 and math.isfinite(alpha)):
        raise ValueError(f"step size must be positive and finite, got {alpha} at iteration {k}")
    return alpha


def armijo(phi: Callable[[float], float], f0: float, slope: float, alpha0: float, *,
           shrink: float = 0.5, c1: float = 1e-4, max_backtracks: int = 40) -> tuple[float, float, int]:
    r"""Backtracking line search for sufficient decrease.

    Finds :math:`\alpha = \alpha_0\,\beta^j` with
    :math:`\phi(\alpha) \le f_0 + c_1\,\alpha\,\text{slope}`, where
    :math:`\phi(\alpha) = f(R_x(\alpha d))` and ``slope`` :math:`= df_x(d) < 0`.
    ``phi`` returns ``inf`` for points outside the manifold.

    Returns ``(alpha, phi(alpha), evaluations)``; ``alpha = 0`` when no step decreases enough.
    """
    if not slope < 0:
        raise ValueError(f"Armijo needs a descent direction (slope {slope:.3g} >= 0)")
    alpha = alpha0
    for j in range(1, max_backtracks + 1):
        value = phi(alpha)
        if value <= f0 + c1 * alpha * slope:
            return alpha, value, j
        alpha *= shrink
    return 0.0, f0, max_backtracks
