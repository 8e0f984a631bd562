r"""Curvature as a linear operator: SciPy interoperability and randomised estimators.

Every :class:`~infogeo.nn.curvature.base.Curvature` (and the network metric, through
``space.metric.at()``) is a symmetric linear operator :math:`C` on the flat
parameter vector (layout order of ``model.named_parameters()``).  This module
needs only its products ``C @ v``:

* :func:`to_scipy` — a :class:`scipy.sparse.linalg.LinearOperator`;
* :func:`hutchinson_trace` — :math:`\operatorname{tr} C \approx \frac1S\sum_s z_s^T C z_s`
  with Rademacher probes :math:`z_s` (Hutchinson 1989), unbiased;
* :func:`hutchpp_trace` — Hutch++ (Meyer, Musco, Musco & Woodruff 2021): the trace on a
  sketched range :math:`Q` exactly, Hutchinson on the deflated rest; unbiased, with
  variance :math:`O(1/S^2)` instead of :math:`O(1/S)` for low effective rank;
* :func:`hutchinson_diagonal` — :math:`\operatorname{diag} C \approx \frac1S\sum_s z_s\odot Cz_s`
  (Bekas, Kokiopoulou & Saad 2007), unbiased;
* :func:`top_eigenvalues` — the largest eigenvalues by Lanczos (ARPACK through
  :func:`scipy.sparse.linalg.eigsh`), as used for sharpness studies.

The estimators return an :class:`Estimate` with the standard error of the mean over
the probes.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np
import torch

from ...geometry.points import positive_int

__all__ = ["Estimate", "to_scipy", "hutchinson_trace", "hutchpp_trace", "hutchinson_diagonal", "top_eigenvalues"]


class Estimate(NamedTuple):
    """A randomised estimate: its ``value`` and the standard error of the mean over the probes."""

    value: torch.Tensor
    stderr: torch.Tensor


def _like(C: Any) -> torch.Tensor:
    return C._reference()


def _rademacher(C: Any, k: int, generator: Optional[torch.Generator]) -> torch.Tensor:
    """``k`` Rademacher probes as the columns of a ``(P, k)`` matrix."""
    ref = _like(C)
    z = torch.randint(0, 2, (C.layout.size, k), generator=generator, device="cpu").to(ref)
    return 2 * z - 1


def _check_samples(samples: int, least: int = 1) -> int:
    return positive_int(samples, "samples", least)


def to_scipy(C: Any) -> Any:
    r"""``C`` as a :class:`scipy.sparse.linalg.LinearOperator` of shape ``(P, P)`` (float64, on the CPU).

    Vectors are flat in the layout order; products run in the curvature's own dtype
    and device and are copied back.  The operator is symmetric (``rmatvec = matvec``).
    """
    from scipy.sparse.linalg import LinearOperator
    ref = _like(C)
    P = C.layout.size

    def matmat(X: np.ndarray) -> np.ndarray:
        X = np.asarray(X)
        out = C @ torch.as_tensor(X, dtype=ref.dtype, device=ref.device)
        return out.detach().cpu().double().numpy()

    def matvec(x: np.ndarray) -> np.ndarray:
        return matmat(np.asarray(x).reshape(-1)).reshape(np.shape(x))

    return LinearOperator((P, P), matvec=matvec, rmatvec=matvec, matmat=matmat, rmatmat=matmat, dtype=np.float64)


def hutchinson_trace(C: Any, samples: int = 30, *, generator: Optional[torch.Generator] = None) -> Estimate:
    r"""Hutchinson's estimator :math:`\frac1S\sum_{s=1}^S z_s^T C z_s`, :math:`z_s` Rademacher (``samples`` products)."""
    S = _check_samples(samples, 2)
    Z = _rademacher(C, S, generator)
    t = (Z * (C @ Z)).sum(0)
    return Estimate(t.mean(), t.std() / S ** 0.5)


def hutchpp_trace(C: Any, samples: int = 30, *, generator: Optional[torch.Generator] = None) -> Estimate:
    r"""Hutch++ with about ``samples`` products: :math:`\operatorname{tr}(Q^TCQ) + \operatorname{tr}_\text{Hutch}((I-QQ^T)C(I-QQ^T))`.

    A third of the products sketch the range of :math:`C` (:math:`Q` = orthonormal basis
    of :math:`C\,\Omega`), a third evaluate :math:`Q^T C Q`, and the rest are Hutchinson
    probes of the deflated operator; the standard error is that of those probes.
    """
    S = _check_samples(samples, 6)
    k = S // 3
    m = S - 2 * k
    Q, _ = torch.linalg.qr(C @ _rademacher(C, k, generator))
    exact = (Q * (C @ Q)).sum()
    G = _rademacher(C, m, generator)
    G = G - Q @ (Q.T @ G)  # (I - QQ^T) g
    t = (G * (C @ G)).sum(0)
    return Estimate(exact + t.mean(), t.std() / m ** 0.5)


def hutchinson_diagonal(C: Any, samples: int = 30, *, generator: Optional[torch.Generator] = None) -> Estimate:
    r"""The diagonal estimator :math:`\frac1S\sum_s z_s \odot C z_s` (flat, layout order), :math:`z_s` Rademacher."""
    S = _check_samples(samples, 2)
    Z = _rademacher(C, S, generator)
    d = Z * (C @ Z)
    return Estimate(d.mean(1), d.std(1) / S ** 0.5)


def top_eigenvalues(C: Any, k: int = 1, *, tol: float = 0.0, max_iter: Optional[int] = None) -> torch.Tensor:
    r"""The ``k`` largest (algebraic) eigenvalues of the symmetric ``C``, in decreasing order, by Lanczos.

    Uses :func:`scipy.sparse.linalg.eigsh` on :func:`to_scipy`; operators with at most
    ``k + 1`` rows are densified instead (ARPACK needs ``k < P``).
    """
    from scipy.sparse.linalg import eigsh
    P = C.layout.size
    if positive_int(k, "k") > P:
        raise ValueError(f"k must be an integer in [1, {P}], got {k}")
    ref = _like(C)
    if k + 1 >= P:
        M = C @ torch.eye(P, dtype=ref.dtype, device=ref.device)
        lam = torch.linalg.eigvalsh(0.5 * (M + M.T))
    else:
        lam = torch.as_tensor(eigsh(to_scipy(C), k=int(k), which="LA", tol=tol, maxiter=max_iter,
                                    return_eigenvectors=False))
    return torch.sort(lam.to(torch.float64).cpu(), descending=True).values[:k]
