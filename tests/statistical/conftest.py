"""Shared cases: every family of the statistical layer, including one prototyped from t and psi."""
import numpy as np
import pytest
from scipy.special import gammaln

import infogeo as ig
from infogeo import backend as B


def poisson():
    """A family written by a user: t(x) = x, psi(theta) = exp(theta), h(x) = 1/x!."""
    return ig.ExponentialFamily(
        sufficient_statistics=lambda x: np.asarray(x, dtype=float).reshape(-1, 1),
        log_partition=lambda th: B.exp(th[0]), dim=1,
        log_base_measure=lambda x: -gammaln(np.asarray(x, dtype=float) + 1),
        sampler=lambda th, n, rng: rng.poisson(np.exp(th[0]), n),
        name="Poisson")


def make(name):
    return {
        "poisson": poisson,
        "bernoulli": ig.Bernoulli,
        "categorical3": lambda: ig.Categorical(3),
        "independence2": lambda: ig.IndependenceModel(2),
        "gauss1": lambda: ig.Gaussian(dim=1),
        "gauss2": lambda: ig.Gaussian(dim=2),
        "diag2": lambda: ig.Gaussian(dim=2, covariance="diagonal"),
        "fixed2": lambda: ig.Gaussian(dim=2, covariance="fixed", cov=[[1.5, 0.4], [0.4, 0.8]]),
        "zeromean2": lambda: ig.Gaussian(dim=2, covariance="zero_mean"),
    }[name]()


FAMILY_NAMES = ["poisson", "bernoulli", "categorical3", "independence2", "gauss1", "gauss2",
                "diag2", "fixed2", "zeromean2"]
CHARTS = ["natural", "mean", "standard"]


def points(M, n=2, seed=0):
    """n reproducible random points of M (in M's chart)."""
    rng = np.random.default_rng(seed)
    if M.name == "Poisson":
        return [M.from_chart(B.array([rng.uniform(-0.5, 1.0)]), "natural") for _ in range(n)]
    return [M.random_point(rng) for _ in range(n)]


@pytest.fixture(params=FAMILY_NAMES)
def family(request):
    return make(request.param)


@pytest.fixture(params=CHARTS)
def chart(request):
    return request.param
