"""Fuzz the statistical layer with hypothesis: random valid inputs keep the exact properties, random
invalid inputs end in a clear ValueError/TypeError and never in NaN.

Outcomes are counted per test in ``OUTCOMES`` and printed at the end of the module (``pytest -s``).
"""
import collections

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import infogeo as ig

OUTCOMES = collections.Counter()
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

pos = st.floats(0.1, 10.0)
real = st.floats(-5.0, 5.0)


def _probs(k):
    return st.lists(st.floats(0.05, 1.0), min_size=k, max_size=k).map(lambda w: np.array(w) / np.sum(w))


# family name -> (manifold, strategy of one point in the standard chart)
FAMILIES = {
    "univariate": (ig.Gaussian(dim=1), st.tuples(real, pos).map(np.array)),
    "diagonal": (ig.Gaussian(dim=2, covariance="diagonal"), st.tuples(real, real, pos, pos).map(np.array)),
    "full": (ig.Gaussian(dim=2), st.tuples(real, real, st.floats(0.5, 3.0), st.floats(-0.4, 0.4),
                                           st.floats(0.5, 3.0)).map(np.array)),
    "fixed": (ig.Gaussian(dim=2, covariance="fixed", cov=[[2.0, 0.3], [0.3, 1.0]]),
              st.tuples(real, real).map(np.array)),
    "zero_mean": (ig.Gaussian(dim=2, covariance="zero_mean"),
                  st.tuples(st.floats(0.5, 3.0), st.floats(-0.4, 0.4), st.floats(0.5, 3.0)).map(np.array)),
    "categorical": (ig.Categorical(4), _probs(4).map(lambda p: p[:-1])),
    "bernoulli": (ig.Bernoulli(), st.floats(0.02, 0.98).map(lambda p: np.array([p]))),
    "independence": (ig.IndependenceModel(2), st.tuples(st.floats(0.05, 0.95), st.floats(0.05, 0.95)).map(np.array)),
    "poisson": (ig.load_manifold("poisson"), pos.map(lambda r: np.array([r]))),
    "exponential": (ig.load_manifold("exponential"), pos.map(lambda r: np.array([r]))),
    "multinomial": (ig.load_manifold("multinomial", k=3, n=5), _probs(3).map(lambda p: p[:-1])),
}
# families whose geodesics are iterative (shooting): fewer examples
SLOW = {"full"}


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print("\nfuzz outcomes:", dict(sorted(OUTCOMES.items())))


def _finite(x):
    return bool(np.all(np.isfinite(ig.backend.to_numpy(x))))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_valid_inputs_keep_the_exact_properties(name):
    M, point = FAMILIES[name]

    @(settings(max_examples=8, deadline=None) if name in SLOW else FAST)
    @given(point, point)
    def check(a, b):
        p, q = M.point(a), M.point(b)
        d, d_rev = float(M.dist(p, q)), float(M.dist(q, p))
        assert np.isfinite(d) and d >= 0 and d == pytest.approx(d_rev, rel=1e-7, abs=1e-9)
        assert float(M.kl(p, q)) >= -1e-10
        F = ig.backend.to_numpy(M.metric.matrix(p))
        assert np.allclose(F, F.T, atol=1e-10) and np.linalg.eigvalsh(F).min() > 0
        if name != "multinomial" or d < 2.5:   # exp of a long log may leave the simplex's chart
            v = M.log(p, q)
            np.testing.assert_allclose(M.exp(p, v), q, rtol=1e-6, atol=1e-8)
        batch = np.stack([p, q])
        np.testing.assert_allclose(M.dist(batch, batch[::-1]), [d, d_rev], rtol=1e-9, atol=1e-12)
        OUTCOMES["valid: properties held"] += 1

    check()


def _invalid(dim):
    """Coordinates that are not a point: NaN/inf, wrong shapes, booleans, complex numbers, text."""
    bad_float = st.sampled_from([np.nan, np.inf, -np.inf])
    return st.one_of(
        st.tuples(st.integers(0, dim - 1), bad_float).map(lambda t: np.where(np.arange(dim) == t[0], t[1], 0.5)),
        st.integers(1, 6).filter(lambda n: n != dim).map(lambda n: np.full(n, 0.5)),
        st.just(np.ones(dim, dtype=bool)),
        st.just(np.full(dim, 0.5 + 1j)),
        st.just("0.5"),
        st.just(None),
    )


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_invalid_inputs_raise_a_clear_error_never_nan(name):
    M, point = FAMILIES[name]
    ops = {"dist": lambda x, q: M.dist(x, q), "kl": lambda x, q: M.kl(x, q), "log": lambda x, q: M.log(x, q),
           "matrix": lambda x, q: M.metric.matrix(x), "check_point": lambda x, q: M.check_point(x),
           "to_natural": lambda x, q: M.to_chart(x, "natural"), "kl_second": lambda x, q: M.kl(q, x)}

    @FAST
    @given(_invalid(M.dim), point, st.sampled_from(sorted(ops)))
    def check(bad, good, op):
        with pytest.raises((ValueError, TypeError)):
            out = ops[op](bad, M.point(good))
            assert _finite(out.components if hasattr(out, "components") else out)   # a NaN would fail here
        OUTCOMES["invalid: refused with ValueError/TypeError"] += 1

    check()


@pytest.mark.parametrize("name", ["univariate", "diagonal", "categorical", "bernoulli", "independence", "poisson",
                                  "exponential", "zero_mean", "fixed"])
def test_points_off_the_domain_are_refused(name):
    """Finite coordinates of the right shape outside the domain (negative variances, off the simplex)."""
    M, point = FAMILIES[name]

    @FAST
    @given(point, st.integers(0, M.dim - 1), st.floats(-10.0, 0.0))
    def check(a, i, value):
        x = np.array(a, dtype=float)
        if name in ("categorical", "bernoulli"):
            x[i] = value if value < 0 else 1.5          # negative or beyond the simplex
        elif name == "univariate" or name == "diagonal":
            x[M.dim // 2 + i % (M.dim // 2)] = value      # a variance <= 0
        elif name == "independence":
            x[i] = value - 0.0 if value < 0 else 1.0
        elif name in ("poisson", "exponential"):
            x[0] = value
        elif name == "zero_mean":
            x[0] = value                                  # a diagonal entry <= 0: not SPD
        else:                                             # fixed covariance: every mean is valid
            OUTCOMES["off-domain: not applicable"] += 1
            return
        with pytest.raises(ValueError):
            M.dist(x, M.point(a))
        with pytest.raises(ValueError):
            M.kl(M.point(a), x)
        OUTCOMES["off-domain: refused with ValueError"] += 1

    check()


@pytest.mark.parametrize("name", ["univariate", "categorical", "poisson", "bernoulli"])
def test_invalid_observations_are_refused(name):
    M, point = FAMILIES[name]

    @FAST
    @given(point, st.one_of(st.just([]), st.lists(st.sampled_from([np.nan, np.inf, -3.5, 7.25]), min_size=1,
                                                  max_size=4)))
    def check(a, obs):
        p = M.point(a)
        obs = np.array(obs, dtype=float)
        if name == "univariate" and obs.size and np.all(np.isfinite(obs)):
            OUTCOMES["observations: valid for this family"] += 1
            assert _finite(M.log_prob(p, obs))
            return
        with pytest.raises(ValueError):
            M.log_likelihood(p, obs)
        OUTCOMES["observations: refused with ValueError"] += 1

    check()


@pytest.mark.parametrize("M", [ig.Bernoulli(chart="natural"), ig.Categorical(3, chart="natural"),
                               ig.IndependenceModel(2, chart="natural")], ids=lambda M: M.name)
def test_natural_parameters_far_out_keep_kl_and_fisher_finite(M):
    """Any real logits are points: KL stays finite and >= 0 and the Fisher matrix keeps a positive diagonal
    where probabilities round to 0 or 1; log refuses or stays finite, never NaN."""
    logits = st.lists(st.floats(-60.0, 60.0), min_size=M.dim, max_size=M.dim).map(np.array)

    @FAST
    @given(logits, logits)
    def check(a, b):
        kl = float(M.kl(a, b))
        assert np.isfinite(kl) and kl >= -1e-12
        F = ig.backend.to_numpy(M.fisher(a))
        s = np.sqrt(np.diag(F))
        assert np.all(s > 0) and np.allclose(F, F.T, rtol=0, atol=0)
        # positive semi-definite to rounding: two logits far out and close together leave a direction of
        # curvature ~ p_k (the reference's probability) against ~1 on the diagonal, below double precision
        assert np.linalg.eigvalsh(F / np.outer(s, s)).min() >= -1e-14
        try:
            v = M.log(a, b).components
        except ValueError as exc:
            assert "boundary" in str(exc)
            OUTCOMES["far logits: log refused (rounds onto the boundary)"] += 1
        else:
            assert _finite(v)
        OUTCOMES["far logits: kl and Fisher finite"] += 1

    check()
