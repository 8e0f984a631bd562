"""exp, log and the inner product against geomstats' information-geometry spaces on the same inputs, with the
points and tangent vectors converted here (not by ``infogeo.interop``): univariate, diagonal and centred
normals, categorical, multinomial, Poisson and exponential distributions.

geomstats' conventions: univariate normals are ``(mu, sigma)``; diagonal normals are points
``(mu, sigma^2)`` whose tangent vectors are ``(d mu, d sigma)``; centred normals and categorical
distributions live in their ambient matrices / probability vectors; ``exp(v, x)`` and ``log(y, x)``
take the base point last.
"""
import numpy as np
import pytest

import infogeo as ig
from infogeo import backend as B

pytest.importorskip("geomstats")
from geomstats.information_geometry import categorical, exponential, multinomial, normal, poisson  # noqa: E402

from ._references import unvech, vech  # noqa: E402


def _np(a):
    return np.asarray(B.to_numpy(a.components if hasattr(a, "components") else a), dtype=float)


# name -> (infogeo manifold, geomstats space, point ours -> theirs, point theirs -> ours,
#          vector ours -> theirs at our point, vector theirs -> ours at our point)
def _cases():
    d = 2
    k = 3
    full = lambda p: np.append(p, 1.0 - p.sum())  # noqa: E731
    return {
        "univariate": (ig.Gaussian(dim=1).in_chart("mean_std"), normal.UnivariateNormalDistributions(),
                       lambda x: x, lambda y: y, lambda x, v: v, lambda x, w: w),
        "diagonal": (ig.Gaussian(dim=d, covariance="diagonal"), normal.DiagonalNormalDistributions(d),
                     lambda x: x, lambda y: y,
                     lambda x, v: np.concatenate([v[:d], v[d:] / (2 * np.sqrt(x[d:]))]),
                     lambda x, w: np.concatenate([w[:d], w[d:] * 2 * np.sqrt(x[d:])])),
        "centered": (ig.Gaussian(dim=d, covariance="zero_mean"), normal.CenteredNormalDistributions(d),
                     lambda x: unvech(x, d), vech, lambda x, v: unvech(v, d), lambda x, w: vech(w)),
        "categorical": (ig.Categorical(k), categorical.CategoricalDistributions(k - 1), full, lambda y: y[:-1],
                        lambda x, v: np.append(v, -v.sum()), lambda x, w: w[:-1]),
        "multinomial": (ig.load_manifold("multinomial", k=k, n=5), multinomial.MultinomialDistributions(k - 1, 5),
                        full, lambda y: y[:-1], lambda x, v: np.append(v, -v.sum()), lambda x, w: w[:-1]),
        "poisson": (ig.load_manifold("poisson"), poisson.PoissonDistributions(),
                    lambda x: x, lambda y: y, lambda x, v: v, lambda x, w: w),
        "exponential": (ig.load_manifold("exponential"), exponential.ExponentialDistributions(),
                        lambda x: x, lambda y: y, lambda x, v: v, lambda x, w: w),
    }


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_exp_log_and_inner_product_agree_with_geomstats(name):
    M, space, to_gs, from_gs, vec_to_gs, vec_from_gs = CASES[name]
    rng = np.random.default_rng(21)
    for _ in range(2):
        x, y = _np(M.random_point(rng)), _np(M.random_point(rng))
        v = _np(M.log(x, y))
        # log: the same tangent vector
        theirs = np.asarray(space.metric.log(to_gs(y), to_gs(x)))
        np.testing.assert_allclose(v, vec_from_gs(x, theirs), rtol=1e-9, atol=1e-11, err_msg=f"{name} log")
        # exp of a random vector of moderate length
        u = rng.standard_normal(M.dim)
        u *= 0.4 / float(M.metric.norm(M.vector(x, u)))
        ours = _np(M.exp(x, M.vector(x, u)))
        end = np.asarray(space.metric.exp(vec_to_gs(x, u), to_gs(x)))
        np.testing.assert_allclose(ours, from_gs(end), rtol=1e-9, atol=1e-11, err_msg=f"{name} exp")
        # inner product of two vectors
        inner = float(space.metric.inner_product(vec_to_gs(x, u), vec_to_gs(x, v), to_gs(x)))
        assert float(M.metric.inner(M.vector(x, u), M.vector(x, v))) == pytest.approx(inner, rel=1e-10)
        assert float(M.dist(x, y)) == pytest.approx(float(space.metric.dist(to_gs(x), to_gs(y))), rel=1e-10)
