"""Array namespace and autodiff primitives shared by every backend.

infogeo computes with two backends:

* ``"numpy"`` — numpy arrays, differentiated by :mod:`autograd` (the default);
* ``"torch"`` — :class:`torch.Tensor`, differentiated by :mod:`torch.func`.

The array functions below (``stack``, ``sum``, ``exp`` ...) look at their
arguments: if any is a torch tensor they call torch, otherwise
``autograd.numpy``.  So one cost function such as::

    lambda x: ig.backend.sum(ig.backend.stack([1 - x[0], x[1] - x[0] ** 2]) ** 2)

is differentiable under both backends.  There is no global "active" backend:
the creation functions (:func:`array`, :func:`zeros` ...) return numpy unless
their ``like=`` argument (or the object itself) is a tensor, and
:func:`ops_of` hands out the backend module of a set of arguments so that a
closed form picks its namespace once per call.

The autodiff primitives (:func:`grad`, :func:`jvp`, :func:`vjp`, :func:`hvp`,
:func:`jacobian`) and the linear algebra (:func:`solve`, :func:`cholesky`)
likewise pick the backend from the point they are evaluated at.
"""
from __future__ import annotations

from typing import Any, Callable

from . import _numpy
from ._dispatch import is_torch, namespace_of

__all__ = [
    "namespace_of", "is_torch", "ops_of",
    "array", "asarray", "zeros", "ones", "eye", "to_numpy",
    "stack", "concatenate", "sum", "mean", "exp", "expm1", "log", "log1p", "sqrt", "abs",
    "sin", "cos", "tanh", "arccosh", "arcsinh", "arccos", "arcsin", "arctan2", "sinh", "cosh", "diag_embed", "broadcast_to",
    "gammaln", "digamma", "polygamma", "square", "dot", "matmul", "outer",
    "einsum", "where", "maximum", "minimum", "hypot", "logaddexp", "clip", "logsumexp", "softmax", "log_softmax",
    "sigmoid", "diag", "diagonal", "trace", "transpose", "reshape", "isfinite",
    "grad", "value_and_grad", "jvp", "vjp", "hvp", "jacobian", "hessian",
    "solve", "cholesky", "cho_solve", "inv", "slogdet", "eigh", "svdvals", "norm",
]

def _ops(*args: Any):
    """Backend module for these arguments (torch if any is a tensor)."""
    if namespace_of(*args) == "torch":
        from . import _torch
        return _torch
    return _numpy


def ops_of(*args: Any):
    """The backend module (``_numpy`` or ``_torch``) of these arguments: torch if any is a tensor.

    Closed forms take their namespace once per call (``xp = ops_of(x, y)``)
    and call ``xp.sqrt``, ``xp.arccosh`` ... on whole batches.
    """
    return _ops(*args)


# ----------------------------------------------------------------- creation
def array(obj: Any, dtype: Any = None, like: Any = None):
    """Array of ``like``'s backend (numpy unless ``like`` or ``obj`` is a tensor), float64 by default."""
    ops = _ops(like) if like is not None else _ops(obj)
    return ops.array(obj, dtype=dtype, like=like)


asarray = array


def zeros(shape, like: Any = None):
    return _ops(like).zeros(shape, like=like)


def ones(shape, like: Any = None):
    return _ops(like).ones(shape, like=like)


def eye(n: int, like: Any = None):
    return _ops(like).eye(n, like=like)


def to_numpy(x: Any):
    """Plain numpy copy of an array of either backend (detached from any graph)."""
    return _ops(x).to_numpy(x)


# ------------------------------------------------------------- elementwise
def _seq_ops(seq):
    return _ops(*seq)


def stack(arrays, axis: int = 0):
    return _seq_ops(arrays).stack(list(arrays), axis=axis)


def concatenate(arrays, axis: int = 0):
    return _seq_ops(arrays).concatenate(list(arrays), axis=axis)


def _unary(name: str) -> Callable:
    def f(x, *args, **kwargs):
        return getattr(_ops(x), name)(x, *args, **kwargs)
    f.__name__ = name
    f.__doc__ = f"Elementwise/array ``{name}`` of the argument's backend."
    return f


sum = _unary("sum")  # noqa: A001  (numpy-style name on purpose)
mean = _unary("mean")
exp = _unary("exp")
log = _unary("log")
log1p = _unary("log1p")
expm1 = _unary("expm1")
sqrt = _unary("sqrt")
abs = _unary("abs")  # noqa: A001
sin = _unary("sin")
cos = _unary("cos")
tanh = _unary("tanh")
arccosh = _unary("arccosh")
arcsinh = _unary("arcsinh")
arccos = _unary("arccos")
arcsin = _unary("arcsin")
sinh = _unary("sinh")
cosh = _unary("cosh")
diag_embed = _unary("diag_embed")
broadcast_to = _unary("broadcast_to")
gammaln = _unary("gammaln")
digamma = _unary("digamma")


def polygamma(n: int, x):
    r"""Polygamma :math:`\psi^{(n)}(x)` of the argument's backend (trigamma for ``n = 1``)."""
    return _ops(x).polygamma(n, x)
square = _unary("square")
logsumexp = _unary("logsumexp")
softmax = _unary("softmax")
log_softmax = _unary("log_softmax")
sigmoid = _unary("sigmoid")
diag = _unary("diag")
diagonal = _unary("diagonal")
trace = _unary("trace")
transpose = _unary("transpose")
reshape = _unary("reshape")
isfinite = _unary("isfinite")
clip = _unary("clip")
norm = _unary("norm")


def _binary(name: str) -> Callable:
    def f(a, b, *args, **kwargs):
        return getattr(_ops(a, b), name)(a, b, *args, **kwargs)
    f.__name__ = name
    f.__doc__ = f"``{name}`` of the arguments' backend."
    return f


dot = _binary("dot")
matmul = _binary("matmul")
outer = _binary("outer")
maximum = _binary("maximum")
arctan2 = _binary("arctan2")
hypot = _binary("hypot")
logaddexp = _binary("logaddexp")
minimum = _binary("minimum")


def einsum(subscripts: str, *operands):
    return _ops(*operands).einsum(subscripts, *operands)


def where(cond, a, b):
    return _ops(cond, a, b).where(cond, a, b)


# ---------------------------------------------------------------- autodiff
def grad(f: Callable, x):
    """Gradient of scalar ``f`` at ``x`` (same shape as ``x``)."""
    return _ops(x).grad(f, x)


def value_and_grad(f: Callable, x):
    """``(f(x), grad f(x))`` with one forward and one backward pass."""
    return _ops(x).value_and_grad(f, x)


def jvp(f: Callable, x, v):
    """``(f(x), J_f(x) v)``: push the tangent ``v`` forward through ``f``."""
    return _ops(x, v).jvp(f, x, v)


def vjp(f: Callable, x):
    """``(f(x), pull)`` where ``pull(u) = J_f(x)^T u`` pulls an output covector back."""
    return _ops(x).vjp(f, x)


def hvp(f: Callable, x, v):
    """Hessian-vector product ``∇²f(x) v`` of a scalar function."""
    return _ops(x, v).hvp(f, x, v)


def jacobian(f: Callable, x):
    """Dense Jacobian, shape ``f(x).shape + x.shape``."""
    return _ops(x).jacobian(f, x)


def hessian(f: Callable, x):
    """Dense Hessian of a scalar function of a vector."""
    return _ops(x).hessian(f, x)


# ----------------------------------------------------------- linear algebra
def solve(A, b):
    """Solve ``A x = b``."""
    return _ops(A, b).solve(A, b)


def cholesky(A):
    """Lower Cholesky factor; raises ``numpy.linalg.LinAlgError`` if ``A`` is not positive definite."""
    return _ops(A).cholesky(A)


def cho_solve(L, b):
    """Solve ``L L^T x = b`` given the lower Cholesky factor ``L``."""
    return _ops(L, b).cho_solve(L, b)


def inv(A):
    return _ops(A).inv(A)


def slogdet(A):
    return _ops(A).slogdet(A)


def eigh(A):
    return _ops(A).eigh(A)


def svdvals(A):
    """Singular values over the last two axes, descending (differentiable where they are distinct)."""
    return _ops(A).svdvals(A)
