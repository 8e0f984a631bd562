r"""Dissimilarities :math:`\rho(u, w) \ge 0` with :math:`\rho(w, w) = 0`.

Each divergence knows its Hessian in the first argument on the diagonal,
:math:`G(w) = \nabla^2_u \rho(u, w)|_{u=w}` — the metric it induces (Amari 2016,
Ch. 1: the second-order term of the divergence).  The base class gets it
by autodiff; subclasses give closed forms that tests check against autodiff.
"""
from __future__ import annotations

from typing import Any, Callable

from . import backend as B


class Divergence:
    """A dissimilarity ``rho(u, w)``; subclass and implement :meth:`__call__`.

    A plain function ``rho(u, w)`` can be wrapped with ``Divergence.from_function``.
    """

    def __call__(self, u: Any, w: Any):
        raise NotImplementedError

    @staticmethod
    def from_function(rho: Callable[[Any, Any], Any]) -> "Divergence":
        return rho if isinstance(rho, Divergence) else _FunctionDivergence(rho)

    def hessian_at_diagonal(self, w: Any):
        r""":math:`\nabla_u^2 \rho(u, w)|_{u=w}` (autodiff; ``w`` held fixed)."""
        return B.hessian(lambda u: self(u, w), w)

    def hvp_at_diagonal(self, w: Any, v: Any):
        r""":math:`\nabla_u^2 \rho(u, w)|_{u=w}\, v` without forming the Hessian."""
        return B.hvp(lambda u: self(u, w), w, v)


class _FunctionDivergence(Divergence):
    def __init__(self, rho: Callable[[Any, Any], Any]):
        self.rho = rho

    def __call__(self, u, w):
        return self.rho(u, w)

    def __repr__(self) -> str:
        return f"Divergence({getattr(self.rho, '__name__', self.rho)!r})"


class SquaredEuclidean(Divergence):
    r""":math:`\rho(u, w) = \tfrac12 \|u - w\|^2`; its metric is the identity."""

    def __call__(self, u, w):
        d = u - w
        return 0.5 * B.sum(d * d)

    def hessian_at_diagonal(self, w):
        return B.eye(w.shape[-1], like=w)

    def hvp_at_diagonal(self, w, v):
        return v


class Bregman(Divergence):
    r"""Bregman divergence of a strictly convex :math:`\phi` (Bregman 1967; Amari 2016, Ch. 1).

    .. math:: D_\phi(u, w) = \phi(u) - \phi(w) - \nabla\phi(w)^T (u - w),

    whose metric on the diagonal is :math:`\nabla^2\phi(w)`.  For the
    log-partition :math:`\psi` of an exponential family in natural coordinates,
    :math:`D_\psi(\theta', \theta) = \mathrm{KL}(p_\theta \| p_{\theta'})`.
    """

    def __init__(self, phi: Callable[[Any], Any]):
        self.phi = phi

    def __call__(self, u, w):
        phi_w, grad_w = B.value_and_grad(self.phi, w)
        return self.phi(u) - phi_w - B.sum(grad_w * (u - w))

    def hessian_at_diagonal(self, w):
        return B.hessian(self.phi, w)

    def hvp_at_diagonal(self, w, v):
        return B.hvp(self.phi, w, v)
