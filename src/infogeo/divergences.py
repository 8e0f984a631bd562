r"""Dissimilarities :math:`\rho(u, w) \ge 0` with :math:`\rho(w, w) = 0`.

Each divergence knows its Hessian in the first argument on the diagonal,
:math:`G(w) = \nabla^2_u \rho(u, w)|_{u=w}` — the metric it induces (Amari & Nagaoka 2000;
the second-order term of the proximity penalty).  The base class gets it
by autodiff; subclasses give closed forms that tests check against autodiff.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

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


#: Gauss-Legendre nodes and weights on [0, 1] for the remainder's integral (eight: exact to rounding on the short
#: steps that take it)
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(8)
_GL_NODES, _GL_WEIGHTS = (_GL_NODES + 1.0) / 2.0, _GL_WEIGHTS / 2.0


def bregman_value(phi: Callable[[Any], Any], phi_u: Any, phi_w: Any, grad_w: Any, u: Any, w: Any,
                  batched: bool = False):
    r""":math:`\phi(u) - \phi(w) - \nabla\phi(w)^T(u - w)` from its parts, without their cancellation.

    The difference keeps about :math:`\epsilon\,(|\phi(u)| + |\phi(w)| + |\nabla\phi(w)^T d|)` of absolute error
    (:math:`d = u - w`): for nearby points, or a :math:`\phi` of large values, little or nothing of a divergence of
    order :math:`|d|^2`, and a negative value half of the time.  Where fewer than about ten digits would remain it
    is the remainder's integral form instead, :math:`\int_0^1 (1 - t)\, d^T\nabla^2\phi(w + t d)\, d\,dt`, a
    sum of curvatures (non-negative for a convex :math:`\phi`) by eight-point Gauss-Legendre quadrature; under
    autodiff (values being traced) the direct form, whose derivatives lose nothing.  ``batched``: points on the leading axes of ``u`` and ``w``, ``phi`` mapping ``(..., dim)`` to ``(...)``."""
    d = u - w
    lin = B.sum(grad_w * d, axis=-1) if batched else B.sum(grad_w * d)
    direct = phi_u - phi_w - lin
    if any(_traced(a) for a in (direct, u, w)):
        return direct   # differentiated (a metric as its Hessian): the direct form's derivatives are exact
    scale = np.abs(B.to_numpy(phi_u)) + np.abs(B.to_numpy(phi_w)) + np.abs(B.to_numpy(lin))
    lost = ~(np.abs(B.to_numpy(direct)) > 1e6 * np.finfo(float).eps * scale)
    if not np.any(lost):
        return direct
    scalar = (lambda t: B.sum(phi(t))) if batched else phi   # points apart: the Hessian of the sum is blockwise
    near = 0.0 * direct
    for t, c in zip(_GL_NODES, _GL_WEIGHTS):
        curv = d * B.hvp(scalar, w + float(t) * d, d)
        near = near + float(c * (1.0 - t)) * (B.sum(curv, axis=-1) if batched else B.sum(curv))
    return B.where(B.array(lost, like=direct), near, direct) if np.ndim(lost) else near


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
        return bregman_value(self.phi, self.phi(u), phi_w, grad_w, u, w)

    def hessian_at_diagonal(self, w):
        return B.hessian(self.phi, w)

    def hvp_at_diagonal(self, w, v):
        return B.hvp(self.phi, w, v)
