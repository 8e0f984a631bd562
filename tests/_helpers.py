"""Small manifolds written with the core API only, for tests that must not depend on ``infogeo.statistical``."""
from __future__ import annotations

import numpy as np

import infogeo as ig
from infogeo import backend as B


class UnivariateGaussianChart(ig.Manifold):
    r"""N(mu, sigma^2) in the chart (mu, sigma) with the Fisher metric diag(1, 2) / sigma^2.

    Written independently of the statistical module: the metric and the KL are the textbook closed forms
    (closed form: KL(p0||p1) = log(s1/s0) + (s0^2 + (m0 - m1)^2) / (2 s1^2) - 1/2).
    """

    def __init__(self):
        metric = ig.MatrixMetric(lambda x: B.diag(B.stack([1.0 / x[1] ** 2, 2.0 / x[1] ** 2])), dim=2)
        super().__init__(2, metric, domain=lambda x: bool(x[1] > 0), domain_description="sigma > 0",
                         name="UnivariateGaussianChart")

    def kl(self, p, q):
        m0, s0, m1, s1 = p[0], p[1], q[0], q[1]
        return B.log(s1 / s0) + (s0 ** 2 + (m0 - m1) ** 2) / (2 * s1 ** 2) - 0.5

    def fisher(self, x):
        return self.metric.matrix(x)

    def random_point(self, rng=None, scale=1.0):
        rng = np.random.default_rng(rng)
        return B.array([rng.normal(), float(np.exp(0.5 * rng.normal()))])


def fisher_rao_normal(p, q):
    """Closed-form Fisher-Rao distance between N(m0, s0^2) and N(m1, s1^2) (hyperbolic, curvature -1/2)."""
    m0, s0, m1, s1 = map(float, (p[0], p[1], q[0], q[1]))
    arg = 1.0 + ((m0 - m1) ** 2 / 2.0 + (s0 - s1) ** 2) / (2.0 * s0 * s1)
    return float(np.sqrt(2.0) * np.arccosh(arg))


def load_benchmark(name):
    """The module ``benchmarks/<name>.py``, loaded with its folder importable (for its ``_``-prefixed helpers)."""
    import importlib.util
    import sys
    from pathlib import Path
    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(f"_benchmark_{name}", folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(folder))
