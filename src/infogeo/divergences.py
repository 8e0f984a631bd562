r"""Dissimilarities :math:`\rho(u, w) \ge 0` with :math:`\rho(w, w) = 0`.

Each divergence knows its Hessian in the first argument on the diagonal,
:math:`G(w) = \nabla^2_u \rho(u, w)|_{u=w}` — the metric it induces (Amari & Nagaoka 2000;
the second-order term of the proximity penalty).  The base class gets it
by autodiff; subclasses give closed forms that tests check against autodiff.
"""
from __future__ import annotations

from typing import Any, Callable

from . import backend as B


def _traced(a: Any) -> bool:
    """Whether ``a`` is a value being traced by autodiff (an autograd box, a torch.func tensor)."""
    if hasattr(a, "_value"):
        return True
    torch = __import__("sys").modules.get("torch")
    return torch is not None and isinstance(a, torch.Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(a)


def check_pair(u: Any, w: Any) -> tuple:
    """``u`` and ``w`` as float arrays of one shape with finite entries, or a clear error naming them.

    A traced call (the Hessian on the diagonal, by autodiff) is not checked again: its plain call was,
    and a traced value cannot be read.
    """
    if _traced(u) or _traced(w):
        return u, w
    from .geometry.points import as_coordinates  # here: geometry imports this module
    u, w = as_coordinates(u, None, "first argument u"), as_coordinates(w, None, "second argument w")
    if B.is_torch(u) != B.is_torch(w):
        raise TypeError("u and w must be arrays of the same backend (both numpy or both torch), got "
                        f"{type(u).__name__} and {type(w).__name__}")
    if tuple(u.shape) != tuple(w.shape):
        raise ValueError(f"u and w must have the same shape, got {tuple(u.shape)} and {tuple(w.shape)}")
    return u, w


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
        u, w = check_pair(u, w)
        d = u - w
        return 0.5 * B.sum(d * d)

    def hessian_at_diagonal(self, w):
        return B.eye(w.shape[-1], like=w)

    def hvp_at_diagonal(self, w, v):
        return v


class Bregman(Divergence):
    r"""Bregman divergence of a strictly convex :math:`\phi` (Bregman 1967; Banerjee et al. 2005).

    .. math:: D_\phi(u, w) = \phi(u) - \phi(w) - \nabla\phi(w)^T (u - w),

    whose metric on the diagonal is :math:`\nabla^2\phi(w)`.  For the
    log-partition :math:`\psi` of an exponential family in natural coordinates,
    :math:`D_\psi(\theta', \theta) = \mathrm{KL}(p_\theta \| p_{\theta'})`.
    """

    def __init__(self, phi: Callable[[Any], Any]):
        self.phi = phi

    def __call__(self, u, w):
        u, w = check_pair(u, w)
        phi_w, grad_w = B.value_and_grad(self.phi, w)
        return self.phi(u) - phi_w - B.sum(grad_w * (u - w))

    def hessian_at_diagonal(self, w):
        return B.hessian(self.phi, w)

    def hvp_at_diagonal(self, w, v):
        return B.hvp(self.phi, w, v)
