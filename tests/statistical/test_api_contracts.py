"""The calling contract of every family in every chart: a batch gives the loop of single calls, torch tensors
give the numpy numbers (or a TypeError that says the computation is numpy-only), and no caller array is ever
written to."""
import numpy as np
import pytest

from infogeo import backend as B

from .test_reference_fisher import CONTRIBUTED, CORE, family

GENERIC_GEODESICS = {"beta", "gamma", "dirichlet", "von_mises", "wishart"}   # ODE geodesics: slow, tested elsewhere


def _np(a):
    return np.asarray(B.to_numpy(a.components if hasattr(a, "components") else a), dtype=float)


def _cases():
    for name in CORE + CONTRIBUTED:
        for chart in family(name).charts:
            yield name, chart


def _ops(M, name, chart):
    """Operations of two points (or batches) ``a, b`` in the current chart."""
    ops = {"kl": lambda a, b: M.kl(a, b), "matrix": lambda a, b: M.metric.matrix(a),
           "to_natural": lambda a, b: M.to_chart(a, "natural")}
    if chart == "mean" and name in CONTRIBUTED:
        return ops          # Legendre inversion by Newton's method, point by point: the cheap operations only
    ops.update({"to_standard": lambda a, b: M.to_chart(a, "standard"),
                "from_natural": lambda a, b: M.from_chart(M.to_chart(b, "natural"), "natural"),
                "inner": lambda a, b: M.metric.inner(M.vector(a, 0.01 * (b - a)), M.vector(a, 0.02 * (b - a)))})
    if name not in GENERIC_GEODESICS:
        ops.update({"dist": lambda a, b: M.dist(a, b), "log": lambda a, b: M.log(a, b),
                    "exp": lambda a, b: M.exp(a, M.vector(a, 0.2 * M.log(a, b).components))})
    return ops


def _points(M, n, seed):
    rng = np.random.default_rng(seed)
    return np.stack([_np(M.random_point(rng)) for _ in range(n)])


@pytest.mark.parametrize("name, chart", list(_cases()))
def test_batches_equal_loops_and_caller_arrays_are_untouched(name, chart):
    M = family(name).in_chart(chart)
    P, Q = _points(M, 6, 1).reshape(2, 3, M.dim), _points(M, 6, 2).reshape(2, 3, M.dim)
    P0, Q0 = P.copy(), Q.copy()
    for op, f in _ops(M, name, chart).items():
        batched = _np(f(P, Q))
        loop = np.array([[_np(f(P[i, j], Q[i, j])) for j in range(3)] for i in range(2)])
        np.testing.assert_allclose(batched, loop, rtol=1e-9, atol=1e-12, err_msg=f"{name} {chart} {op}")
        # one point against a batch broadcasts
        np.testing.assert_allclose(_np(f(P[0, 0], Q[1])), loop[0, 0] if op in ("matrix", "to_natural", "to_standard")
                                   else np.array([_np(f(P[0, 0], Q[1, j])) for j in range(3)]),
                                   rtol=1e-9, atol=1e-12, err_msg=f"{name} {chart} {op} broadcast")
        assert np.array_equal(P, P0) and np.array_equal(Q, Q0), f"{name} {chart} {op} wrote to its arguments"


@pytest.mark.parametrize("name, chart", list(_cases()))
def test_torch_gives_the_numpy_numbers_or_a_clear_type_error(name, chart):
    torch = pytest.importorskip("torch")
    M = family(name).in_chart(chart)
    a, b = _points(M, 2, 3)
    for op, f in _ops(M, name, chart).items():
        expected = _np(f(a, b))
        ta = torch.tensor(a, requires_grad=True)
        try:
            out = f(ta, torch.tensor(b))
        except TypeError as exc:
            assert "numpy" in str(exc), f"{name} {chart} {op}: {exc}"
            continue
        out = out.components if hasattr(out, "components") else out
        assert isinstance(out, torch.Tensor), f"{name} {chart} {op} returned {type(out).__name__}"
        np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-9, atol=1e-12, err_msg=f"{name} {chart} {op}")


@pytest.mark.parametrize("name", CORE + CONTRIBUTED)
def test_observation_methods_batch_and_leave_their_inputs_alone(name):
    M = family(name)
    P = _points(M, 4, 5).reshape(2, 2, M.dim)
    x = np.asarray(M.sample(P[0, 0], 3, rng=0))
    P0, x0 = P.copy(), x.copy()
    lp, sc = _np(M.log_prob(P, x)), _np(M.score(P, x))
    assert lp.shape == (2, 2, 3) and sc.shape == (2, 2, 3, M.dim)
    np.testing.assert_allclose(lp[1, 0], _np(M.log_prob(P[1, 0], x)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sc[0, 1], _np(M.score(P[0, 1], x)), rtol=1e-10, atol=1e-12)
    draws = np.asarray(M.sample(P, 2, rng=4))
    assert draws.shape[:3] == (2, 2, 2)
    assert np.array_equal(P, P0) and np.array_equal(x, x0)
