r"""The linearisation of a map at a point: its outputs and Jacobian products, from one forward pass.

For a map :math:`f` and a point :math:`x`, :class:`Linearization` holds
:math:`z = f(x)` and offers

* ``outputs`` — :math:`z` (detached from any graph);
* ``jvp(v)`` — :math:`J v`: push a tangent vector forward to the outputs;
* ``vjp(u)`` — :math:`J^T u`: pull an output covector back,

with :math:`J = \partial f/\partial x` at :math:`x`.  It is the one place where
infogeo forms Jacobian products: :class:`~infogeo.geometry.pullback.PullbackMetric`
(:math:`J^T G_z J v`), the network metric of :mod:`infogeo.nn` and the
optimizer's quadratic model all go through it.

Both products come from one recorded forward pass.  :math:`J^T u` is a reverse
pass; :math:`J v` is the reverse pass of the (linear) map :math:`u \mapsto J^T u`
with cotangent :math:`v` — the "double vjp" identity
:math:`\big(\partial_u (J^T u)\big)^T v = J v` — so repeated products at one point
(the iterations of a conjugate-gradient solve) need no further forward pass.
For a few products and no :math:`J^Tu` at a point, ``mode="forward"`` takes each
:math:`Jv` by one forward-mode pass instead, recording no graph (cheaper there).

The map may be

* a function of a numpy array written with :mod:`infogeo.backend` operations
  (differentiated by autograd), or
* a torch function of a tensor or of a ``{name: tensor}`` dict, e.g. a network
  evaluated by :func:`torch.func.functional_call`.  Maps through a custom
  ``torch.autograd.Function`` or an operation without double backward take
  :math:`Jv` by forward mode (``torch.autograd.forward_ad``) instead.

Examples
--------
>>> import numpy as np
>>> lin = Linearization(lambda x: x ** 2, np.array([1.0, 2.0]))
>>> lin.jvp(np.array([1.0, 1.0]))
array([2., 4.])
>>> lin.vjp(np.array([1.0, 0.0]))
array([2., 0.])
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from .. import backend as B
from ..backend import _dispatch, tree as _tree

logger = logging.getLogger(__name__)

__all__ = ["Linearization", "LinearizationCache", "composite_attention", "same_state", "versions"]


def versions(tensors: Sequence[Any]) -> Tuple[int, ...]:
    """The version counters of torch ``tensors`` (bumped by every in-place update)."""
    return tuple(t._version for t in tensors)


def same_state(a: Tuple[list, Tuple], b: Tuple[list, Tuple]) -> bool:
    """Same tensor objects (held, so ids are not recycled) with unchanged version counters."""
    return len(a[0]) == len(b[0]) and all(x is y for x, y in zip(a[0], b[0])) and a[1] == b[1]


def _has_custom_function(z: Any) -> bool:
    """Whether the autograd graph of ``z`` contains a user-defined ``torch.autograd.Function``."""
    import torch
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


def composite_attention() -> contextlib.AbstractContextManager:
    """Scaled dot-product attention by its composite (math) kernel while the map is linearised.

    The fused CPU/GPU attention kernels have neither a double backward nor forward AD
    (nor a ``vmap`` batching rule); the composite kernel computes the same function with
    ordinary differentiable operations.
    """
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # older torch
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.MATH])


class _TorchLinearization:
    r"""The torch implementation, on ``{name: tensor}`` points.

    ``forward=False`` records the graph in the constructor (and the transpose map
    :math:`u \mapsto J^Tu` for the double vjp); ``forward=True`` records nothing until a
    :meth:`vjp` asks for the graph and takes :math:`Jv` by forward mode.
    """

    def __init__(self, fn: Callable[[Dict[str, Any]], Any], x: Dict[str, Any], forward: bool = False):
        self.fn = fn
        self.point = {n: t.detach() for n, t in x.items()}
        self.forward = forward
        self.leaves: Optional[Dict[str, Any]] = None
        self._z = None
        self.transpose = None  # (u0, names, J^T u0 as a function of u0)
        if not forward:
            self._record(transpose=True)

    def _checked(self, z):
        import torch
        if not isinstance(z, torch.Tensor):
            raise TypeError(f"the map must return a tensor, got {type(z).__name__}")
        return z

    def _record(self, transpose: bool) -> None:
        r"""One forward pass with graph; with ``transpose``, also the graph of :math:`u \mapsto J^Tu`."""
        import torch
        self.leaves = {n: t.detach().requires_grad_(True) for n, t in self.point.items()}
        with torch.enable_grad(), composite_attention():
            self._z = self._checked(self.fn(self.leaves))
            if not transpose:
                return
            if self._z.grad_fn is None or _has_custom_function(self._z):
                # a custom autograd.Function may lack a true double backward, and a
                # once_differentiable one can drop its path silently: forward mode
                # (its jvp rule) is the safe way through it
                self.forward = True
                return
            try:
                u0 = torch.zeros_like(self._z, requires_grad=True)
                g = torch.autograd.grad(self._z, list(self.leaves.values()), u0, create_graph=True,
                                        allow_unused=True)
                used = [(n, gi) for n, gi in zip(self.leaves, g) if gi is not None and gi.requires_grad]
                if used:  # outputs independent of every parameter: forward mode gives the zeros
                    self.transpose = (u0, [n for n, _ in used], [gi for _, gi in used])
                else:
                    self.forward = True
            except RuntimeError as err:  # an operation without double backward
                logger.debug("Jacobian products by forward mode: %s", err)
                self.forward = True

    @property
    def z(self):
        if self._z is None:  # forward mode before any product: the outputs alone
            import torch
            with torch.no_grad(), composite_attention():
                self._z = self._checked(self.fn(self.point))
        return self._z

    def jvp_many(self, vs: Sequence[Dict[str, Any]]):
        r""":math:`[Jv_1, \dots, Jv_m]` stacked along a new first axis."""
        import torch
        if not self.forward:
            u0, names, g = self.transpose
            try:
                with torch.enable_grad():
                    return torch.stack([torch.autograd.grad(g, u0, [v[n].to(self.leaves[n]) for n in names],
                                                            retain_graph=True)[0] for v in vs])
            except RuntimeError as err:  # a double backward that is not implemented, raised only when run
                logger.debug("Jacobian products by forward mode: %s", err)
                self.forward, self.transpose = True, None
        return self._forward_products(vs)

    def _forward_products(self, vs: Sequence[Dict[str, Any]]):
        r"""Forward mode: one dual pass per direction, each giving :math:`z` and :math:`Jv`, no graph kept.

        A pass costs about one forward pass; for the few products of one point this beats
        recording a graph and its transpose (measured on an MLP: 1 product 1.1 ms vs 1.9 ms,
        2 products 2.0 ms vs 2.5 ms).
        """
        import torch
        import torch.autograd.forward_ad as fwAD
        out = []
        with torch.no_grad(), composite_attention(), fwAD.dual_level():
            for v in vs:
                dual = {n: fwAD.make_dual(p, v[n].to(p)) for n, p in self.point.items()}
                try:
                    z, t = fwAD.unpack_dual(self._checked(self.fn(dual)))
                except NotImplementedError as exc:   # the double vjp failed first: no route to Jv is left
                    why = (str(exc).splitlines() or [type(exc).__name__])[0]
                    raise ValueError(f"Jacobian-vector products of this map need forward-mode autodiff or a double "
                                     f"backward, and torch implements neither for one of its operations ({why}); "
                                     f"for a network, use a curvature that takes no such products ('kfac', 'diag', "
                                     f"'block' or 'dense')") from exc
                if self._z is None:
                    self._z = z
                out.append(torch.zeros_like(z) if t is None else t)
        return torch.stack(out) if out else torch.zeros((0,) + tuple(self.z.shape), dtype=self.z.dtype,
                                                         device=self.z.device)

    def vjp(self, u):
        import torch
        if self.leaves is None:  # forward mode: the graph is recorded on the first vjp
            self._record(transpose=False)
        if self._z.grad_fn is None:
            return {n: torch.zeros_like(t) for n, t in self.leaves.items()}
        with torch.enable_grad():
            g = torch.autograd.grad(self._z, list(self.leaves.values()), u.to(self._z), retain_graph=True,
                                    allow_unused=True)
        return {n: (gi if gi is not None else torch.zeros_like(self.leaves[n])) for n, gi in zip(self.leaves, g)}


class _AutogradLinearization:
    """The numpy implementation, through the backend's ``vjp`` (autograd)."""

    def __init__(self, fn: Callable[[Any], Any], x: Any):
        self.z, self._pull = B.vjp(fn, x)
        self._push = None

    def jvp(self, v):
        if self._push is None:  # J v is the vjp of the linear map u -> J^T u
            _, self._push = B.vjp(self._pull, B.zeros(np.shape(self.z), like=self.z))
        return self._push(v)

    def jvp_many(self, vs):
        return B.stack([self.jvp(v) for v in vs]) if len(vs) else B.zeros((0,) + tuple(np.shape(self.z)), like=self.z)

    def vjp(self, u):
        return self._pull(u)


class Linearization:
    r"""A map :math:`f` linearised at a point :math:`x`: outputs, :math:`Jv` and :math:`J^Tu`.

    Parameters
    ----------
    fn : callable
        :math:`f`.  A function of a numpy array (written with :mod:`infogeo.backend`
        operations), of a torch tensor, or of a ``{name: tensor}`` dict (a network's
        parameters); it returns an array/tensor :math:`z`.
    x : array, tensor or dict of tensors
        The point.  It is never modified.
    mode : {"reverse", "forward"}
        How a torch map's :math:`Jv` is taken.  ``"reverse"`` (default) records the
        forward graph and the graph of :math:`u \mapsto J^Tu` once, in the constructor;
        every product is then a reverse pass on them — the route for many products at
        one point (a conjugate-gradient solve).  ``"forward"`` records nothing: each
        :math:`Jv` is one forward-mode pass (dual numbers) that also yields the outputs —
        the route for a few products and no :math:`J^Tu` (the optimizer's quadratic
        model); a :meth:`vjp` records the graph on first use.  Maps through a custom
        ``torch.autograd.Function`` or an operation without double backward take the
        forward route in either mode.  numpy maps always use the double vjp.

    Attributes
    ----------
    outputs : array or tensor
        :math:`z = f(x)`, detached from the recorded graph.

    Notes
    -----
    In ``"reverse"`` mode the forward pass runs once, in the constructor; :meth:`jvp`
    and :meth:`vjp` reuse its graph (see the module docstring), so keep the object
    while you take several products at one point and drop it to release the activations.
    For a network, :meth:`infogeo.nn.space.ParameterSpace.linearize` builds it with
    the copies of the BatchNorm running statistics that keep the model untouched.
    """

    def __init__(self, fn: Callable[[Any], Any], x: Any, mode: str = "reverse"):
        if mode not in ("reverse", "forward"):
            raise ValueError(f"mode must be 'reverse' or 'forward', got {mode!r}")
        self.fn, self.x, self.mode = fn, x, mode
        self._wrapped = False
        if _dispatch.namespace_of(x) == "torch":
            if not isinstance(x, dict):  # a single tensor: one leaf
                self._wrapped = True
                x, fn = {"x": x}, (lambda d, f=fn: f(d["x"]))
            self._impl = _TorchLinearization(fn, x, forward=mode == "forward")
        else:
            self._impl = _AutogradLinearization(fn, x)

    @property
    def outputs(self) -> Any:
        """:math:`z = f(x)` (detached)."""
        z = self._impl.z
        return z.detach() if _dispatch.is_torch(z) else z

    @property
    def forward_mode(self) -> bool:
        """Whether :math:`Jv` is taken by forward mode (``torch.func.jvp``) instead of the double vjp."""
        return isinstance(self._impl, _TorchLinearization) and self._impl.forward

    def jvp(self, v: Any) -> Any:
        r""":math:`J v`, shaped like the outputs; ``v`` is shaped like the point (array or dict)."""
        return self.jvp_many([v])[0]

    def jvp_many(self, vs: Sequence[Any]) -> Any:
        r""":math:`[Jv_1, \dots, Jv_m]`, stacked along a new first axis (shape ``(m, *outputs.shape)``)."""
        if self._wrapped:
            vs = [{"x": v} for v in vs]
        return self._impl.jvp_many(list(vs))

    def vjp(self, u: Any) -> Any:
        r""":math:`J^T u`, shaped like the point; ``u`` is shaped like the outputs."""
        out = self._impl.vjp(u)
        return out["x"] if self._wrapped else out

    def __repr__(self) -> str:
        return f"Linearization({getattr(self.fn, '__name__', type(self.fn).__name__)}, outputs {_tree.tree_shape(self.outputs)})"


class LinearizationCache:
    """Keep the last :class:`Linearization` while its point is unchanged.

    ``get(fn, x, key)`` returns the cached linearisation when ``key`` identifies the
    same state as last time, otherwise builds a new one (after releasing the old
    graph).  ``key`` defaults to the point itself: torch tensors are compared by
    identity and version counter (so an in-place update invalidates the entry),
    numpy arrays by identity and value.
    """

    def __init__(self) -> None:
        self._entry: Optional[Tuple[Any, Linearization]] = None
        self.enabled = True

    @staticmethod
    def _state(key: Any) -> Any:
        leaves = list(key.values()) if isinstance(key, dict) else list(key) if isinstance(key, (list, tuple)) \
            else [key]
        if all(_dispatch.is_torch(t) for t in leaves):
            return ("torch", (leaves, versions(leaves)))
        return ("array", (leaves, [np.array(B.to_numpy(t), copy=True) for t in leaves]))

    @staticmethod
    def _same(a: Any, b: Any) -> bool:
        if a[0] != b[0]:
            return False
        if a[0] == "torch":
            return same_state(a[1], b[1])
        (la, va), (lb, vb) = a[1], b[1]
        return len(la) == len(lb) and all(x is y for x, y in zip(la, lb)) and \
            all(np.array_equal(p, q) for p, q in zip(va, vb))

    def get(self, fn: Callable[[Any], Any], x: Any, key: Any = None,
            build: Optional[Callable[[], Linearization]] = None) -> Linearization:
        """The linearisation of ``fn`` at ``x`` (``build()`` makes it when given)."""
        state = self._state(x if key is None else key)
        if self._entry is not None and self._same(self._entry[0], state):
            return self._entry[1]
        self._entry = None  # release the previous point's graph before the new forward pass
        lin = build() if build is not None else Linearization(fn, x)
        if self.enabled:
            self._entry = (state, lin)
        return lin

    def clear(self) -> None:
        """Drop the cached linearisation (and the activations it holds)."""
        self._entry = None
