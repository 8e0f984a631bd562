r"""Validation of points and tangent components at the public boundary.

Points are arrays of coordinates of shape ``(..., dim)``: one point, or a batch
over the leading axes.  Every public operation that takes points runs them
through :func:`as_coordinates` once, vectorised over the batch:

* the dtype: integers are promoted to float64; booleans, complex numbers and
  non-numeric objects are refused with a :class:`TypeError`;
* the shape: the last axis must have the manifold's dimension;
* finiteness: NaN and inf are refused with a :class:`ValueError`.

Torch tensors stay tensors (``requires_grad`` and device kept) and autograd's
traced values pass through untouched, so validation never cuts a gradient.

**Which manifold a point belongs to.**  The coordinates of two families can
have the same shape (a univariate Gaussian :math:`(\mu, \sigma^2)` and the
first two probabilities of a categorical distribution on three classes), so
shape and domain checks cannot tell them apart.  ``point(...)`` and every
operation that returns points records, for the returned array object, the
manifold and chart it belongs to (:func:`mark`); :func:`origin` reads it back
and the receiving manifold refuses a point recorded for another one.  Plain
arrays carry no record and are read as points of the manifold whose method
is called.  The record is keyed by the array object's identity, held through
a weak reference (it disappears with the array), and does not change any
result: it only turns a silent mix-up into an error.
"""
from __future__ import annotations

import math
import numbers
import weakref
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from .. import backend as B
from ..backend import _dispatch

__all__ = ["numpy_view", "plain", "contiguous", "positive_int", "coordinates", "as_coordinates", "all_finite", "mark", "origin", "raw_value", "batch_shape", "per_point"]


def raw_value(x: Any) -> Any:
    """The plain array under autograd's traced boxes (``x`` itself otherwise)."""
    while hasattr(x, "_value"):
        x = x._value
    return x


def tensor_number(value: Any, label: str) -> Any:
    """The value of a one-element real torch tensor as a Python number (anything else as it is); a tensor on the
    ``meta`` device, which holds no value, is a ``TypeError`` naming ``label``."""
    if _dispatch.is_torch(value) and value.numel() == 1 and not value.is_complex():
        if value.device.type == "meta":
            raise TypeError(f"{label} must be a real number, got a tensor on the meta device (it holds no value)")
        return value.item()
    return value


def check_real(label: str, value: Any, *, positive: bool = False) -> float:
    """``value`` as a finite float ``>= 0`` (``> 0`` with ``positive``), or a clear error naming ``label``.

    Infinity is refused too: an infinite damping makes every gradient zero (a "converged" run at a
    non-stationary point), an infinite tolerance stops at once, an infinite step destroys the point.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{label} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{label} must be finite and {'> 0' if positive else '>= 0'}, got {value!r}")
    return value


def check_times(t: Any, label: str = "the geodesic's time t") -> Any:
    """``t`` unchanged when it is a finite real number or array of them, else a clear error naming ``label``.

    The geodesic paths read ``t`` with ``np.asarray(t, dtype=float)``: a string raised numpy's "could not
    convert string to float", a complex number lost its imaginary part or raised float()'s message, NaN
    or None gave a NaN point.
    """
    try:
        a = t.detach().cpu().numpy() if _dispatch.is_torch(t) else np.asarray(t)
    except (ValueError, TypeError):   # a ragged list
        a = np.asarray(None)
    if a.dtype.kind not in "iuf":
        raise TypeError(f"{label} must be a real number or an array of real numbers, got {type(t).__name__} {t!r}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{label} must be finite, got {t!r}")
    return t


def check_flag(label: str, value: Any, *, none: bool = False) -> Any:
    """``value`` as a bool (numpy's included; ``None`` too with ``none=True``): a string or a number is refused
    rather than read as truth."""
    if none and value is None:
        return None
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{label} must be True or False{' or None' if none else ''}, got {type(value).__name__} "
                        f"{value!r}")
    return bool(value)


def check_count(label: str, value: Any) -> int:
    """``value`` as an ``int >= 0`` (an integral float is accepted), or a clear error naming ``label``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{label} must be a non-negative integer, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or int(value) != value or value < 0:
        raise ValueError(f"{label} must be a non-negative integer, got {value!r}")
    return int(value)


def positive_int(value: Any, what: str, minimum: int = 1, maximum: Optional[int] = None) -> int:
    """``value`` as an int in ``[minimum, maximum]`` (a whole float and a one-element real tensor count), or a clear
    error naming ``what``.

    Raises
    ------
    TypeError
        For a boolean, a non-number (a complex one too) or a tensor on the meta device.
    ValueError
        For NaN, inf, a fraction or a number out of range.
    """
    given, value = value, tensor_number(value, what)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be an integer, got {type(given).__name__} {given!r}")
    # as a Python number: an int compared exactly (float() of 10**400 overflows), numpy's scalars not cast to
    # their own narrow type by the comparison (a float16 against 2**62)
    x = int(value) if isinstance(value, numbers.Integral) else float(value)
    if not (isinstance(x, int) or (math.isfinite(x) and x.is_integer())) or x < minimum \
            or (maximum is not None and x > maximum):
        want = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{what} must be an integer {want}, got {given!r}")
    return int(x)


def random_generator(rng: Any, label: str = "rng") -> np.random.Generator:
    """``rng`` as a numpy ``Generator``, or a clear error naming ``label``.

    Parameters
    ----------
    rng : None, int, numpy Generator, RandomState, BitGenerator or SeedSequence
        ``None``: fresh entropy; an integer ``>= 0``: a seed; a numpy random object: drawn from (a
        ``RandomState``'s bit generator is shared, so its state advances).
    label : str
        The argument's name, for the messages.

    Raises
    ------
    TypeError
        For anything else: numpy read a boolean as a seed, and said "SeedSequence expects int or sequence
        of ints" for a float, naming no argument.
    ValueError
        For a negative seed.
    """
    if rng is None or isinstance(rng, (np.random.Generator, np.random.RandomState, np.random.BitGenerator,
                                       np.random.SeedSequence)):
        return np.random.default_rng(rng)
    if isinstance(rng, (bool, np.bool_)) or not isinstance(rng, numbers.Integral):
        raise TypeError(f"{label} must be None, an integer seed or a numpy Generator (or RandomState), got "
                        f"{type(rng).__name__} {rng!r}")
    if rng < 0:
        raise ValueError(f"{label} must be an integer seed >= 0, got {rng!r}")
    return np.random.default_rng(int(rng))


def numpy_view(x: Any) -> np.ndarray:
    """The values of ``x`` as a numpy array without copying when possible (for checks, never for results)."""
    if _dispatch.is_torch(x):
        return x.detach().cpu().numpy()
    x = raw_value(x)
    return x if isinstance(x, np.ndarray) else np.asarray(x, dtype=float)


def contiguous(x: Any) -> Any:
    """A strided numpy batch (e.g. the slice ``p[:, :-1]``) as one C-contiguous copy, anything else as is.

    Every reduction and ufunc over a strided array runs several times slower than over a
    contiguous one, so one copy at the boundary pays for itself in the checks and the formula
    that follow; the caller's array is never modified.
    """
    if type(x) is np.ndarray and x.ndim > 1 and not x.flags.c_contiguous:
        return np.ascontiguousarray(x)
    return x


def coordinates(x: Any, dim: int, what: str = "point", owner: str = "") -> Any:
    """:func:`as_coordinates` of :func:`contiguous` ``x``, with one test for the common case.

    A C-contiguous float numpy array of shape ``(..., dim)`` costs one reduction
    (its finiteness) and no further dispatch; anything else takes the general path.
    """
    if (type(x) is np.ndarray and x.dtype is _FLOAT64 and x.ndim and x.shape[-1] == dim and x.flags.c_contiguous
            and math.isfinite(_add_reduce(x, None))):
        return x
    return as_coordinates(contiguous(x), dim, what, owner)


_FLOAT64 = np.dtype(np.float64)
_add_reduce = np.add.reduce


def _dtype_kind(x: Any) -> str:
    """numpy dtype kind letter of an array of either backend ('f', 'i', 'b', 'c', 'O' ...)."""
    if _dispatch.is_torch(x):
        import torch
        if x.dtype == torch.bool:
            return "b"
        if x.is_complex():
            return "c"
        return "f" if x.is_floating_point() else "i"
    return np.asarray(raw_value(x)).dtype.kind


def as_coordinates(x: Any, dim: Optional[int], what: str = "point", owner: str = "") -> Any:
    """``x`` as a float array of shape ``(..., dim)`` with finite entries, or a clear error.

    Parameters
    ----------
    x : array_like, torch.Tensor or autograd box
        Coordinates; nested lists and Python scalars are converted to numpy.
    dim : int or None
        Required size of the last axis (``None``: any).
    what : str
        What ``x`` is, for the messages ("point", "tangent vector" ...).
    owner : str
        The manifold's name, for the messages.

    Returns
    -------
    The same array when it already was a float array of either backend (never
    copied), else a float64 copy; half precision is upcast to float32.
    """
    if type(x) is np.ndarray and x.dtype.kind == "f" and x.dtype.itemsize >= 4 and dim is not None \
            and x.shape[-1:] == (dim,):
        # the common case (a float numpy batch of the right shape): one reduction, no dispatch
        if _finite_numpy(x):
            return x
    where = f" of {owner}" if owner else ""
    if _dispatch.is_torch(x) or hasattr(x, "_value"):
        kind = _dtype_kind(x)
        if kind in "iu" and _dispatch.is_torch(x):
            import torch
            x = x.to(torch.float64)
            kind = "f"
    else:
        if isinstance(x, (str, bytes)) or x is None:
            raise TypeError(f"a {what}{where} must be a numeric array, got {type(x).__name__} {x!r}")
        if isinstance(x, (bool, np.bool_)):
            raise TypeError(f"a {what}{where} must have real (float) coordinates, got a boolean")
        if isinstance(x, np.ndarray) and x.dtype.kind == "f":
            kind = "f"
        else:
            try:
                arr = np.asarray(x)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"a {what}{where} must be a numeric array, got {type(x).__name__}") from exc
            kind = arr.dtype.kind
            if kind in "iuf":
                x = arr.astype(np.float64)
                kind = "f"
    if kind == "b":
        raise TypeError(f"a {what}{where} must have real (float) coordinates, got a boolean array")
    if kind == "c":
        raise TypeError(f"a {what}{where} must have real coordinates, got complex numbers")
    if kind != "f":
        raise TypeError(f"a {what}{where} must be a numeric array of floats, got dtype kind {kind!r}")
    shape = tuple(getattr(x, "shape", ()))
    if dim is not None and shape[-1:] != (dim,):
        raise ValueError(f"a {what}{where} must have shape ({dim},) (or (..., {dim}) for a batch), "
                         f"got shape {shape}")
    if not all_finite(x):
        raise ValueError(f"the {what}{where} contains NaN or inf")
    return _upcast_half(x)


def _upcast_half(x: Any) -> Any:
    """Half precision (float16, bfloat16) as float32: the linear algebra has no half-precision kernels."""
    if _dispatch.is_torch(x):
        import torch
        return x.to(torch.float32) if x.dtype in (torch.float16, torch.bfloat16) else x
    a = raw_value(x)
    if getattr(a, "dtype", None) == np.float16:
        return x.astype(np.float32) if a is x else x * np.float32(1.0)
    return x


def all_finite(x: Any) -> bool:
    """Whether every entry of ``x`` is finite (one reduction in the common case)."""
    if _dispatch.is_torch(x):
        import torch
        return bool(torch.isfinite(x.detach()).all())
    a = raw_value(x)
    if not isinstance(a, np.ndarray):
        a = np.asarray(a, dtype=float)
    return _finite_numpy(a)


def finite_result(value: Any, what: str, point: Any) -> Any:
    """``value``, or a ValueError naming ``point`` when ``value`` has a NaN or inf entry.

    For quantities of valid but extreme points (a standard deviation of 1e-300, a mean of 1e300) that
    overflow floating point: an error, never a silent NaN or inf.
    """
    if not all_finite(value):
        shown = np.array2string(np.asarray(B.to_numpy(raw_value(point))), precision=3, threshold=8)
        raise ValueError(f"{what} at the point {shown} is not representable in floating point (its entries "
                         "overflow to inf or NaN): the point is too extreme for this computation")
    return value


def metric_result(G: Any, what: str, point: Any) -> Any:
    """A metric matrix ``G`` (shape ``(..., n, n)``), or a ValueError naming ``point`` when it has a NaN or inf entry
    (:func:`finite_result`) or a diagonal entry below the dtype's smallest normal number.

    A positive definite matrix has a positive diagonal; an entry that underflowed to 0 (a variance of 1e200, whose
    Fisher entry :math:`1/(2\sigma^4)` is 5e-401) or to a subnormal (a few significant bits) would give zero or
    wrong lengths with no sign.
    """
    finite_result(G, what, point)
    d = np.diagonal(numpy_view(G), axis1=-2, axis2=-1)
    if d.size and not (d >= np.finfo(d.dtype if d.dtype.kind == "f" else float).tiny).all():
        shown = np.array2string(np.asarray(B.to_numpy(raw_value(point))), precision=3, threshold=8)
        raise ValueError(f"{what} at the point {shown} is not representable in floating point (a diagonal entry is "
                         f"{float(d.min()):.3g}, below the smallest normal number: it underflowed, the point is too "
                         "extreme for this computation, or the family is not minimal there)")
    return G


def _finite_numpy(a: np.ndarray) -> bool:
    """Whether every entry of the numpy array ``a`` is finite.

    One sum propagates any NaN or inf; an overflow of finite entries to inf is rare and
    rechecked entrywise.  (Not a BLAS dot product: on long arrays it may start threads,
    whose wake-up costs milliseconds on a loaded machine.)
    """
    if a.dtype.kind == "f" and math.isfinite(np.add.reduce(a, axis=None)):
        return True
    return bool(np.isfinite(a).all())


def same_backend(*arrays: Any) -> tuple:
    """The arrays, numpy ones turned into tensors (dtype and device of the first tensor) when any is a tensor."""
    for ref in arrays:
        if _dispatch.is_torch(ref):
            break
    else:
        return arrays
    import torch
    return tuple(a if _dispatch.is_torch(a) else torch.as_tensor(np.asarray(raw_value(a), dtype=float),
                                                                 dtype=ref.dtype, device=ref.device)
                 for a in arrays)


def batch_shape(*arrays: Any, dims: Tuple[int, ...]) -> Tuple[int, ...]:
    """The broadcast leading shape of ``arrays`` (each with ``dims[i]`` trailing core axes), or ValueError."""
    shapes = [tuple(getattr(a, "shape", ()))[:len(getattr(a, "shape", ())) - k] for a, k in zip(arrays, dims)]
    if all(sh == shapes[0] for sh in shapes):
        return shapes[0]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"batch shapes {shapes} do not broadcast against each other") from None


# ------------------------------------------------------------- provenance
_ORIGIN: Dict[int, Tuple[Any, str]] = {}


def _forget(key: int, ref: Any) -> None:
    entry = _ORIGIN.get(key)
    if entry is not None and entry[0] is ref:
        del _ORIGIN[key]


def mark(x: Any, manifold_key: str) -> Any:
    """Record that the array object ``x`` is a point of the manifold ``manifold_key``; returns ``x``."""
    if isinstance(x, numbers.Number) or hasattr(x, "_value"):
        return x
    key = id(x)
    try:
        ref = weakref.ref(x, lambda r, key=key: _forget(key, r))
    except TypeError:  # objects without weak references are simply not recorded
        return x
    _ORIGIN[key] = (ref, manifold_key)
    return x


def copy_array(x: Any) -> Any:
    """A new array with the coordinates of the numpy array or tensor ``x`` (a tensor is cloned, so
    gradients still flow to ``x``), and the manifold recorded for ``x`` by :func:`mark`; anything
    else (a number, an autograd box) as it is."""
    if _dispatch.is_torch(x):
        y = x.clone()
    elif isinstance(x, np.ndarray):
        y = x.copy()
    else:
        return x
    key = origin(x)
    return y if key is None else mark(y, key)


def unaliased(y: Any, given: Any) -> Any:
    """``y``, copied where it shares memory with the caller's array ``given`` (an identity chart map, a
    slice): a public result never aliases its input, so writing to it cannot change the caller's point."""
    if isinstance(y, np.ndarray) and isinstance(given, np.ndarray):
        shared = np.may_share_memory(y, given)
    elif _dispatch.is_torch(y) and _dispatch.is_torch(given):
        shared = y.untyped_storage().data_ptr() == given.untyped_storage().data_ptr()
    else:
        return y
    return copy_array(y) if shared else y


def own_copy(x: Any, given: Any) -> Any:
    """``x``, or a copy of it where it is the caller's object ``given`` itself, which the caller could
    modify later: what a public function returns never aliases its input."""
    return copy_array(x) if x is given else x


def plain(x: Any) -> Any:
    """The same coordinates as a new array object with no record: read them as plain numbers.

    For a family built on another one (a multinomial on the categorical
    family) that hands its own points to the other family's functions.
    """
    if _dispatch.is_torch(x):
        return x.view_as(x)
    return x.view() if isinstance(x, np.ndarray) else x


def origin(x: Any) -> Optional[str]:
    """The manifold key recorded for the array object ``x`` by :func:`mark`, or ``None``."""
    entry = _ORIGIN.get(id(x))
    if entry is None or entry[0]() is not x:
        return None
    return entry[1]


def per_point(fn: Callable, *arrays: Any, vectorized: bool = False, empty: Optional[tuple] = None):
    """``fn`` on points of shape ``(dim,)``, looped over the broadcast leading axes of ``arrays``.

    With ``vectorized=True`` (or single points) ``fn`` is called once on the whole arrays.  ``empty``:
    the shape of one result, which an empty batch (no call to read it from) gives zeros of; without it
    an empty batch is a ValueError.
    """
    if vectorized or all(len(a.shape) == 1 for a in arrays):
        return fn(*arrays)
    lead = batch_shape(*arrays, dims=(1,) * len(arrays))
    arrays = tuple(B.broadcast_to(a, lead + tuple(a.shape[-1:])) for a in arrays)
    outs = [fn(*(a[idx] for a in arrays)) for idx in np.ndindex(*lead)]
    if not outs:
        if empty is None:
            raise ValueError(f"an empty batch of points (batch shape {lead}) has no result here")
        return B.zeros(lead + tuple(empty), like=arrays[0])
    first = outs[0]
    if isinstance(first, (float, int)) or not hasattr(first, "shape"):
        outs = [B.array(o, like=arrays[0]) if B.is_torch(arrays[0]) else np.asarray(o, dtype=float)
                for o in outs]
    return B.reshape(B.stack(outs), lead + tuple(outs[0].shape))
