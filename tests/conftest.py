import numpy as np
import pytest

import infogeo as ig

B = ig.backend


def rosen(x):
    """The Rosenbrock map (Rosenbrock 1960) with a = 1, b = 100: outputs (1 - x0, 10 (x1 - x0^2))."""
    return B.stack([1 - x[0], 10 * (x[1] - x[0] ** 2)])


def rosen_cost(x):
    return B.sum(rosen(x) ** 2)


def half_plane_metric():
    """Poincaré half-plane metric (1/y^2) I, given only as a function of the point."""
    return ig.MatrixMetric(lambda x: B.stack([B.stack([1 / x[1] ** 2, 0 * x[0]]),
                                              B.stack([0 * x[0], 1 / x[1] ** 2])]), dim=2)


def half_plane_dist(a, b):
    return np.arccosh(1 + ((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) / (2 * a[1] * b[1]))


@pytest.fixture(params=["numpy", "torch"])
def backend_name(request):
    if request.param == "torch":
        pytest.importorskip("torch")
    return request.param


def as_backend(x, name):
    """The numpy array ``x`` as an array of backend ``name`` (float64)."""
    if name == "torch":
        import torch
        return torch.tensor(np.asarray(x, dtype=float), dtype=torch.float64)
    return np.asarray(x, dtype=float)


def fd_jacobian(f, x, h=1e-6):
    """Central finite-difference Jacobian of a numpy function."""
    x = np.asarray(x, dtype=float)
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        cols.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * h))
    return np.stack(cols, axis=-1)
