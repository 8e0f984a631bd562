"""numpy backend, differentiated by autograd."""
from __future__ import annotations

import autograd
import autograd.numpy as anp
import numpy as np
from autograd import make_vjp
from autograd.extend import vspace

name = "numpy"
LinAlgError = np.linalg.LinAlgError


def array(obj, dtype=None, like=None):
    if hasattr(obj, "_value") or (isinstance(obj, (list, tuple)) and any(hasattr(o, "_value") for o in obj)):
        return anp.array(obj)  # keep autograd boxes traced
    return np.array(obj, dtype=dtype if dtype is not None else np.float64)


def zeros(shape, like=None):
    return np.zeros(shape)


def ones(shape, like=None):
    return np.ones(shape)


def eye(n, like=None):
    return np.eye(n)


def to_numpy(x):
    while hasattr(x, "_value"):  # autograd ArrayBox
        x = x._value
    return np.array(x, dtype=float)


stack = anp.stack
concatenate = anp.concatenate
sum = anp.sum  # noqa: A001
mean = anp.mean
exp = anp.exp
log = anp.log
log1p = anp.log1p
expm1 = anp.expm1
hypot = anp.hypot
logaddexp = anp.logaddexp
sqrt = anp.sqrt
abs = anp.abs  # noqa: A001
sin = anp.sin
cos = anp.cos
tanh = anp.tanh
arccosh = anp.arccosh
arcsinh = anp.arcsinh
arccos = anp.arccos
arcsin = anp.arcsin
arctan2 = anp.arctan2
sinh = anp.sinh
cosh = anp.cosh
square = anp.square
diag = anp.diag
diagonal = anp.diagonal
trace = anp.trace
transpose = anp.transpose
reshape = anp.reshape
isfinite = anp.isfinite
clip = anp.clip
dot = anp.dot
matmul = anp.matmul
outer = anp.outer
maximum = anp.maximum
minimum = anp.minimum
einsum = anp.einsum
where = anp.where
broadcast_to = anp.broadcast_to


def diag_embed(x):
    """Diagonal matrices from the last axis: shape ``(..., n)`` -> ``(..., n, n)``."""
    n = x.shape[-1]
    return x[..., :, None] * np.eye(n)


def norm(x, axis=None):
    return anp.sqrt(anp.sum(x * x, axis=axis))


def gammaln(x):
    from autograd.scipy.special import gammaln as f  # lazy: see logsumexp
    return f(x)


def digamma(x):
    from autograd.scipy.special import digamma as f
    return f(x)


def polygamma(n, x):
    from autograd.scipy.special import polygamma as f
    return f(n, x)


def logsumexp(x, axis=None, keepdims=False):
    # autograd.scipy.special pulls in scipy.integrate and scipy.stats: import it on first use only
    from autograd.scipy.special import logsumexp as lse
    return lse(x, axis=axis, keepdims=keepdims)


def log_softmax(x, axis=-1):
    # shifted by the largest entry, not by logsumexp: at logits of 1e300 the log of the count of tied
    # maxima is absorbed by logsumexp's rounding (two tied outcomes each got probability 1)
    shifted = x - anp.max(x, axis=axis, keepdims=True)
    return shifted - anp.log(anp.sum(anp.exp(shifted), axis=axis, keepdims=True))


def softmax(x, axis=-1):
    return anp.exp(log_softmax(x, axis=axis))


def sigmoid(x):
    return 0.5 * (anp.tanh(0.5 * x) + 1.0)


# autodiff ---------------------------------------------------------------
def grad(f, x):
    return autograd.grad(f)(x)


def value_and_grad(f, x):
    return autograd.value_and_grad(f)(x)


def jvp(f, x, v):
    # The "double vjp" trick: the vjp is linear in its cotangent, so its own vjp
    # is the jvp.  Works for every primitive autograd has a vjp for.
    pull, out = make_vjp(f)(x)
    pull_pull, _ = make_vjp(pull)(vspace(out).zeros())
    return out, pull_pull(v)


def vjp(f, x):
    pull, out = make_vjp(f)(x)
    return out, pull


def hvp(f, x, v):
    return autograd.hessian_vector_product(f)(x, v)


def jacobian(f, x):
    return autograd.jacobian(f)(x)


def hessian(f, x):
    return autograd.hessian(f)(x)


# linear algebra ---------------------------------------------------------
cholesky = anp.linalg.cholesky
inv = anp.linalg.inv
eigh = anp.linalg.eigh


def slogdet(A):
    return anp.linalg.slogdet(A)


def svdvals(A):
    """Singular values, descending, over the last two axes."""
    return anp.linalg.svd(A, compute_uv=False)


def _vectors_solve(A, b):
    # a b with one axis fewer than A is a (batch of) vector(s); numpy >= 2 reads it as matrices otherwise
    if anp.ndim(b) == anp.ndim(A) - 1 and anp.ndim(b) > 1:
        return anp.linalg.solve(A, b[..., None])[..., 0]
    return anp.linalg.solve(A, b)


def solve(A, b):
    return _vectors_solve(A, b)


def cho_solve(L, b):
    y = _vectors_solve(L, b)
    return _vectors_solve(anp.swapaxes(L, -1, -2), y)
