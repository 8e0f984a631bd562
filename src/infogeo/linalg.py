r"""Matrix-free linear algebra on components (arrays or dicts of tensors).

:func:`conjugate_gradient` solves :math:`(A + \lambda I)\,x = b` from products
:math:`v \mapsto A v` alone; the metric's ``sharp`` uses it when the metric
exposes only ``mv`` (pullback metrics of large maps, network Fisher).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable

from .backend import tree as _tree

logger = logging.getLogger(__name__)


class NotPositiveDefiniteError(ValueError):
    """Raised when a metric (or a linear operator that must be SPD) is not positive definite."""


@dataclass
class CGInfo:
    """What :func:`conjugate_gradient` did: iterations, final relative residual, convergence."""

    iterations: int
    residual: float
    converged: bool


def _axpy(a, x, y):
    """``a * x + y`` leafwise."""
    return _tree.tree_map(lambda xi, yi: a * xi + yi, x, y)


def _float(s) -> float:
    return float(s.item()) if hasattr(s, "item") else float(s)


def conjugate_gradient(mv: Callable[[Any], Any], b: Any, *, damping: float = 0.0,
                       x0: Any = None, rtol: float = 1e-10, atol: float = 0.0,
                       max_iter: int | None = None, return_info: bool = False):
    r"""Solve :math:`(A + \lambda I) x = b` by conjugate gradient.

    Parameters
    ----------
    mv : callable
        ``v -> A v`` for a symmetric positive (semi-)definite :math:`A`.
    b : array or dict of arrays
        Right-hand side.
    damping : float
        :math:`\lambda \ge 0`, added to the diagonal.
    rtol, atol : float
        Stop when :math:`\|r\| \le \max(\text{rtol}\,\|b\|, \text{atol})`.
    max_iter : int, optional
        Defaults to the number of unknowns (exact arithmetic would converge by then),
        at most 10,000.  In floating point an ill-conditioned system may need several
        times more; pass ``return_info=True`` to see whether it converged.

    Raises
    ------
    NotPositiveDefiniteError
        If a search direction has non-positive curvature :math:`p^T(A+\lambda I)p \le 0`.
    ValueError
        If ``b`` or a product of the operator contains NaN or inf.
    """
    if not damping >= 0:
        raise ValueError(f"damping must be >= 0, got {damping}")
    if not _tree.tree_all_finite(b):
        raise ValueError("conjugate_gradient: the right-hand side b contains NaN or inf")
    n = sum(int(math.prod(getattr(leaf, "shape", ()))) for leaf in _tree.leaves(b))
    max_iter = max_iter if max_iter is not None else min(max(n, 1), 10_000)

    def op(v):
        out = mv(v)
        return _axpy(damping, v, out) if damping else out

    x = _tree.tree_map(lambda t: t * 0, b) if x0 is None else x0
    r = b if x0 is None else _tree.tree_map(lambda bi, ai: bi - ai, b, op(x0))
    p = r
    rr = _float(_tree.tree_vdot(r, r))
    bnorm = math.sqrt(_float(_tree.tree_vdot(b, b)))
    tol = max(rtol * bnorm, atol)
    it = 0
    while math.sqrt(rr) > tol and it < max_iter:
        Ap = op(p)
        pAp = _float(_tree.tree_vdot(p, Ap))
        if not math.isfinite(pAp):
            raise ValueError(f"conjugate gradient: the operator returned NaN or inf after {it} iterations")
        if not pAp > 0:
            raise NotPositiveDefiniteError(
                f"conjugate gradient met a direction of non-positive curvature (p^T A p = {pAp:.3g}): "
                "the operator is not positive definite; add damping > 0")
        alpha = rr / pAp
        x = _axpy(alpha, p, x)
        r = _axpy(-alpha, Ap, r)
        rr_new = _float(_tree.tree_vdot(r, r))
        p = _axpy(rr_new / rr, p, r)
        rr = rr_new
        it += 1
    res = math.sqrt(rr) / bnorm if bnorm > 0 else 0.0
    converged = math.sqrt(rr) <= tol
    if not converged:
        logger.debug("CG stopped after %d iterations, relative residual %.3g", it, res)
    return (x, CGInfo(it, res, converged)) if return_info else x
