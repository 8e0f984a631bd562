"""torch backend, differentiated by torch.func (works on any device)."""
from __future__ import annotations

import numpy as np

try:
    import torch
    from torch import func as tfunc
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError("the torch backend needs torch: pip install 'infogeo[torch]'") from exc

name = "torch"
LinAlgError = torch.linalg.LinAlgError


def _ref(like):
    if isinstance(like, torch.Tensor):
        return like.dtype if like.is_floating_point() else torch.float64, like.device
    return torch.float64, None


def array(obj, dtype=None, like=None):
    ref_dtype, device = _ref(like)
    if isinstance(obj, (list, tuple)) and any(isinstance(o, torch.Tensor) for o in obj):
        return torch.stack([o if isinstance(o, torch.Tensor) else torch.as_tensor(o, dtype=ref_dtype) for o in obj])
    if isinstance(obj, torch.Tensor):
        return obj.to(dtype=dtype or obj.dtype, device=device or obj.device)
    return torch.as_tensor(np.asarray(obj, dtype=np.float64), dtype=dtype or ref_dtype, device=device)


def zeros(shape, like=None):
    dtype, device = _ref(like)
    return torch.zeros(shape, dtype=dtype, device=device)


def ones(shape, like=None):
    dtype, device = _ref(like)
    return torch.ones(shape, dtype=dtype, device=device)


def eye(n, like=None):
    dtype, device = _ref(like)
    return torch.eye(n, dtype=dtype, device=device)


def to_numpy(x):
    return x.detach().cpu().numpy().astype(float) if isinstance(x, torch.Tensor) else np.asarray(x, dtype=float)


def _t(x, like=None):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, dict):  # {name: tensor} components (network parameter spaces)
        return {k: _t(v, like.get(k) if isinstance(like, dict) else like) for k, v in x.items()}
    dtype, device = _ref(like)
    return torch.as_tensor(x, dtype=dtype, device=device)


def stack(arrays, axis=0):
    like = next(a for a in arrays if isinstance(a, torch.Tensor))
    return torch.stack([_t(a, like) for a in arrays], dim=axis)


def concatenate(arrays, axis=0):
    like = next(a for a in arrays if isinstance(a, torch.Tensor))
    return torch.cat([_t(a, like) for a in arrays], dim=axis)


def sum(x, axis=None, keepdims=False):  # noqa: A001
    return torch.sum(x) if axis is None else torch.sum(x, dim=axis, keepdim=keepdims)


def mean(x, axis=None, keepdims=False):
    return torch.mean(x) if axis is None else torch.mean(x, dim=axis, keepdim=keepdims)


exp, log, log1p, sqrt, abs = torch.exp, torch.log, torch.log1p, torch.sqrt, torch.abs  # noqa: A001
expm1 = torch.expm1
sin, cos, tanh, arccosh, square = torch.sin, torch.cos, torch.tanh, torch.arccosh, torch.square
sigmoid, isfinite = torch.sigmoid, torch.isfinite
arcsinh, arccos, arcsin, sinh, cosh = torch.arcsinh, torch.arccos, torch.arcsin, torch.sinh, torch.cosh


def arctan2(a, b):
    return torch.atan2(_t(a, b), _t(b, a))


def hypot(a, b):
    return torch.hypot(_t(a, b), _t(b, a))


def logaddexp(a, b):
    return torch.logaddexp(_t(a, b), _t(b, a))


def broadcast_to(x, shape):
    return x.expand(*shape)


def gammaln(x):
    return torch.lgamma(x)


def digamma(x):
    return torch.digamma(x)


def polygamma(n, x):
    return torch.polygamma(int(n), x)


def diag_embed(x):
    """Diagonal matrices from the last axis: shape ``(..., n)`` -> ``(..., n, n)``."""
    return torch.diag_embed(x)
trace = torch.trace


def diag(x):
    return torch.diag(x)


def diagonal(x, offset=0, axis1=-2, axis2=-1):
    return torch.diagonal(x, offset=offset, dim1=axis1, dim2=axis2)


def transpose(x, axes=None):
    return x.T if axes is None else x.permute(*axes)


def reshape(x, shape):
    return torch.reshape(x, shape)


def clip(x, lo, hi):
    return torch.clamp(x, lo, hi)


def norm(x, axis=None):
    return torch.sqrt(sum(x * x, axis=axis))


def dot(a, b):
    a, b = _t(a, b), _t(b, a)
    return torch.matmul(a, b)


def matmul(a, b):
    return torch.matmul(_t(a, b), _t(b, a))


def outer(a, b):
    return torch.outer(_t(a, b), _t(b, a))


def maximum(a, b):
    return torch.maximum(_t(a, b), _t(b, a))


def minimum(a, b):
    return torch.minimum(_t(a, b), _t(b, a))


def einsum(subscripts, *operands):
    like = next(o for o in operands if isinstance(o, torch.Tensor))
    return torch.einsum(subscripts, *[_t(o, like) for o in operands])


def where(cond, a, b):
    like = next(o for o in (cond, a, b) if isinstance(o, torch.Tensor))
    return torch.where(_t(cond, like).bool() if not isinstance(cond, torch.Tensor) else cond, _t(a, like), _t(b, like))


def logsumexp(x, axis=None, keepdims=False):
    if axis is None:
        return torch.logsumexp(x.reshape(-1), dim=0)
    return torch.logsumexp(x, dim=axis, keepdim=keepdims)


def softmax(x, axis=-1):
    return torch.softmax(x, dim=axis)


def log_softmax(x, axis=-1):
    return torch.log_softmax(x, dim=axis)


# autodiff ---------------------------------------------------------------
def grad(f, x):
    return tfunc.grad(f)(x)


def value_and_grad(f, x):
    g, v = tfunc.grad_and_value(f)(x)
    return v, g


def jvp(f, x, v):
    return tfunc.jvp(f, (x,), (_t(v, x),))


def vjp(f, x):
    out, pull = tfunc.vjp(f, x)
    return out, (lambda u: pull(_t(u, out))[0])


def hvp(f, x, v):
    # forward-over-reverse: one extra forward pass, no dense Hessian
    return tfunc.jvp(tfunc.grad(f), (x,), (_t(v, x),))[1]


def jacobian(f, x):
    return tfunc.jacrev(f)(x)


def hessian(f, x):
    return tfunc.hessian(f)(x)


# linear algebra ---------------------------------------------------------
def solve(A, b):
    return torch.linalg.solve(A, _t(b, A))


def cholesky(A):
    return torch.linalg.cholesky(A)


def inv(A):
    return torch.linalg.inv(A)


def eigh(A):
    return torch.linalg.eigh(A)


def slogdet(A):
    return torch.linalg.slogdet(A)


def svdvals(A):
    return torch.linalg.svdvals(A)


def cho_solve(L, b):
    b = _t(b, L)
    if b.dim() == L.dim() - 1:
        return torch.cholesky_solve(b.unsqueeze(-1), L).squeeze(-1)
    return torch.cholesky_solve(b, L)
