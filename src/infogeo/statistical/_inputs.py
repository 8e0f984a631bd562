"""Validation of the inputs of statistical operations: named parameters and observations."""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import numpy as np

from .. import backend as B
from ..geometry import points as _points
from ..geometry.points import unaliased  # re-exported: the statistical families use it

__all__ = ["numpy_only", "named_coordinates", "split_parameters", "check_samples", "check_event_shape",
           "statistics_of", "unaliased", "observations_of", "check_fits", "finite_velocity"]


def named_coordinates(parameters: Mapping[str, Any], shapes: Mapping[str, tuple]):
    """Concatenate named parameters (each of shape ``batch + shape``) into coordinates ``batch + (dim,)``."""
    arrays, batches = [], []
    for k, shape in shapes.items():
        a = _points.as_coordinates(parameters[k], None, f"parameter {k!r}")
        shape = tuple(shape)
        a_shape = tuple(a.shape)
        if len(a_shape) < len(shape) or (shape and a_shape[len(a_shape) - len(shape):] != shape):
            raise ValueError(f"{k} must have shape {shape} (or a batch of them), got {a_shape}")
        batch = a_shape[:len(a_shape) - len(shape)]
        arrays.append((a, batch))
        batches.append(batch)
    try:
        lead = tuple(np.broadcast_shapes(*batches))
    except ValueError:
        raise ValueError(f"the parameters' batch shapes {batches} do not broadcast") from None
    flat = [B.reshape(B.broadcast_to(B.reshape(a, batch + (-1,)), lead + (int(np.prod(a.shape[len(batch):],
                                                                                        dtype=int)),)),
                      lead + (-1,)) for a, batch in arrays]
    return B.concatenate(flat, axis=-1)


def check_samples(x: Any, owner: str):
    """Observations as a numeric array with at least one finite entry per row, or a clear error."""
    if B.is_torch(x):
        x = B.to_numpy(x)
    try:
        a = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"observations of {owner} must be a numeric array") from exc
    if a.dtype.kind in "bcOSU":
        raise TypeError(f"observations of {owner} must be real numbers, got dtype {a.dtype}")
    if a.size == 0 or (a.ndim > 0 and len(a) == 0):
        raise ValueError(f"no observations given to {owner}: expected at least one")
    a = a.astype(float)
    if not _points.all_finite(a):
        raise ValueError(f"observations of {owner} contain NaN or inf")
    return a


def _memory_bytes() -> int:
    """This machine's physical memory in bytes (a generous 2^40 where the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 2 ** 40


def check_fits(n_values: int, what: str) -> None:
    """ValueError when ``n_values`` float64 numbers (what a size asks for) exceed this machine's memory:
    a clear refusal with the size, instead of a MemoryError or a loop that runs for hours."""
    need, have = 8 * int(n_values), _memory_bytes()
    if need > have:
        raise ValueError(f"{what} needs {int(n_values):.3g} float64 values ({need / 2 ** 30:.3g} GiB), more than "
                         f"this machine's memory ({have / 2 ** 30:.3g} GiB)")


def finite_velocity(v) -> None:
    """ValueError unless the velocity of a geodesic (``t`` times a tangent vector) is finite."""
    if not _points.all_finite(v):
        raise ValueError("the geodesic's velocity (t times the tangent vector) is not finite: expected a finite "
                         "real t and a finite tangent vector")


def observations_of(family: Any, x: Any) -> np.ndarray:
    """The observations ``x`` of ``family`` as a new float array (never the caller's), checked as by
    :func:`check_samples` and :func:`check_event_shape`: what a family's ``sufficient_statistics`` reads."""
    a = check_samples(x, family.name)
    check_event_shape(a, family.event_shape, family.name)
    return a


def split_parameters(s: Any, shapes: Mapping[str, tuple]) -> dict:
    """Named parameters from coordinates ``batch + (dim,)``: floats, or arrays ``batch + shape``."""
    s = np.asarray(s, dtype=float)
    out, i = {}, 0
    for k, shape in shapes.items():
        n = int(np.prod(shape, dtype=int))
        part = s[..., i:i + n].reshape(s.shape[:-1] + tuple(shape))
        out[k] = float(part) if part.shape == () else part.copy()
        i += n
    return out


def check_event_shape(a: np.ndarray, event: Optional[tuple], owner: str) -> None:
    """ValueError unless the observations ``a`` have shape ``(n,) + event`` or are one observation, ``event``.

    A scalar event (``()`` or ``(1,)``) also takes ``(n,)``. ``event=None``: not declared, not checked.
    """
    if event is None:
        return
    event = tuple(event)
    shape = tuple(a.shape)
    scalar = event in ((), (1,))
    if shape[1:] == event or shape == event or (scalar and len(shape) <= 1):
        return
    expected = "(n,)" + (" or (n, 1)" if event == (1,) else "") if scalar else f"(n, {', '.join(map(str, event))})"
    raise ValueError(f"observations of {owner} must have shape {expected} (one observation per row, n >= 1), "
                     f"got shape {shape}")


def statistics_of(family: Any, x: np.ndarray):
    """``(t(x), log h(x))`` of checked observations, one row each; ValueError when they lie outside the support
    or the statistics and the base measure disagree on the number of observations."""
    with np.errstate(all="ignore"):
        t = family.sufficient_statistics(x)
        log_h = family.log_base_measure(x) if family.has_base_measure else np.zeros(len(t))
    if getattr(t, "ndim", 0) != 2 or t.shape[1] != family.dim:
        raise ValueError(f"the sufficient statistics of {family.name} on observations of shape {np.shape(x)} have "
                         f"shape {np.shape(t)}; expected (n, {family.dim}), one row per observation")
    if np.shape(log_h) != (len(t),):
        raise ValueError(f"observations of shape {np.shape(x)}: {family.name} reads {len(t)} of them from the "
                         f"sufficient statistics but {np.shape(log_h)} values from the log base measure; expected "
                         f"one value each (shape ({len(t)},))")
    if not (_points.all_finite(t) and _points.all_finite(log_h)):
        raise ValueError(f"observations outside the support of {family.name} "
                         "(their sufficient statistics or base measure are not finite)")
    return t, log_h


def numpy_only(fn: Any, what: str) -> Any:
    """``fn`` refusing torch tensors with a ``TypeError`` (a computation that runs in numpy only, such as
    Newton's method, must not convert tensors silently and cut their gradients)."""
    def guarded(x):
        if B.is_torch(x):
            raise TypeError(f"{what} in numpy only; pass numpy arrays (torch works in charts with closed forms)")
        return fn(x)
    return guarded
