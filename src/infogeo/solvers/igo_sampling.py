r"""Standard normal samples for the IGO search: independent, or orthogonal within a population.

The IGO step (:mod:`~infogeo.solvers.igo`) is a Monte Carlo estimate of a
natural gradient, :math:`\sum_i w_i \nabla\log p(x_{i:\lambda})` with
:math:`x_i = m + \sigma C^{1/2} z_i`.  Any joint law of
:math:`z_1, \ldots, z_\lambda` whose *marginals* are :math:`N(0, I_d)` leaves
each term's expectation, hence the expected update under random selection,
unchanged; what it changes is the variance of the estimate.

*Orthogonal sampling* (Wang, Emmerich & Bäck 2019) draws the directions of a
population as an orthonormal frame and their lengths independently:
:math:`z_i = r_i u_i` with :math:`(u_1, \ldots, u_k)` uniform on the Stiefel
manifold of :math:`k \le d` orthonormal vectors (the :math:`Q` factor of the
QR decomposition of a :math:`d \times k` Gaussian matrix, signs fixed so that
:math:`R` has a positive diagonal) and :math:`r_i \sim \chi_d` independent.
Each :math:`u_i` is uniform on the sphere and independent of :math:`r_i`, so
each :math:`z_i` is exactly :math:`N(0, I_d)`; populations larger than
:math:`d` are filled with independent frames of at most :math:`d` vectors.
Within a frame the cross terms :math:`z_i^T z_j` vanish, so the recombined
step has :math:`\|\sum_i w_i z_i\|^2 = \sum_i w_i^2 r_i^2` exactly: the
samples cover more distinct directions than independent ones (no two nearly
parallel), which is what makes the estimate less noisy.
"""
from __future__ import annotations

import numpy as np

__all__ = ["SAMPLINGS", "standard_normal_samples", "orthogonal_normal"]

SAMPLINGS = ("orthogonal", "independent")


def orthogonal_normal(rng: np.random.Generator, n_samples: int, dim: int) -> np.ndarray:
    r"""``(n_samples, dim)`` rows, each :math:`N(0, I_d)`, mutually orthogonal within blocks of ``dim`` rows.

    Row :math:`i` is :math:`r_i u_i` with :math:`u` the columns of a Haar-distributed
    :math:`d \times k` orthonormal frame and :math:`r_i \sim \chi_d` (see the module
    docstring); consecutive blocks of :math:`k = \min(d, \text{rows left})` rows use
    independent frames.
    """
    blocks = []
    left = int(n_samples)
    while left > 0:
        k = min(dim, left)
        Q, R = np.linalg.qr(rng.standard_normal((dim, k)))
        # Q R is unique once diag(R) > 0; with that sign convention Q is Haar-distributed
        U = Q * np.where(np.diag(R) < 0, -1.0, 1.0)
        blocks.append(U.T * np.sqrt(rng.chisquare(dim, size=k))[:, None])
        left -= k
    return np.vstack(blocks) if blocks else np.zeros((0, dim))


def standard_normal_samples(rng: np.random.Generator, n_samples: int, dim: int, sampling: str) -> np.ndarray:
    """``(n_samples, dim)`` standard normal rows, ``sampling`` one of :data:`SAMPLINGS`."""
    if sampling == "orthogonal":
        return orthogonal_normal(rng, n_samples, dim)
    if sampling == "independent":
        return rng.standard_normal((n_samples, dim))
    raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
