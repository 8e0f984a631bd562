r"""The linearisation of a map at a point: its outputs and Jacobian products, from one forward pass.

For a map :math:`f` and a point :math:`x`, :class:`Linearization` holds
:math:`z = f(x)` and offers

* ``jvp(v)`` — :math:`J v` (push a tangent vector forward to the outputs);
* ``vjp(u)`` — :math:`J^T u` (pull an output covector back),

with :math:`J = \partial f/\partial x` at :math:`x`.  Products at one point reuse
one forward graph.
"""
from __future__ import annotations

import logging
from typing import Callable, Dict, Sequence, Tuple

import torch

logger = logging.getLogger(__name__)

__all__ = ["Linearization", "same_state", "versions"]

Params = Dict[str, torch.Tensor]


def versions(tensors: Sequence[torch.Tensor]) -> Tuple[int, ...]:
    """The version counters of ``tensors`` (bumped by every in-place update)."""
    return tuple(t._version for t in tensors)


def same_state(a: Tuple[list, Tuple], b: Tuple[list, Tuple]) -> bool:
    """Same tensor objects (held, so ids are not recycled) with unchanged version counters."""
    return len(a[0]) == len(b[0]) and all(x is y for x, y in zip(a[0], b[0])) and a[1] == b[1]


def _has_custom_function(z: torch.Tensor) -> bool:
    """Whether the autograd graph of ``z`` contains a user-defined ``torch.autograd.Function``."""
    seen, stack = set(), [z.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if isinstance(fn, torch.autograd.function.BackwardCFunction):
            return True
        stack.extend(f for f, _ in fn.next_functions)
    return False


class Linearization:
    r"""One forward pass of a map at a point, kept for Jacobian products.

    :math:`J^T u` is a backward pass through the forward graph.  :math:`J v` is a
    backward pass too: the backward graph of :math:`u_0 \mapsto J^T u_0` (built once,
    with ``create_graph``, at :math:`u_0 = 0`) is linear in :math:`u_0`, and its
    vjp with cotangent :math:`v` is :math:`J v`.  Per product at a cached point
    this measured about half the cost of a torch.func jvp (which needs its own
    forward pass) plus a backward pass, and less even for a single product.
    Maps without double backward fall back to ``torch.func.jvp``.

    Parameters
    ----------
    fn : callable
        :math:`f`, from a dict ``{name: tensor}`` to a tensor.
    x : dict
        The point.
    """

    def __init__(self, fn: Callable[[Params], torch.Tensor], x: Params):
        self.fn = fn
        self.leaves = {n: t.detach().requires_grad_(True) for n, t in x.items()}
        with torch.enable_grad():
            self.z = fn(self.leaves)
            self.transpose = None  # (u0, names, J^T u0 as a function of u0)
            if _has_custom_function(self.z):
                # a custom autograd.Function may lack a true double backward, and a
                # once_differentiable one can drop its path silently: forward mode
                # (its jvp rule) is the safe way through it
                return
            try:
                u0 = torch.zeros_like(self.z, requires_grad=True)
                g = torch.autograd.grad(self.z, list(self.leaves.values()), u0, create_graph=True,
                                        allow_unused=True)
                used = [(n, gi) for n, gi in zip(self.leaves, g) if gi is not None and gi.requires_grad]
                if used:  # outputs independent of every parameter: forward mode gives the zeros
                    self.transpose = (u0, [n for n, _ in used], [gi for _, gi in used])
            except RuntimeError as err:  # an operation without double backward
                logger.debug("Jacobian products by torch.func.jvp: %s", err)

    def jvp(self, v: Params) -> torch.Tensor:
        """:math:`J v`, shape of the outputs."""
        if self.transpose is not None:
            u0, names, g = self.transpose
            try:
                return torch.autograd.grad(g, u0, [v[n].to(self.leaves[n]) for n in names], retain_graph=True)[0]
            except RuntimeError as err:  # a double backward that is not implemented, raised only when run
                logger.debug("Jacobian products by torch.func.jvp: %s", err)
                self.transpose = None
        prim = {n: t.detach() for n, t in self.leaves.items()}
        return torch.func.jvp(self.fn, (prim,), ({n: v[n].to(prim[n]) for n in prim},))[1]

    def vjp(self, u: torch.Tensor) -> Params:
        """:math:`J^T u` as a dict shaped like the point."""
        g = torch.autograd.grad(self.z, list(self.leaves.values()), u, retain_graph=True, allow_unused=True)
        return {n: (gi if gi is not None else torch.zeros_like(self.leaves[n])) for n, gi in zip(self.leaves, g)}
